"""Warm starts: a compiled program's graphs and plan written to a directory, and read back.

A program is keyed by *material*: bytes describing everything its graphs and plan depend on
(the function's graph and constants, the input metadata and Python values, training, the
partition, autocast and default-dtype state, a symbolic program's SymbolEnv, this format's
version). The caller's cache turns material into a key; ptc-aot never looks at the disk itself.
An entry holds ``forward.ptcg`` and ``backward.ptcg`` (ptc-spec graph files: safetensors and
JSON, no pickle) and ``plan.json`` (what the runtime wrapper needs besides the graphs). A
value the format cannot hold leaves the program uncached; an entry that cannot be read raises
:class:`CorruptProgramError`, which the cache answers by compiling again.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_spec import (
    PtcSpecError,
    SymbolEnv,
    TensorMeta,
    decode_value,
    dumps,
    encode_value,
    graph_fingerprint,
    load,
    resolve_target,
    target_name,
)

from .config import Config
from .errors import CorruptProgramError
from .partition import Tangents
from .sizes import SizeFn
from .tracing import OutputPlan
from .views import ViewStep

log = logging.getLogger("ptc.aot.cache")

FORMAT = "ptc-aot-program/1"
_FORWARD, _BACKWARD, _PLAN = "forward.ptcg", "backward.ptcg", "plan.json"
# Size arithmetic the runtime runs as Python builtins (sizes.py maps torch.sym_max to max...);
# every other SizeFn function is a graph-file target.
_BUILTINS = {"max": builtins.max, "min": builtins.min, "float": builtins.float}

T = TypeVar("T")


class ProgramCache(Protocol):
    """Where compiled programs persist across processes (ptc's ``ptc.cache.ProgramCache``).

    ``get`` returns ``load(directory)`` of the entry for ``material``, or None when there is
    none or ``load`` raised (the cache removes such an entry, so the program is compiled and
    stored again). ``put`` stores an entry: it calls ``write(directory)`` on a private directory
    and then moves it into place atomically.
    """

    def get(self, material: bytes, load: Callable[[str], T]) -> T | None: ...

    def put(self, material: bytes, write: Callable[[str], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class ProgramParts:
    """A program before its graphs are compiled: the graphs for the compilers and the wrapper's plan."""

    forward: torch.fx.GraphModule
    backward: torch.fx.GraphModule | None
    num_outputs: int
    mutated_inputs: tuple[int, ...]
    differentiable: tuple[bool, ...]
    outputs: tuple[OutputPlan, ...]
    out_spec: pytree.TreeSpec
    tangents: Tangents | None
    shape_env: SymbolEnv | None


def material(fn: Any, inputs: Sequence[Any], training: bool, config: Config, shape_env: SymbolEnv | None) -> bytes | None:
    """What the program of ``fn`` over ``inputs`` depends on, as bytes; None when it cannot be cached.

    Only GraphModules are cached: any other callable's code is not ours to describe.
    """
    if not isinstance(fn, torch.fx.GraphModule) or config.dump_dir is not None:
        return None
    try:
        graph = graph_fingerprint(fn)
        described = {
            "format": FORMAT,
            "inputs": [encode_value(v) if isinstance(v, TensorMeta) else [type(v).__qualname__, encode_value(v)] for v in inputs],
            "training": training,
            "grad": torch.is_grad_enabled(),
            "partition": config.partition,
            "joint_rewrite": None if config.joint_rewrite is None else config.joint_rewrite.name,
            # Autocast sits above the dispatch mode the trace runs under: it changes the ops traced.
            "autocast": [(d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d))) for d in ("cpu", "cuda")],
            "default_dtype": str(torch.get_default_dtype()),
            "shape_env": None if shape_env is None else encode_value(shape_env.state()),
        }
    except PtcSpecError as exc:
        log.debug("program not cached: %s", exc)
        return None
    return json.dumps(described, sort_keys=True).encode() + graph


def writer(parts: ProgramParts) -> Callable[[str], None] | None:
    """A function writing ``parts`` into a directory, or None when the format cannot hold them.

    Everything is serialized here, before any compiler sees the graphs.
    """
    try:
        files = {_FORWARD: dumps(parts.forward), _PLAN: json.dumps(_encode_plan(parts), sort_keys=True).encode()}
        if parts.backward is not None:
            files[_BACKWARD] = dumps(parts.backward)
    except (PtcSpecError, _Unstorable) as exc:
        log.debug("program not cached: %s", exc)
        return None

    def write(directory: str) -> None:
        for name, data in files.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)

    return write


