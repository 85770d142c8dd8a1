"""The order of the stages, in one place: capture -> aot -> decomp -> inductor -> cudagraphs.

Each stage is a separate package that talks to the next only through an FX graph; with
``check_boundaries`` every handoff is round-tripped through ptc-spec's serialized form.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

import ptc_spec

from . import cache
from .config import CompileOptions
from .report.record import RECORDER

Compiled = Callable[..., Any]
log = logging.getLogger("ptc.perf")
fallback_log = logging.getLogger("ptc.fallbacks")


@dataclass
class CompileStats:
    """What this process has compiled (the pipeline's one piece of mutable state)."""

    graphs: int = 0
    """aten graphs handed to a stage compiler (a training graph counts its forward and backward)."""
    kernels: int = 0
    seconds: float = 0.0
    fallbacks: Counter[str] = field(default_factory=Counter)
    """Per aten overload, how many compiled graphs run it unfused as a fallback."""
    ddp_pieces: int = 0
    """Graphs compiled as a piece of a captured graph split at DDP bucket boundaries (ptc.distributed)."""

    def reset(self) -> None:
        """Start counting from zero."""
        self.graphs, self.kernels, self.seconds, self.ddp_pieces = 0, 0, 0.0, 0
        self.fallbacks.clear()


STATS = CompileStats()

# ptc-aot's name for "these outputs are the new values of these inputs" (a compiler may store them
# over the inputs); ptc-inductor reads the same key.
_INPUT_WRITES_KEY = "ptc_input_writes"


def handoff(gm: torch.fx.GraphModule, options: CompileOptions) -> torch.fx.GraphModule:
    """Pass ``gm`` to the next stage, through the serialized form when boundaries are checked."""
    return ptc_spec.roundtrip(gm) if options.check_boundaries else gm


def compile_core(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions, *, forward: bool = False) -> Compiled:
    """aten graph -> core/N (ptc-decomp; ops it cannot decompose stay as fallbacks) -> kernels (ptc-inductor), optionally CUDA-graphed.

    ``forward``: the graph is the forward of an aot program run under its frontend's guards (see
    aot_compile), so each call's tensors keep the example inputs' layouts where those are static.

    A graph some process compiled before under the same versions and settings is loaded from
    the graph cache (``ptc.cache``) instead."""
    import ptc_inductor

    start = time.perf_counter()
    if options.cudagraphs and _all_cuda(example_inputs) and _INPUT_WRITES_KEY in gm.meta:
        # A replay writes into the recorded copy of an input that is not static, and hands back
        # a view of the caller's tensor where the graph returned the input: the runtime's copy
        # must bring the new value over, so the graph must not store it over the input itself.
        gm.meta.pop(_INPUT_WRITES_KEY)
    config = ptc_inductor.config_from_env(cache_dir=cache.inductor_cache_dir())
    if options.debug_dir is not None:
        config = config.replace(debug_dir=options.debug_dir)
    key = _cache_key(gm, example_inputs, options, config)
    compiled: Any = None
    core: torch.fx.GraphModule | None = None
    if key is not None:
        compiled = cache.lookup(key, lambda path: ptc_inductor.load_artifact(path, config))
    if compiled is not None:
        fallbacks = list(compiled.fallbacks)
        log.info("loaded a compiled graph from the cache in %.1f ms", (time.perf_counter() - start) * 1e3)
    else:
        compiled, core = _compile_core(gm, options, config, key)
        fallbacks = list(core.meta.get("ptc_fallbacks", ()))
    if RECORDER.active:
        RECORDER.graph_compiled(compiled, core, fallbacks, None if key is None else ("miss" if core is not None else "hit"), start)
    STATS.graphs += 1
    if fallbacks:
        STATS.fallbacks.update(fallbacks)
        fallback_log.info("graph %d runs %d op(s) unfused, as eager kernels: %s", STATS.graphs, len(fallbacks), ", ".join(fallbacks))
    STATS.kernels += int(getattr(compiled, "kernel_count", 0))
    STATS.seconds += time.perf_counter() - start
    if options.cudagraphs and _all_cuda(example_inputs):
        import ptc_cudagraphs

        # A guarded static forward's inputs keep their layouts: CUDA-graph calls are keyed by
        # static addresses alone (about 1.4 us less per parameter and call). A backward's
        # gradients and a symbolic graph's sizes vary, so those keep the full key.
        fixed = forward and not any(isinstance(m, ptc_spec.TensorMeta) and m.is_symbolic for m in example_inputs)
        compiled = ptc_cudagraphs.cudagraphify(compiled, list(example_inputs), fixed_layouts=fixed)
    return compiled if core is None else _with_decisions(compiled, gm, core)


def _compile_core(gm: torch.fx.GraphModule, options: CompileOptions, config: Any, key: str | None) -> tuple[Compiled, torch.fx.GraphModule]:
    import ptc_decomp
    import ptc_inductor

    start = time.perf_counter()
    core = handoff(ptc_decomp.decompose(handoff(gm, options), target=ptc_spec.LATEST_CORE), options)
    if RECORDER.active:
        RECORDER.span("decomp", "decompose", start, RECORDER.current)
    from .distributed import sink_waits

    compiled = ptc_inductor.compile(sink_waits(core), config=config)
    log.info("decomposed and compiled a graph of %d nodes in %.1f ms", len(core.graph.nodes), (time.perf_counter() - start) * 1e3)
    # A compile that decided on sizes carries guards the entry could not give back: not cached.
    if key is not None and _with_decisions(compiled, gm, core) is compiled:
        cache.store_later(key, lambda path: ptc_inductor.save_artifact(compiled, path))
    return compiled, core


def _cache_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions, config: Any) -> str | None:
    # Debug files and printed code come from a compile; a cached load would silently skip them.
    if not cache.enabled() or config.debug_dir or config.output_code:
        return None
    import ptc_decomp.config

    # Decompositions fill in dtypes a graph leaves open with the default dtype, and follow
    # their own environment switches (PTC_DECOMP_RESTRIDE...).
    settings = (f"{dataclasses.replace(options, debug_dir=None)!r}|{config.replace(cache_dir='')!r}|{torch.get_default_dtype()}"
                f"|{ptc_decomp.config.config_from_env()!r}")
    return cache.graph_key(gm, list(example_inputs), settings)


