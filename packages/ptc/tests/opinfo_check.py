"""Checking PyTorch's OpInfo samples through a compiler against eager: selection, isolated runs,
comparison and a verdict per op.

One copy of these rules serves both users: ``test_opinfo_sweep.py`` (CI: ptc only, one float32
sample per op on the CPU) and ``tools/opinfo_sweep.py`` (which imports this file by path and adds
torch.compile as the peer, other devices, dtypes and sample counts). The tool imports the test
helper and not the other way round because the test must run from an installed ``ptc`` package
alone (the nox session has no ``tools/``), while the tool always runs from the repository.

Rules, decided once here:

- An op is swept on a device and dtype when OpInfo says it supports that dtype there; its
  first ``count`` samples (generated after ``torch.manual_seed(0)``) are used.
- A sample is *skipped* when it cannot be given to a compiled function as plain strided tensors
  (sparse, nested or quantized tensors; a tensor inside a dict) or when eager itself raises on it.
- OpInfo's ``wrapper_set_seed`` (a seed set inside random ops' functions) is replaced by a direct
  call: the seed is set before every run instead.
- Every run (eager or compiled) gets fresh copies of the sample's tensors, with the same strides,
  after ``torch.manual_seed(seed)``, so in-place ops do not leak between runs.
- Values are compared only when eager's are reproducible: not when eager dispatches an aten op
  tagged ``nondeterministic_seeded`` (random ops: ``bernoulli``, ``dropout`` ...), not when OpInfo
  marks the op ``has_nondeterministic_output`` (uninitialized memory: ``empty`` ...) or
  ``skip_correctness_check_compile_vs_eager``, and not when two eager runs with the same seed
  differ. Then only structure, dtypes, shapes, devices and dense strides are compared: a
  compiler is not required to reproduce eager's random stream.
- Values use ``ptc_spec.testing.assert_same`` (dtype-aware tolerances, NaN positions equal);
  strides are compared where eager's output is non-empty, non-overlapping and dense (dims of
  size 1 are ignored); inputs are compared after the call too (mutations).
- Verdicts, worst first: ``wrong`` (the compiled function ran and differs from eager), ``error``
  (it raised: exception type and first line), ``pass``, ``skipped``. An op's verdict is the worst
  over its samples, ``skipped`` only when every sample was.
"""

from __future__ import annotations

import itertools
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ptc_spec.testing import assert_same

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
RANK = {"wrong": 0, "error": 1, "pass": 2, "skipped": 3}
KNOWN_FAILURES = Path(__file__).with_name("opinfo_known_failures.txt")


@dataclass(frozen=True, slots=True)
class Compiler:
    """How to compile a function and forget everything compiled so far."""

    name: str
    compile: Callable[[Callable[..., Any]], Callable[..., Any]]
    reset: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one op (or sample) under one compiler."""

    status: str
    detail: str = ""
    seconds: float = 0.0

    @property
    def category(self) -> str:
        """A short reason: ``error: NoDecompositionError``, ``wrong: values``, or the status."""
        if self.status == "error":
            return f"error: {self.detail.split(':', 1)[0]}"
        if self.status == "wrong":
            return f"wrong: {_wrong_kind(self.detail)}"
        return self.status


_KIND = re.compile(r"^(?:inputs after the call: )?(?:[\w\[\] ]+: )?(structure|dtype|shape|device|stride)\b")


def _wrong_kind(detail: str) -> str:
    found = _KIND.match(detail)
    return found.group(1) if found else "values"


def op_id(op: Any) -> str:
    """The op's name with its variant, ``name.variant``, as used in reports and the failure list."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def select_ops(device: str, dtype: torch.dtype, pattern: str | None = None) -> list[Any]:
    """OpInfo entries that support ``dtype`` on ``device``, whose id matches ``pattern`` (a regex)."""
    from torch.testing._internal import common_methods_invocations

    # OpInfo wraps random ops as ``wrapper_set_seed(op, ...)``, which calls torch.manual_seed
    # inside the function; compilers refuse that or run it eagerly, which says nothing about the
    # op. The sweep seeds before every run itself, so the op is called directly instead.
    vars(common_methods_invocations)["wrapper_set_seed"] = _call
    chosen = []
    for op in common_methods_invocations.op_db:
        if pattern is not None and not re.search(pattern, op_id(op)):
            continue
        if dtype in op.supported_dtypes(device):
            chosen.append(op)
    return chosen