def read(directory: str) -> ProgramParts:
    """The program stored in ``directory``; raises CorruptProgramError when it cannot be read."""
    try:
        with open(os.path.join(directory, _PLAN), "rb") as f:
            plan = json.loads(f.read())
        if plan.get("format") != FORMAT:
            raise CorruptProgramError(f"the cached program in {directory} has format {plan.get('format')!r}, not {FORMAT}")
        forward = load(os.path.join(directory, _FORWARD))
        backward = load(os.path.join(directory, _BACKWARD)) if plan["training"] else None
        return _decode_plan(plan, forward, backward)
    except CorruptProgramError:
        raise
    except (PtcSpecError, OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptProgramError(f"the cached program in {directory} cannot be read ({type(exc).__name__}: {exc})") from exc


class _Unstorable(Exception):
    """A plan value this format has no encoding for (the program is then not cached)."""


# -- the plan ----------------------------------------------------------------------------------
def _encode_plan(parts: ProgramParts) -> dict[str, Any]:
    try:
        out_spec = pytree.treespec_dumps(parts.out_spec)
    except Exception as exc:  # pytree raises several types for containers it cannot name
        raise _Unstorable(f"output structure {parts.out_spec}: {exc}") from exc
    tangents = None
    if parts.tangents is not None:
        tangents = {
            "zeros": [[encode_value(dtype), encode_value(device)] for dtype, device in parts.tangents.zeros],
            "of_grads": [sorted(g) for g in parts.tangents.of_grads],
        }
    return {
        "format": FORMAT,
        "training": parts.backward is not None,
        "num_outputs": parts.num_outputs,
        "mutated_inputs": list(parts.mutated_inputs),
        "differentiable": list(parts.differentiable),
        "outputs": [_encode_output(p) for p in parts.outputs],
        "out_spec": out_spec,
        "tangents": tangents,
        "shape_env": None if parts.shape_env is None else encode_value(parts.shape_env.state()),
    }


def _decode_plan(plan: dict[str, Any], forward: torch.fx.GraphModule, backward: torch.fx.GraphModule | None) -> ProgramParts:
    tangents = None
    if plan["tangents"] is not None:
        zeros = tuple((decode_value(d), decode_value(v)) for d, v in plan["tangents"]["zeros"])
        tangents = Tangents(zeros, tuple(frozenset(int(i) for i in g) for g in plan["tangents"]["of_grads"]))
    env = plan["shape_env"]
    return ProgramParts(
        forward,
        backward,
        int(plan["num_outputs"]),
        tuple(int(i) for i in plan["mutated_inputs"]),
        tuple(bool(d) for d in plan["differentiable"]),
        tuple(_decode_output(p) for p in plan["outputs"]),
        pytree.treespec_loads(plan["out_spec"]),
        tangents,
        None if env is None else SymbolEnv.from_state(decode_value(env)),
    )


def _encode_output(plan: OutputPlan) -> dict[str, Any]:
    return {
        "kind": plan.kind,
        "index": plan.index,
        "chain": [_encode_step(s) for s in plan.chain],
        "value": _encode(plan.value),
        "sized": plan.sized,
    }


def _decode_output(data: dict[str, Any]) -> OutputPlan:
    chain = tuple(_decode_step(s) for s in data["chain"])
    return OutputPlan(str(data["kind"]), int(data["index"]), chain, _decode(data["value"]), bool(data["sized"]))


def _encode_step(step: ViewStep) -> dict[str, Any]:
    return {
        "target": _target(step.target),
        "args": _encode(step.args),
        "kwargs": [[k, _encode(v)] for k, v in step.kwargs],
        "index": step.index,
    }


def _decode_step(data: dict[str, Any]) -> ViewStep:
    target = resolve_target(data["target"])
    if not isinstance(target, torch._ops.OpOverload):
        raise CorruptProgramError(f"view step target {data['target']!r} is not an aten op")
    args = _decode(data["args"])
    kwargs = tuple((str(k), _decode(v)) for k, v in data["kwargs"])
    index = data["index"]
    return ViewStep(target, args, kwargs, None if index is None else int(index))


def _target(fn: Any) -> str:
    try:
        return target_name(fn)
    except PtcSpecError as exc:
        raise _Unstorable(str(exc)) from exc


# Values in plans: view arguments and constants (graph-file values) with SizeFns anywhere in
# their lists and tuples.
def _encode(value: Any) -> Any:
    if isinstance(value, SizeFn):
        fn = None if value.fn is None else next((k for k, f in _BUILTINS.items() if f is value.fn), None) or _target(value.fn)
        return {"size_fn": fn, "args": [_encode(a) for a in value.args], "index": value.index, "dim": value.dim}
    if isinstance(value, list):
        return {"list": [_encode(v) for v in value]}
    if type(value) is tuple:
        return {"tuple": [_encode(v) for v in value]}
    try:
        return {"value": encode_value(value)}
    except PtcSpecError as exc:
        raise _Unstorable(str(exc)) from exc


def _decode(data: Any) -> Any:
    if "size_fn" in data:
        name = data["size_fn"]
        fn = None if name is None else _BUILTINS.get(name) or resolve_target(name)
        return SizeFn(fn, tuple(_decode(a) for a in data["args"]), int(data["index"]), int(data["dim"]))  # type: ignore[arg-type]
    if "list" in data:
        return [_decode(v) for v in data["list"]]
    if "tuple" in data:
        return tuple(_decode(v) for v in data["tuple"])
    return decode_value(data["value"])
