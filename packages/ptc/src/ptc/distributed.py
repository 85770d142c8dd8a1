"""ptc under DistributedDataParallel: the captured graph split at DDP's bucket boundaries.

DDP all-reduces a bucket of gradients as soon as autograd has accumulated all of them. A
compiled graph is one autograd node, so every gradient of the graph appears at once, when its
whole backward has run, and no all-reduce overlaps the backward. Split into pieces whose
parameters fill about one bucket each, each piece compiled as its own graph (its own autograd
node), the pieces' backwards run last piece first and DDP reduces each bucket while the
earlier pieces' backwards still run (torch.compile's "DDP optimizer" does the same).

DDP is detected while it runs its forward (``DistributedDataParallel._active_ddp_module``),
so ``ptc.compile(DDP(model))`` and ``DDP(ptc.compile(model))`` both split. ``DDP.forward``
itself runs as it is (its hooks and collectives are DDP's business); the wrapped module's
forward is captured. ``options={"ddp_split": False}`` or ``PTC_DDP_SPLIT=0`` turns the split off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

import ptc_spec

from .pipeline import STATS

log = logging.getLogger("ptc.distributed")

StageCompiler = Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]


def active_ddp() -> Any:
    """The DistributedDataParallel module whose forward is running, or None."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return getattr(DistributedDataParallel, "_active_ddp_module", None)


def register_wrappers(register: Callable[[type, Callable[[Any], Any]], None]) -> None:
    """Tell capture that DDP's forward runs as it is around the module it wraps, which is captured."""
    if not torch.distributed.is_available():
        return
    from torch.nn.parallel import DistributedDataParallel

    register(DistributedDataParallel, lambda ddp: ddp.module)


@dataclass(frozen=True, slots=True)
class Piece:
    """One bucket-sized part of a graph: which values it reads and which it gives to later pieces."""

    module: torch.fx.GraphModule
    inputs: tuple[torch.fx.Node, ...]
    outputs: tuple[torch.fx.Node, ...]


def compile_for_ddp(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile_graph: StageCompiler) -> Callable[..., Any] | None:
    """Compile ``gm`` as pieces of about one DDP bucket of parameters each, or None when it is
    not captured under DDP or does not split (fewer than two pieces, or values crossing a cut
    that are not tensors)."""
    ddp = active_ddp()
    if ddp is None or ptc_spec.shape_env_of(gm) is not None:
        # A graph with symbolic sizes stays whole: its pieces would need the sizes passed
        # between them as inputs of their own.
        return None
    cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
    pieces = split_by_parameters(gm, example_inputs, cap)
    if pieces is None:
        return None
    STATS.ddp_pieces += len(pieces)
    log.info("split a graph of %d nodes at DDP bucket boundaries (%d bytes) into %d pieces", len(gm.graph.nodes), cap, len(pieces))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    examples: dict[torch.fx.Node, Any] = dict(zip(placeholders, example_inputs))
    compiled = []
    for piece in pieces:
        piece_examples = [examples.get(node, node.meta.get(ptc_spec.META_KEY)) for node in piece.inputs]
        compiled.append(compile_graph(piece.module, piece_examples))
    return _Stitched(placeholders, pieces, compiled, gm.graph.output_node().args[0])


class _Stitched:
    """Runs the compiled pieces in order, feeding each the values it reads."""

    def __init__(self, placeholders: list[torch.fx.Node], pieces: list[Piece], compiled: list[Callable[..., Any]], result: Any) -> None:
        self.placeholders = placeholders
        self.steps = [(piece.inputs, piece.outputs, fn) for piece, fn in zip(pieces, compiled)]
        self.result = result

    def __call__(self, *args: Any) -> Any:
        env: dict[torch.fx.Node, Any] = dict(zip(self.placeholders, args))
        for inputs, outputs, fn in self.steps:
            values = fn(*[env[node] for node in inputs])
            env.update(zip(outputs, values))
        # The pieces' values are dropped with env: only the graph's outputs stay alive.
        return torch.fx.node.map_arg(self.result, lambda node: env[node])


