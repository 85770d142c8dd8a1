"""The pipeline, in order: lower -> schedule/fuse -> plan memory -> generate code -> build -> wrap."""

from __future__ import annotations

import dataclasses
import logging
import time

import torch.fx

from ptc_spec import TimedStep

from . import debug, events, sizes
from .codegen.backend import Backend, auto_backend, uses_triton
from .codegen.wrapper import generate_wrapper
from .compiled import CompiledGraph, compile_source
from .config import Config, config_from_env
from .lowering import lower_graph
from .lowering.graph import LoweredGraph
from .memory import MemoryPlan, input_donors, plan_memory
from .scheduler import Kernel, Schedule, schedule
from .unfused_bias import unfuse_bias_adds

log = logging.getLogger("ptc.inductor.compile")

ACCEPTED_DIALECTS = ("core/1", "core/2")


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


def _write_debug(path: str, lowered: LoweredGraph, sched: Schedule, plan: MemoryPlan, source: str, wrapper: str) -> None:
    ir_text = "\n\n".join(debug.format_node(n) for n in lowered.nodes) + "\n"
    debug.write_debug_dir(
        path,
        {"ir.txt": ir_text, "schedule.txt": debug.format_schedule(sched, plan), "kernels.cpp": source, "wrapper.py": wrapper},
    )