def _call(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


def samples(op: Any, device: str, dtype: torch.dtype, count: int) -> list[Any]:
    """The op's first ``count`` samples, reproducible across processes."""
    torch.manual_seed(0)
    return list(itertools.islice(op.sample_inputs(device, dtype, requires_grad=False), count))


# What torch 2.13's OpInfo marks has_nondeterministic_output (uninitialized memory, and the
# attention kernels' unspecified extra outputs).
_NONDETERMINISTIC = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward",
})  # fmt: skip


class _Unusable(Exception):
    """The sample cannot be passed to a compiled function as plain strided tensors."""


@dataclass(frozen=True, slots=True)
class _Call:
    """A sample as a function of its tensors only: the other arguments are baked in as constants."""

    fn: Callable[..., Any]
    tensors: tuple[torch.Tensor, ...]


def _as_call(op: Any, sample: Any) -> _Call:
    # The compiled frame holds one direct call with the sample's literal structure (lists and
    # tuples of tensors rebuilt from parameters), so a failure is about the op, not about
    # capturing pytree code.
    tensors: list[torch.Tensor] = []
    constants: dict[str, Any] = {"op": op.op}

    def render(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.is_nested or value.is_quantized:
                raise _Unusable(f"a {value.layout} tensor")
            tensors.append(value)
            return f"t{len(tensors) - 1}"
        if isinstance(value, list | tuple) and type(value) in (list, tuple) and any(
            isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value)
        ):
            inner = ", ".join(render(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner},)"
        if any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value)):
            raise _Unusable(f"tensors inside a {type(value).__name__}")
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    parts = [render(sample.input), *(render(a) for a in sample.args)]
    parts += [f"{key}={render(value)}" for key, value in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    source = f"def sample_fn({params}):\n    return op({', '.join(parts)})\n"
    namespace = dict(constants)
    exec(compile(source, f"<opinfo sample of {op_id(op)}>", "exec"), namespace)
    return _Call(namespace["sample_fn"], tuple(tensors))


def _copy(t: torch.Tensor) -> torch.Tensor:
    if _dense_strides(t):
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        return out.copy_(t.detach())
    return t.detach().clone()


def _dense_strides(t: torch.Tensor) -> bool:
    """True when ``t`` is non-overlapping and dense, i.e. its strides are a permutation of a contiguous layout."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _run(call: _Call, seed: int) -> tuple[Any, list[torch.Tensor]]:
    copies = [_copy(t) for t in call.tensors]
    torch.manual_seed(seed)
    return call.fn(*copies), copies


class _SeededOps(TorchDispatchMode):
    """Notes whether eager calls an aten op tagged ``nondeterministic_seeded`` (a random op)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves this __init__ untyped
        self.found = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.found = self.found or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def compare(actual: Any, expected: Any, *, values: bool = True) -> str | None:
    """None when ``actual`` matches ``expected`` (see the module rules), else what differs."""
    if values:
        try:
            assert_same(actual, expected)
        except AssertionError as exc:
            return str(exc).splitlines()[0] if str(exc) else "values differ"
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if a_spec != e_spec:
        return f"structure differs: got {a_spec}, expected {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if not isinstance(e, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor):
            return f"output[{i}]: expected a tensor, got {type(a).__name__}"
        for what in ("dtype", "shape", "device"):
            if getattr(a, what) != getattr(e, what):
                return f"output[{i}]: {what} {getattr(a, what)}, expected {getattr(e, what)}"
        if e.numel() > 0 and _dense_strides(e):  # an empty tensor's strides mean nothing
            a_strides = [s for s, n in zip(a.stride(), a.shape) if n != 1]
            e_strides = [s for s, n in zip(e.stride(), e.shape) if n != 1]
            if a_strides != e_strides:
                return f"output[{i}]: stride {a.stride()}, expected {e.stride()}"
    return None


def _first_line(exc: BaseException) -> str:
    """``Type: first line`` of the innermost cause: a capture error wrapping NoDecompositionError
    is reported as the NoDecompositionError, which is what someone fixing it needs to know."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def check_sample(op: Any, sample: Any, compiler: Compiler, seed: int = 1) -> Verdict:
    """Run one sample eagerly and through ``compiler``; compare as the module rules say."""
    try:
        call = _as_call(op, sample)
    except _Unusable as exc:
        return Verdict("skipped", f"sample unusable: {exc}")
    seeded = _SeededOps()
    try:
        with seeded:
            expected, eager_inputs = _run(call, seed)
        again, _ = _run(call, seed)
    except Exception as exc:
        return Verdict("skipped", f"eager fails: {_first_line(exc)}")
    nondeterministic = getattr(op, "has_nondeterministic_output", None)
    if nondeterministic is None:
        # Older OpInfo (torch 2.11, the GPU machine's) lacks the flag.
        nondeterministic = op.name in _NONDETERMINISTIC
    values = not (op.skip_correctness_check_compile_vs_eager or nondeterministic or seeded.found)
    values = values and compare(again, expected) is None
    try:
        compiler.reset()
        compiled = compiler.compile(call.fn)
        actual, compiled_inputs = _run(_Call(compiled, call.tensors), seed)
    except Exception as exc:
        return Verdict("error", _first_line(exc))
    problem = compare(actual, expected, values=values)
    if problem is None:
        problem = compare(compiled_inputs, eager_inputs, values=values)
        problem = None if problem is None else f"inputs after the call: {problem}"
    return Verdict("pass") if problem is None else Verdict("wrong", problem)


def check_op(op: Any, device: str, dtype: torch.dtype, compiler: Compiler, count: int = 1) -> Verdict:
    """The worst verdict over the op's first ``count`` samples, with the time taken."""
    start = time.perf_counter()
    try:
        chosen = samples(op, device, dtype, count)
    except Exception as exc:
        return Verdict("skipped", f"sample generation fails: {_first_line(exc)}", time.perf_counter() - start)
    worst = Verdict("skipped", "no samples")
    for sample in chosen:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecation notices of the ops themselves
            verdict = check_sample(op, sample, compiler)
        if RANK[verdict.status] < RANK[worst.status]:
            worst = verdict
    return Verdict(worst.status, worst.detail, time.perf_counter() - start)


def section_name(device: str, dtype: str, count: int) -> str:
    """The known-failures section of one sweep configuration, e.g. ``cpu float32 samples=1``."""
    return f"{device} {dtype} samples={count}"


def read_known_failures(path: Path = KNOWN_FAILURES) -> dict[str, dict[str, str]]:
    """Section name -> {op id: reason category}; ``#`` starts a comment, ``[name]`` a section."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        if current is None:
            raise ValueError(f"{path}: '{line}' comes before any [section] line")
        name, _, reason = line.partition(" ")
        current[name] = reason.strip()
    return sections


def write_known_failures(section: str, verdicts: Iterable[tuple[str, Verdict]], path: Path = KNOWN_FAILURES) -> None:
    """Replace ``section`` of the known-failures file with the ops whose verdict is wrong or error."""
    sections = read_known_failures(path) if path.exists() else {}
    sections[section] = {name: v.category for name, v in sorted(verdicts) if v.status in ("wrong", "error")}
    lines = [HEADER]
    for name in sorted(sections):
        lines.append(f"\n[{name}]")
        width = max((len(op) for op in sections[name]), default=0) + 2
        lines += [f"{op.ljust(width)}{reason}" for op, reason in sections[name].items()]
    path.write_text("\n".join(lines) + "\n")


HEADER = """\
# OpInfo ops that ptc.compile(fullgraph=True, backend="inductor") fails today, per sweep
# configuration: `op[.variant]  status: category`. test_opinfo_sweep.py expects exactly these
# to fail (strict), so the list only shrinks. Regenerate a section from the current tree with
#   python tools/opinfo_sweep.py --ptc-only --device cpu --dtype float32 --samples 1 --write-known-failures
# and never edit it by hand except to delete an op that now passes."""


def summary(name: str, verdicts: Sequence[Verdict]) -> str:
    """``name: N passed, W wrong, E errors of T`` (skipped ones counted apart)."""
    counts = {s: sum(1 for v in verdicts if v.status == s) for s in RANK}
    total = len(verdicts) - counts["skipped"]
    return (f"{name}: {counts['pass']} passed, {counts['wrong']} wrong, {counts['error']} errors of {total} "
            f"({counts['skipped']} skipped)")