def split_by_parameters(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cap: int) -> list[Piece] | None:
    """Pieces of ``gm`` in forward order, each using about ``cap`` bytes of parameters (counted
    from the end, as DDP fills its buckets), or None when it does not split."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sizes = {node: _parameter_bytes(example) for node, example in zip(placeholders, example_inputs)}
    body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    bucket_of: dict[torch.fx.Node, int] = {}
    bucket, filled, seen = 0, 0, set()
    for node in reversed(body):
        if filled >= cap:
            bucket, filled = bucket + 1, 0
        bucket_of[node] = bucket
        for used in node.all_input_nodes:
            if sizes.get(used) and used not in seen:
                seen.add(used)
                filled += sizes[used]
    if bucket == 0:
        return None
    groups: list[list[torch.fx.Node]] = [[] for _ in range(bucket + 1)]
    for node in body:
        groups[bucket - bucket_of[node]].append(node)
    pieces = []
    for index, nodes in enumerate(groups):
        piece = _make_piece(gm, nodes, set().union(*groups[index + 1 :]) if index + 1 < len(groups) else set())
        if piece is None:
            return None
        pieces.append(piece)
    return pieces


def _parameter_bytes(example: Any) -> int:
    if isinstance(example, torch.nn.Parameter) and example.requires_grad:
        return example.numel() * example.element_size()
    return 0


def _make_piece(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], later: set[torch.fx.Node]) -> Piece | None:
    inside = set(nodes)
    inputs: dict[torch.fx.Node, None] = {}
    for node in nodes:
        for used in node.all_input_nodes:
            if used not in inside:
                inputs[used] = None
    final = gm.graph.output_node()
    outputs = [n for n in nodes if any(user in later or user is final for user in n.users)]
    for value in [*inputs, *outputs]:
        if value.op != "placeholder" and not isinstance(value.meta.get(ptc_spec.META_KEY), ptc_spec.TensorMeta):
            return None  # a size or Python value crossing a cut: keep the graph whole
    for node in nodes:
        if _writes_a_crossing_value(node, inputs):
            return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for value in inputs:
        env[value] = graph.placeholder(value.name)
        env[value].meta = dict(value.meta)
    for node in nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in outputs))
    module = torch.fx.GraphModule(gm, graph)
    module.meta.update(gm.meta)
    return Piece(module, tuple(inputs), tuple(outputs))


def _writes_a_crossing_value(node: torch.fx.Node, inputs: dict[torch.fx.Node, None]) -> bool:
    # An in-place op on a value another piece made would need that piece's graph to see the
    # write; only the frame's own inputs are written back by every piece (ptc-aot's mutations).
    first = node.args[0] if node.args else None
    if not isinstance(first, torch.fx.Node) or first not in inputs or first.op == "placeholder":
        return False
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return (isinstance(name, str) and name.endswith("_") and not name.startswith("__")) or bool(node.kwargs.get("inplace"))


def sink_waits(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Move the compute after each collective's ``wait_tensor`` that does not depend on it to
    before the wait, so it runs while the collective is in flight; returns ``gm``, reordered.

    A node that writes a tensor, or another collective, stays where it is, and so does all that
    follows it: collectives must be issued in the same order on every rank.
    """
    if not torch.distributed.is_available():
        return gm
    ops = torch.ops._c10d_functional
    collectives = {getattr(ops, name).default for name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast")}
    moved = False
    for wait in [n for n in gm.graph.nodes if n.target is ops.wait_tensor.default]:
        dependent = {wait}
        node = wait.next
        while node.op not in ("output", "root"):
            following = node.next
            if any(used in dependent for used in node.all_input_nodes):
                dependent.add(node)
            elif node.target in collectives or node.target is ops.wait_tensor.default or _writes(node) or node.op == "placeholder":
                break
            else:
                wait.prepend(node)
                moved = True
            node = following
    if moved:
        gm.graph.lint()
        gm.recompile()
    return gm


def _writes(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return bool(target._schema.is_mutable)
    name = target if node.op == "call_method" else getattr(target, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.startswith("__")
