"""``aot``: the entry point, and the one function that shows the pipeline in order."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from ptc_spec import META_KEY, SymbolEnv, TensorMeta, TimedStep, dialect_of, roundtrip, save, shape_env_of

from . import events, program_cache
from .config import Config, config_from_env
from .cse import eliminate_common_subexpressions
from .errors import PtcAotError
from .functionalize import functionalize
from .ignored_args import drop_ignored_arguments
from .partition import partition, tangents
from .pool_offsets import save_pool_offsets
from .program_cache import ProgramCache, ProgramParts
from .runtime import CompiledProgram, LazyBackward
from .signature import Signature, dynamic_dims, make_dynamic
from .tracing import trace_program

log = logging.getLogger("ptc.aot.api")

Compiler = Callable[[torch.fx.GraphModule], Callable[..., Any]]
"""Receives an aten-dialect GraphModule (``ptc_meta`` on every node) and returns a callable."""


def _as_is(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    return gm


def compile_program(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    training: bool,
    fw_compiler: Compiler,
    bw_compiler: Compiler,
    config: Config,
    tag: str = "",
    shape_env: SymbolEnv | None = None,
    cache: ProgramCache | None = None,
) -> CompiledProgram:
    """Trace joint -> functionalize -> partition -> compile -> wrap, for one input signature.

    Inputs with symbolic sizes need ``shape_env`` (their symbols' SymbolEnv, which tracing
    extends with its guards); every graph handed to a compiler then records the SymbolEnv.
    With a ``cache``, a program stored before (same graph, inputs and settings) skips the first
    three steps: its stored graphs go to the compilers as they are.
    """
    start = time.perf_counter()
    key = program_cache.material(fn, inputs, training, config, shape_env) if cache is not None else None
    if cache is not None and key is not None:
        stored = cache.get(key, read_program)
        start = _stage("cache lookup", start)
        if stored is not None:
            log.info("loaded the program from the cache")
            return _compile(stored, fw_compiler, bw_compiler, config)
    program = trace_program(fn, inputs, joint=training, shape_env=shape_env)
    start = _stage("trace", start)
    functional = functionalize(program.gm)
    removed = eliminate_common_subexpressions(functional.gm)
    if removed:
        log.info("merged %d repeated pure calls", removed)
    dropped = drop_ignored_arguments(functional.gm)
    if dropped:
        log.info("passed None for unread arguments of %d calls", dropped)
    start = _stage("functionalize", start)
    metas = program.inputs
    env = shape_env_of(functional.gm)
    if not program.joint:
        _dump(config, f"inference{tag}", functional.gm)
        parts = ProgramParts(
            functional.gm, None, functional.num_outputs, functional.mutated_inputs, program.differentiable, program.outputs,
            program.out_spec, None, env,
        )  # fmt: skip
    else:
        if config.joint_rewrite is not None:
            functional = replace(functional, gm=config.joint_rewrite.rewrite(functional.gm))
            # A decomposition that decided on a size recorded its guard in the rewritten graph.
            env = shape_env_of(functional.gm)
            start = _stage(f"rewrite ({config.joint_rewrite.name})", start)
        if save_pool_offsets(functional.gm):
            log.info("max pooling saves int8 window offsets for its backward")
        split = partition(functional, len(metas), config.partition)
        _stage("partition", start)
        _dump(config, f"joint{tag}", functional.gm)
        _dump(config, f"forward{tag}", split.forward)
        _dump(config, f"backward{tag}", split.backward)
        parts = ProgramParts(
            split.forward, split.backward, functional.num_outputs, functional.mutated_inputs, program.differentiable,
            program.outputs, program.out_spec, tangents(functional, len(metas)), env,
        )  # fmt: skip
    write = program_cache.writer(parts) if cache is not None and key is not None else None
    compiled = _compile(parts, fw_compiler, bw_compiler, config)
    if cache is not None and key is not None and write is not None:
        cache.put(key, write)
    return compiled


def read_program(directory: str) -> ProgramParts:
    """The program a cache entry holds (a name of its own, so profilers can time loading)."""
    return program_cache.read(directory)


def _compile(parts: ProgramParts, fw_compiler: Compiler, bw_compiler: Compiler, config: Config) -> CompiledProgram:
    """Hand the graphs to the compilers and wrap the results with the plan."""
    if parts.backward is not None:
        # The forward's last outputs are the values saved for the backward, its first inputs: no
        # user sees them, so a compiler may pick their layout (the same on both sides).
        out = next(n for n in reversed(parts.forward.graph.nodes) if n.op == "output")
        saved = len(out.args[0]) - parts.num_outputs - len(parts.mutated_inputs)
        parts.forward.meta[SAVED_OUTPUTS_KEY] = saved
        parts.backward.meta[SAVED_INPUTS_KEY] = saved
    if parts.mutated_inputs:
        # The runtime skips its copy for a new value that comes back as the input itself.
        first = parts.num_outputs
        parts.forward.meta[INPUT_WRITES_KEY] = tuple((first + k, i) for k, i in enumerate(parts.mutated_inputs))
    forward = fw_compiler(_boundary(config, parts.forward))
    if parts.backward is None:
        return CompiledProgram(
            forward, None, parts.num_outputs, parts.mutated_inputs, parts.differentiable, parts.outputs, parts.out_spec,
            shape_env=_with_compiler_guards(parts.shape_env, forward),
        )  # fmt: skip
    backward: Callable[..., Any]
    if parts.shape_env is None:
        # Compiled at the first backward call, for the tangents it has (see LazyBackward).
        backward = LazyBackward(parts.backward, lambda graph: bw_compiler(_boundary(config, graph)), saved)
    else:
        # A symbolic backward is compiled now: the guards its compiler adds join the program's.
        backward = bw_compiler(_boundary(config, parts.backward))
    return CompiledProgram(
        forward, backward, parts.num_outputs, parts.mutated_inputs, parts.differentiable, parts.outputs, parts.out_spec,
        parts.tangents, _with_compiler_guards(parts.shape_env, forward, backward),
    )  # fmt: skip


def _stage(name: str, start: float) -> float:
    """Report stage ``name`` (begun at ``start``) to event listeners; return the time now."""
    now = time.perf_counter()
    if events.STAGES.wanted():
        events.STAGES.emit(TimedStep(name, start, now - start))
    return now


def _with_compiler_guards(env: SymbolEnv | None, *compiled: Any) -> SymbolEnv | None:
    """``env`` plus the guards a compiler added while compiling a graph of it.

    A compiler that decides on a size (ptc-decomp, a backend) records the guard in the
    SymbolEnv of the graph it returns (``compiled.meta[SHAPE_ENV_KEY]``, as a GraphModule
    carries it); the wrapper then checks those too before running the program.
    """
    if env is None:
        return None
    extra = [g for c in compiled if (found := shape_env_of(c)) is not None for g in found.guards if g not in env.guards]
    if not extra:
        return env
    merged = SymbolEnv.from_state(env.state())
    for guard in extra:
        # Each held at the hints when the compiler decided it: recording it as a decision keeps it.
        merged.guard_bool(guard)
    log.info("compilers added %d guard(s): %s", len(extra), ", ".join(map(str, extra)))
    return merged


def _boundary(config: Config, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return roundtrip(gm) if config.check_boundaries else gm


def _dump(config: Config, name: str, gm: torch.fx.GraphModule) -> None:
    if config.dump_dir is None:
        return
    os.makedirs(config.dump_dir, exist_ok=True)
    path = os.path.join(config.dump_dir, f"{name}.ptcg")
    save(gm, path)
    log.info("wrote %s", path)


def _meta_of(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta.from_tensor(value)
    return value


def _layout_of(value: Any) -> Any:
    # Everything TensorMeta records, as cheap raw values (torch.Size hashes like a tuple).
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype, value.device, value.requires_grad, value.storage_offset())
    return (type(value), value)  # 1, 1.0 and True are equal keys but bake in different programs


SAVED_OUTPUTS_KEY = "ptc_saved_outputs"
"""``GraphModule.meta`` key of a training program's forward graph: how many of its last outputs
are values saved for the backward (ptc-inductor stores 4-D activations among them channels-last)."""
SAVED_INPUTS_KEY = "ptc_saved_inputs"
"""``GraphModule.meta`` key of the backward graph: how many of its first inputs are those values."""
INPUT_WRITES_KEY = "ptc_input_writes"
"""``GraphModule.meta`` key of a forward (or inference) graph: ``(output, input)`` position pairs,
each output the new value of that input, which the runtime writes into the caller's tensor. A
compiler may write the value into the input's own storage instead and return the input tensor
itself there; the runtime then has nothing to copy. The input's old value must then be read by
nothing after the write, and no output may be, or view, the input's old value."""