class _Decided:
    """A compiled graph that carries the SymbolEnv its compile decided on, for ptc-aot to guard."""

    __slots__ = ("compiled", "meta")

    def __init__(self, compiled: Compiled, env_state: Any) -> None:
        self.compiled = compiled
        self.meta = {ptc_spec.SHAPE_ENV_KEY: env_state}

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)

    @property
    def call_boxed(self) -> Callable[[list[Any]], Any] | None:
        """The compiled graph's list-taking entry (see ptc_aot's backward), where it has one."""
        return getattr(self.compiled, "call_boxed", None)


def _with_decisions(compiled: Compiled, gm: torch.fx.GraphModule, core: torch.fx.GraphModule) -> Compiled:
    # A decomposition that decided on a size recorded the guard in the core graph's SymbolEnv;
    # ptc-aot checks a program's guards before each call, so it must see that one too.
    before, after = ptc_spec.shape_env_of(gm), ptc_spec.shape_env_of(core)
    if after is None or (before is not None and set(after.guards) <= set(before.guards)):
        return compiled
    return _Decided(compiled, core.meta[ptc_spec.SHAPE_ENV_KEY])


def aot_compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions, inner: Callable[..., Compiled]) -> Compiled:
    """torch graph -> forward/backward aten graphs (ptc-aot), each compiled by ``inner``."""
    import ptc_aot

    program = RECORDER.new_program() if RECORDER.active else None

    def stage_for(kind: str) -> Callable[[torch.fx.GraphModule], Compiled]:
        def stage(graph: torch.fx.GraphModule) -> Compiled:
            forward = kind == "forward"
            if program is None or not RECORDER.active:
                return inner(graph, _placeholder_metas(graph), options, forward=forward)
            record = RECORDER.begin_graph(program, kind, graph)
            start = time.perf_counter()
            compiled = inner(graph, _placeholder_metas(graph), options, forward=forward)
            RECORDER.span("stage compile", kind, start, record)
            RECORDER.current = None
            return compiled

        return stage

    # A program loaded from the cache skips trace, functionalize and partition; its graphs still
    # go through the stage compilers (and so the graph cache). A debug dump comes from a compile.
    programs = cache.ProgramCache() if cache.enabled() and options.debug_dir is None else None
    # Graphs run as they are (aot_eager) keep the ops the user's program called.
    rewrite = None if inner is run_as_is else _partition_friendly_decompositions()
    compiled: Compiled = ptc_aot.aot(
        handoff(gm, options), list(example_inputs), fw_compiler=stage_for("forward"), bw_compiler=stage_for("backward"),
        partition=options.partition, dump_dir=options.debug_dir, cache=programs,
        config=dataclasses.replace(ptc_aot.config_from_env(), joint_rewrite=rewrite),
        # Backends run under a capture's guards (ptc_capture's or another frontend's): each
        # call's tensors have the example inputs' types, dtypes, sizes and strides.
        guarded=True,
    )
    return compiled


