"""The pipeline, in order: lower -> schedule/fuse -> plan memory -> generate code -> build -> wrap."""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import linecache
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.fx

from ptc_spec import TimedStep

from . import debug, events, sizes
from .codegen.backend import Backend, KernelCall, auto_backend, uses_triton
from .codegen.wrapper import generate_wrapper
from .config import Config, config_from_env
from .lowering import lower_graph
from .lowering.graph import LoweredGraph
from .memory import MemoryPlan, input_donors, plan_memory
from .scheduler import Kernel, Schedule, schedule
from .size_sources import SymbolSource
from .unfused_bias import unfuse_bias_adds

log = logging.getLogger("ptc.inductor.compile")

ACCEPTED_DIALECTS = ("core/1", "core/2")


@dataclass(frozen=True)
class CompiledGraph:
    """A compiled graph: call it like the GraphModule; the generated code stays inspectable."""

    call: Callable[..., Any]
    cpp_source: str
    wrapper_source: str
    schedule: Schedule | None
    """How the graph was scheduled; None for a graph loaded from an artifact."""
    memory_plan: MemoryPlan | None
    library_path: str | None
    fallbacks: tuple[str, ...] = ()
    """Ops run as their eager ATen kernel (fallback nodes), by qualified name, in graph order."""
    symbols: tuple[SymbolSource, ...] = ()
    """The size symbols the graph needs, each with the input dim (or stride, or SymInt input)
    each call reads it from; empty for static sizes. Guards are not checked here."""
    namespace: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    """The objects the wrapper's code reads (what ``artifact.save_artifact`` writes)."""
    kernel_calls: dict[str, KernelCall] = dataclasses.field(default_factory=dict, repr=False)
    loaded_kernel_count: int = 0
    """``kernel_count`` of a graph loaded from an artifact (it keeps no schedule)."""
    call_boxed: Callable[[list[Any]], Any] | None = None
    """Runs the graph on a list of its inputs that it empties, freeing each input after its last
    use once no one else holds it (a backward's saved tensors); None for a wrapper without it."""

    def __call__(self, *args: Any) -> Any:
        """Run the compiled graph on ``args`` (the graph's placeholders, in order)."""
        return self.call(*args)

    def symbol_values(self, *args: Any) -> dict[str, int]:
        """The value each size symbol takes for the inputs ``args`` (what a call reads from them)."""
        return {s.name: s.read(args) for s in self.symbols}

    @property
    def kernel_count(self) -> int:
        """Number of generated kernels."""
        return self.loaded_kernel_count if self.schedule is None else len(self.schedule.kernels)


def _check_dialect(gm: torch.fx.GraphModule) -> None:
    try:
        import ptc_spec
    except ImportError:
        return
    ptc_spec.require_dialect(gm, ACCEPTED_DIALECTS, "ptc-inductor")


def compile(gm: torch.fx.GraphModule, *, config: Config | None = None, debug_dir: str | None = None) -> CompiledGraph:
    """Compile a core/1 or core/2 GraphModule into a callable running generated kernels (C++ on CPU, Triton on CUDA)."""
    cfg = config if config is not None else config_from_env()
    if debug_dir is not None:
        cfg = cfg.replace(debug_dir=debug_dir)
    _check_dialect(gm)
    start = time.perf_counter()
    lowered = lower_graph(unfuse_bias_adds(gm, cfg), cfg)  # 1. lower: graph nodes -> loop IR and extern calls
    _stage("lower", start)
    return compile_lowered(lowered, cfg)


def _stage(name: str, start: float) -> float:
    """Report stage ``name`` (begun at ``start``) to event listeners; return the time now, the next stage's start."""
    now = time.perf_counter()
    if events.STEPS.wanted():
        events.STEPS.emit(TimedStep(name, start, now - start))
    return now


def compile_lowered(lowered: LoweredGraph, cfg: Config, backend: Backend = auto_backend) -> CompiledGraph:
    """Schedule, plan, generate, build and wrap an already lowered graph."""
    # Every stage decides on sizes through the graph's SizeEnv (hints, provable facts).
    with sizes.use(lowered.sizes):
        return _compile_lowered(lowered, cfg, backend)


def _compile_lowered(lowered: LoweredGraph, cfg: Config, backend: Backend) -> CompiledGraph:
    start = time.perf_counter()
    sched = schedule(lowered.nodes, cfg, lowered.output_buffers)  # 2. schedule and fuse into kernels
    start = _stage("schedule", start)
    cpp_kernels = {k.name for k in sched.kernels if not uses_triton(k, cfg)}
    triton_kernels = {k.name for k in sched.kernels} - cpp_kernels
    registers: frozenset[str] = frozenset()
    if triton_kernels:
        from .codegen.triton import local_buffers

        registers = local_buffers(sched, triton_kernels, lowered.output_buffers, lowered.buffers, cfg)
    donors = input_donors(lowered) if cfg.reuse_buffers else None
    plan = plan_memory(sched, lowered.buffers, lowered.output_buffers, cfg.reuse_buffers, cpp_kernels, registers, donors)  # 3. plan memory
    start = _stage("plan memory", start)
    # 4. generate, build and load the kernels; one that writes no element is never launched (on a
    # GPU a kernel over a zero-size output would still run one program and write out of bounds)
    launched = dataclasses.replace(sched, steps=tuple(s for s in sched.steps if not (isinstance(s, Kernel) and s.is_empty)))
    built = backend(launched, plan, lowered.buffers, cfg)
    source, path = built.source, built.artifact
    start = _stage("codegen and build", start)
    # 5. the Python wrapper that allocates buffers and runs kernels and extern calls in order
    wrapper = generate_wrapper(lowered, sched, plan, built.calls, cfg)
    namespace = dict(wrapper.namespace)
    exec(compile_source(wrapper.source), namespace)
    if triton_kernels:
        from .triton_runtime import tune_after_calls

        tune_after_calls(namespace)
    _stage("wrapper", start)
    if cfg.output_code:
        debug.log_output_code(source, wrapper.source)
    if cfg.debug_dir:
        _write_debug(cfg.debug_dir, lowered, sched, plan, source, wrapper.source)
    log.debug("compiled %d nodes into %d kernels", len(lowered.nodes), len(built.calls))
    return CompiledGraph(
        namespace["call"], source, wrapper.source, sched, plan, path, lowered.fallbacks, wrapper.symbols,
        namespace=dict(wrapper.namespace), kernel_calls=built.calls, call_boxed=namespace.get("call_boxed"),
    )


def compile_source(text: str) -> Any:
    """Byte-compile the generated wrapper (``compile`` here is ours, so reach the builtin explicitly)."""
    # A name per wrapper, its lines in linecache: tracebacks, profilers and allocator
    # histories then show the wrapper line that launched a kernel or allocated a buffer.
    name = f"<ptc_inductor wrapper {hashlib.sha256(text.encode()).hexdigest()[:12]}>"
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    return builtins.compile(text, name, "exec")


def _write_debug(path: str, lowered: LoweredGraph, sched: Schedule, plan: MemoryPlan, source: str, wrapper: str) -> None:
    ir_text = "\n\n".join(debug.format_node(n) for n in lowered.nodes) + "\n"
    debug.write_debug_dir(
        path,
        {"ir.txt": ir_text, "schedule.txt": debug.format_schedule(sched, plan), "kernels.cpp": source, "wrapper.py": wrapper},
    )