# How many input layouts an AotFunction remembers before starting over: a symbolic program
# called with ever new sizes would otherwise grow the table without bound.
_LAYOUT_CACHE_SIZE = 256


class AotFunction:
    """The callable ``aot`` returns: compiles one program per input signature and grad mode.

    Example inputs with symbolic sizes give a symbolic program, which serves every call whose
    sizes its guards admit; a call they do not admit compiles another program, symbolic in the
    same dims (a fresh SymbolEnv, the call's sizes as hints).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        example_inputs: Sequence[Any],
        fw_compiler: Compiler,
        bw_compiler: Compiler,
        config: Config,
        shape_env: SymbolEnv | None = None,
        cache: ProgramCache | None = None,
        guarded: bool = False,
    ) -> None:
        self._fn = fn
        self._cache = cache
        self._fw_compiler = fw_compiler
        self._bw_compiler = bw_compiler
        self._config = config
        self._programs: dict[tuple[Any, ...], CompiledProgram] = {}
        self._symbolic: list[tuple[Signature, CompiledProgram]] = []
        # Per-call dispatch on raw sizes/strides: building a TensorMeta per input on every call
        # cost ~10 us a tensor, most of a small model's step. Keys map to the programs above.
        self._by_layout: dict[tuple[Any, ...], CompiledProgram] = {}
        inputs = [_meta_of(v) for v in example_inputs]
        self._dynamic = dynamic_dims(inputs)
        if self._dynamic and shape_env is None:
            raise PtcAotError(
                "example inputs have symbolic sizes but no SymbolEnv was given;"
                " pass the SymbolEnv their symbols belong to (aot(..., shape_env=env))"
            )
        training = torch.is_grad_enabled() and any(isinstance(m, TensorMeta) and m.requires_grad for m in inputs)
        self._program(training, inputs, shape_env)
        # Under the caller's guards (see aot()), a static program's calls differ only in grad mode
        # and storage offsets: those pick the program, found once through the full layout key.
        self._guarded = guarded and not self._dynamic
        self._tensor_positions = tuple(i for i, m in enumerate(inputs) if isinstance(m, TensorMeta))
        self._all_tensors = len(self._tensor_positions) == len(inputs)
        self._by_offsets: dict[tuple[Any, ...], CompiledProgram] = {}
        self._warned_alias = False

    def _program(self, training: bool, inputs: list[Any], shape_env: SymbolEnv | None = None) -> CompiledProgram:
        key = (training, *(v if isinstance(v, TensorMeta) else (type(v), v) for v in inputs))
        symbolic = shape_env is not None and any(isinstance(m, TensorMeta) and m.is_symbolic for m in inputs)
        try:
            # Symbolic metadata names symbols of one SymbolEnv (s0 of another program is another
            # size), so a symbolic program is only ever found through its Signature.
            found = None if symbolic else self._programs.get(key)
        except TypeError as exc:
            raise PtcAotError(
                "a non-tensor argument is not hashable, so ptc_aot cannot tell which program it needs;"
                " pass tensors or hashable Python values (tuples, not lists)"
            ) from exc
        if found is None:
            tag = "" if not self._programs else f"_{len(self._programs)}"
            log.info("compiling %s%s program %s", "symbolic " if symbolic else "", "training" if training else "inference", tag or "0")
            # Tracing adds guards to its SymbolEnv: a copy keeps the caller's (and the next program's) as given.
            env = SymbolEnv.from_state(shape_env.state()) if symbolic and shape_env is not None else None
            found = compile_program(self._fn, inputs, training, self._fw_compiler, self._bw_compiler, self._config, tag, env, self._cache)
            self._programs[(*key, len(self._programs)) if symbolic else key] = found
            if symbolic and found.shape_env is not None:
                self._symbolic.append((Signature(training, key[1:], found.shape_env), found))
        return found

    @property
    def programs(self) -> tuple[CompiledProgram, ...]:
        """The programs compiled so far, oldest first."""
        return tuple(self._programs.values())

    def __call__(self, *args: Any) -> Any:
        """Run the compiled program matching ``args`` (compiling it on first use)."""
        if self._guarded:
            tensors = list(args) if self._all_tensors else [args[i] for i in self._tensor_positions]
            offsets = (torch.is_grad_enabled(), *[t.storage_offset() for t in tensors])
            program = self._by_offsets.get(offsets)
            if program is None:
                if len(self._by_offsets) >= _LAYOUT_CACHE_SIZE:
                    self._by_offsets.clear()
                program = self._by_offsets[offsets] = self._dispatch(args, tensors)
        else:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            program = self._dispatch(args, tensors)
        if program.mutated_inputs and _writes_an_alias(tensors, program.mutated_inputs):
            # The program was traced with distinct storages: a write to one input would not be
            # seen through another that shares its storage (a view passed beside its base).
            if not self._warned_alias:
                self._warned_alias = True
                log.warning(
                    "tensor arguments share storage and the program writes one of them;"
                    " calls like this run eagerly (pass separate tensors to compile them)"
                )
            return self._fn(*args)
        return program(tensors)

    def _dispatch(self, args: Sequence[Any], tensors: list[torch.Tensor]) -> CompiledProgram:
        """The program for ``args`` by their full layout key (compiled on first use)."""
        training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        key = (training, *map(_layout_of, args))
        try:
            program = self._by_layout.get(key)
        except TypeError:
            program = None  # an unhashable argument: _program explains
        if program is None:
            program = self._select(training, args)
            if len(self._by_layout) >= _LAYOUT_CACHE_SIZE:
                self._by_layout.clear()
            self._by_layout[key] = program
        return program

    def _select(self, training: bool, args: Sequence[Any]) -> CompiledProgram:
        """The program for a call whose layout is new: a symbolic program admitting it, or a new one."""
        for signature, program in self._symbolic:
            if signature.matches(training, args):
                return program
        metas = [_meta_of(a) for a in args]
        if self._dynamic:
            dynamic, env = make_dynamic(metas, self._dynamic)
            return self._program(training, dynamic, env)
        return self._program(training, metas)


def _writes_an_alias(tensors: Sequence[torch.Tensor], mutated: Sequence[int]) -> bool:
    """True when an input the program writes shares its storage with another tensor input
    (storages without memory, data pointer 0, share nothing)."""
    written = [_storage_pointer(tensors[i]) for i in mutated]
    unique = set(written)
    unique.discard(0)
    if len(unique) < sum(1 for p in written if p):
        return True
    mutated_set = set(mutated)
    return any(_storage_pointer(t) in unique for i, t in enumerate(tensors) if i not in mutated_set)


def _storage_pointer(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # a wrapper subclass has no storage of its own to share
        return 0


def aot(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any] | None,
    fw_compiler: Compiler | None = None,
    bw_compiler: Compiler | None = None,
    partition: str | None = None,
    dump_dir: str | None = None,
    config: Config | None = None,
    *,
    shape_env: SymbolEnv | None = None,
    cache: ProgramCache | None = None,
    guarded: bool = False,
) -> AotFunction:
    """Return a callable running ``fn`` through compiled functional aten forward/backward graphs.

    ``fn`` is a torch-dialect GraphModule or any callable; ``example_inputs`` are tensors,
    TensorMetas or Python values (baked in), or None to take a GraphModule's placeholder metadata.
    TensorMetas with symbolic sizes (``ptc_spec.dynamic_meta``) make the program symbolic in
    those dims; their symbols belong to ``shape_env`` (default: the SymbolEnv a GraphModule records).
    ``cache`` (a :class:`ProgramCache`) keeps the programs of a GraphModule ``fn`` across processes.
    ``guarded``: the caller checks before every call that each tensor argument has its example's
    type, dtype, device, requires_grad, sizes and strides, and each other argument its value (as
    ptc_capture's guards do); a static program's calls are then told apart by grad mode and
    storage offsets alone, without the per-argument layout key (~1.5 us a tensor).
    """
    chosen = config if config is not None else config_from_env()
    if partition is not None:
        chosen = replace(chosen, partition=partition)
    if dump_dir is not None:
        chosen = replace(chosen, dump_dir=dump_dir)
    if example_inputs is None or (shape_env is None and _records_symbols(fn)):
        # A graph that records a SymbolEnv is compiled over its own symbolic metadata; example
        # tensors only stand for one of the sizes it admits.
        example_inputs = _placeholder_metas(fn, example_inputs)
    if isinstance(fn, torch.fx.GraphModule) and dialect_of(fn) not in (None, "torch", "aten"):
        raise PtcAotError(f"ptc_aot traces torch- or aten-dialect graphs, but this graph is in {dialect_of(fn)}")
    if isinstance(fn, torch.fx.GraphModule) and dialect_of(fn) is not None and chosen.check_boundaries:
        fn = roundtrip(fn)
    if shape_env is None and isinstance(fn, torch.fx.GraphModule):
        shape_env = shape_env_of(fn)
    return AotFunction(fn, list(example_inputs), fw_compiler or _as_is, bw_compiler or _as_is, chosen, shape_env, cache, guarded)


def _records_symbols(fn: Callable[..., Any]) -> bool:
    return isinstance(fn, torch.fx.GraphModule) and shape_env_of(fn) is not None


def _placeholder_metas(fn: Callable[..., Any], examples: Sequence[Any] | None = None) -> list[Any]:
    if not isinstance(fn, torch.fx.GraphModule):
        raise PtcAotError("example_inputs may be None only for a GraphModule whose placeholders carry ptc_meta")
    metas = []
    for node in fn.graph.nodes:
        if node.op == "placeholder":
            meta = node.meta.get(META_KEY)
            if not isinstance(meta, TensorMeta):
                raise PtcAotError(f"placeholder {node.name} has no TensorMeta; pass example_inputs")
            metas.append(meta)
    if examples is not None:
        agree = len(examples) == len(metas) and all(
            isinstance(e, torch.Tensor) and e.dtype == m.dtype and e.dim() == m.ndim for e, m in zip(examples, metas)
        )
        if not agree:
            raise PtcAotError(
                "the example inputs do not match the placeholders of this graph with symbolic sizes (count, dtypes or ranks);"
                " pass example_inputs=None to compile it over its own metadata"
            )
    return metas