# Ops whose results the partitioner should see as pointwise math over reductions: log_softmax's
# backward then recomputes it from the logits and two per-row statistics, where the atomic op's
# whole (N, C) result had to be written in the forward and saved (GPT-2's 8192 x 50257 float32
# logits: 1.6 GB written only for the loss to read one class of each row).
_DECOMPOSED_BEFORE_PARTITION = (torch.ops.aten._log_softmax.default,)


def _partition_friendly_decompositions() -> Any:
    import ptc_aot
    import ptc_decomp

    table = {op: fn for op, fn in ptc_decomp.table(ptc_spec.LATEST_CORE).items() if op in _DECOMPOSED_BEFORE_PARTITION}

    def rewrite(joint: torch.fx.GraphModule) -> torch.fx.GraphModule:
        targets = [n for n in joint.graph.nodes if n.op == "call_function" and n.target in table]
        if not targets:
            return joint
        if all(_decompose_in_place(joint, node, table) for node in targets):
            joint.recompile()
            return joint
        # A decomposition that decided on a size: the whole graph is replayed, its guards recorded.
        return ptc_decomp.decompose(joint, target=ptc_spec.LATEST_CORE, table=table)

    return ptc_aot.JointRewrite("decomposed:" + ",".join(map(str, _DECOMPOSED_BEFORE_PARTITION)), rewrite)


def _decompose_in_place(joint: torch.fx.GraphModule, node: torch.fx.Node, table: dict[Any, Any]) -> bool:
    """Replace ``node`` in ``joint`` by its decomposition, traced over its own input alone; False
    (``joint`` untouched) when the decomposition would add a guard. Replaying the whole joint
    graph through ptc-decomp for one op cost 0.65 s of a 12-layer GPT-2's cold compile on the CPU."""
    import ptc_decomp

    source, *rest = node.args
    if not isinstance(source, torch.fx.Node) or node.kwargs or any(isinstance(a, torch.fx.Node) for a in rest):
        return False
    env = ptc_spec.shape_env_of(joint)
    op = node.target
    piece = ptc_spec.trace(lambda x: op(x, *rest), source.meta[ptc_spec.META_KEY], shape_env=env)  # type: ignore[operator]
    piece = ptc_decomp.decompose(piece, target=ptc_spec.LATEST_CORE, table=table)
    decided = ptc_spec.shape_env_of(piece)
    if decided is not None and (env is None or not set(decided.guards) <= set(env.guards)):
        return False
    (placeholder,) = [n for n in piece.graph.nodes if n.op == "placeholder"]
    with joint.graph.inserting_before(node):
        out = joint.graph.graph_copy(piece.graph, {placeholder: source})
    assert isinstance(out, torch.fx.Node)
    node.replace_all_uses_with(out)
    joint.graph.erase_node(node)
    return True


def _placeholder_metas(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.meta.get(ptc_spec.META_KEY) for n in gm.graph.nodes if n.op == "placeholder"]


def run_as_is(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions, *, forward: bool = False) -> Compiled:
    """The aot_eager stage compiler: run the aten graph as it is."""
    STATS.graphs += 1
    return handoff(gm, options)


def _all_cuda(inputs: Sequence[Any]) -> bool:
    devices = [x.device for x in inputs if isinstance(x, (torch.Tensor, ptc_spec.TensorMeta))]
    return bool(devices) and all(d.type == "cuda" for d in devices)
