"""Splitting a functional joint graph into a forward and a backward graph.

Nodes that depend on a tangent belong to the backward. Every other node may run in the
forward (its result saved for the backward if the backward reads it) or, if it is cheap
(``recompute.recomputable``), be recomputed in the backward from saved values. ``min_cut``
chooses with a minimum cut: each node is split into ``in -> out`` with the bytes of its
result as capacity, so a cut through that edge means "save this"; inputs and ops that must
not be recomputed hang off the source, values the backward reads hang off the sink.

A value the forward stores anyway (an input, a library op's or reduction's result, what a
library op reads, a forward output) costs its bytes; any other value costs ``UNSTORED_COST``
times its bytes, since saving it adds a write the forward's fused kernels would not make. So a
cross-entropy saves its logits and two per-row statistics rather than its log-softmax, which
the forward would otherwise only read at the targets. Saving every value the backward reads is
itself a cut, so the minimum never costs more than ``save_all`` (nor saves more than
``UNSTORED_COST`` times its bytes).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sympy
import torch
import torch.fx

from ptc_spec import META_KEY, SHAPE_ENV_KEY, SymbolEnv, TensorMeta, set_dialect, shape_env_of

from .errors import PartitionError
from .functionalize import FunctionalGraph
from .maxflow import INF, FlowNetwork
from .recompute import library_readers, recomputable
from .sizes import is_size_node
from .views import view_source

aten = torch.ops.aten

log = logging.getLogger("ptc.aot.partition")

# What saving a value the forward would not store costs, per byte, against one it stores anyway:
# the memory is the same, the write (and the backward's read of it in place of recomputing) is not.
UNSTORED_COST = 1.5


@dataclass(frozen=True, slots=True)
class Partition:
    """Forward ``(primals) -> (*outputs, *saved)`` and backward ``(*saved, *tangents) -> grads``."""

    forward: torch.fx.GraphModule
    backward: torch.fx.GraphModule
    num_outputs: int
    saved: tuple[str, ...]
    saved_bytes: int
    baseline_bytes: int


def nbytes(node: torch.fx.Node, hints: Mapping[sympy.Symbol, int] | None = None) -> float:
    """Bytes of a node's tensor result (infinite for nodes that are not one tensor).

    Symbolic sizes count at their ``hints`` (the example sizes): the cut that is cheapest
    there is chosen, and is a valid cut at every size.
    """
    meta = node.meta.get(META_KEY)
    if not isinstance(meta, TensorMeta):
        return INF
    return float(meta.numel(hints) * meta.dtype.itemsize)


@dataclass(frozen=True, slots=True)
class Tangents:
    """What the runtime needs to know of the backward's tangent inputs, fixed at compile time.

    ``zeros``: dtype and device of each tangent, to make zeros (of the output's shape in
    that call) for an output nobody differentiated.
    ``of_grads``: per primal, the positions of the tangents its gradient is computed from
    (empty: no gradient). Eager autograd leaves ``.grad`` None on a parameter that reaches only
    outputs nobody differentiated (BERT's pooler under a loss on the hidden states); the runtime
    does the same instead of returning the zeros the backward computes from zero tangents.
    """

    zeros: tuple[tuple[torch.dtype, torch.device], ...]
    of_grads: tuple[frozenset[int], ...]


def tangents(joint: FunctionalGraph, num_primals: int) -> Tangents:
    """The tangent metadata and, per primal, the tangents its gradient depends on."""
    graph = joint.gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    tangent_index = {n: i for i, n in enumerate(placeholders[num_primals:])}
    output = next(n for n in graph.nodes if n.op == "output")
    grads = list(cast(Sequence[Any], output.args[0]))[joint.num_outputs + len(joint.mutated_inputs) :]
    reached: dict[torch.fx.Node, frozenset[int]] = {}
    for node in graph.nodes:  # topological: a node's inputs come first
        if node in tangent_index:
            reached[node] = frozenset((tangent_index[node],))
        else:
            reached[node] = frozenset().union(*(reached.get(a, frozenset()) for a in node.all_input_nodes))
    of_grads = tuple(reached.get(g, frozenset()) if isinstance(g, torch.fx.Node) else frozenset() for g in grads)
    metas: list[TensorMeta] = [n.meta[META_KEY] for n in tangent_index]
    return Tangents(tuple((m.dtype, m.device) for m in metas), of_grads)


def partition(joint: FunctionalGraph, num_primals: int, mode: str = "min_cut") -> Partition:
    """Split ``joint`` (outputs: forward outputs, mutations, then one grad per primal).

    Both graphs record the joint graph's SymbolEnv. Sizes are never saved: the backward reads
    each size it needs from one of its own inputs with that size as a dim.
    """
    graph = joint.gm.graph
    env = shape_env_of(joint.gm)
    hints = dict(env.hints) if env is not None else None
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:num_primals], placeholders[num_primals:]
    output = next(n for n in graph.nodes if n.op == "output")
    results: list[Any] = list(cast(Sequence[Any], output.args[0]))
    n_forward = joint.num_outputs + len(joint.mutated_inputs)
    forward_outputs, grads = results[:n_forward], results[n_forward:]

    backward_nodes: set[torch.fx.Node] = set(tangents)
    for node in graph.nodes:
        if node.op != "output" and any(a in backward_nodes for a in node.all_input_nodes):
            backward_nodes.add(node)
    forward_nodes = [n for n in graph.nodes if n.op != "output" and n not in backward_nodes and not is_size_node(n)]
    read_by_backward = [
        n for n in forward_nodes if any(u in backward_nodes for u in n.users) or any(g is n for g in grads)
    ]
    baseline = sum(nbytes(n, hints) for n in read_by_backward)
    if mode == "save_all":
        saved = read_by_backward
    elif mode == "min_cut":
        stored = {o for o in forward_outputs if isinstance(o, torch.fx.Node)}
        saved = _min_cut(forward_nodes, read_by_backward, backward_nodes, stored, hints)
    else:
        raise PartitionError(f"unknown partition {mode!r}: use 'min_cut' or 'save_all'")
    saved += _size_carriers(joint.gm, [*saved, *tangents], grads)
    saved_bytes = sum(nbytes(n, hints) for n in saved)
    log.info("partition %s saves %d values, %d bytes (save_all baseline: %d bytes)", mode, len(saved), saved_bytes, baseline)

    forward = extract(joint.gm, primals, [*forward_outputs, *saved])
    backward = extract(joint.gm, [*saved, *tangents], grads)
    sink_recomputed(backward, len(tangents))
    return Partition(forward, backward, n_forward, tuple(n.name for n in saved), int(saved_bytes), int(baseline))


def _size_source(inputs: list[torch.fx.Node], size: sympy.Basic, env: SymbolEnv | None) -> tuple[torch.fx.Node, int] | None:
    """An input with ``size`` as one of its dims (equal once the guards' substitutions apply), and that dim."""
    wanted = env.simplify(size) if env is not None else size
    for node in inputs:
        meta = node.meta.get(META_KEY)
        if isinstance(meta, TensorMeta):
            for dim, s in enumerate(meta.shape):
                if not isinstance(s, int) and (env.simplify(s) if env is not None else s) == wanted:
                    return node, dim
    return None


def _size_carriers(gm: torch.fx.GraphModule, inputs: list[torch.fx.Node], outputs: list[Any]) -> list[torch.fx.Node]:
    """Forward values to save only for their sizes: for each size the backward reads that none
    of its inputs has as a dim, the tensor it was read from (a primal: saving it copies nothing)."""
    carriers: list[torch.fx.Node] = []
    available = list(inputs)
    env = shape_env_of(gm)
    for node in _ancestors([o for o in outputs if isinstance(o, torch.fx.Node)], frozenset(inputs)):
        if node.target is not aten.sym_size.int or node.args[0] in available:
            continue
        if _size_source(available, node.meta[META_KEY], env) is None:
            source = cast(torch.fx.Node, node.args[0])
            carriers.append(source)
            available.append(source)
    return carriers


def _min_cut(
    forward_nodes: list[torch.fx.Node],
    read_by_backward: list[torch.fx.Node],
    backward_nodes: set[torch.fx.Node],
    outputs: set[torch.fx.Node],
    hints: Mapping[sympy.Symbol, int] | None,
) -> list[torch.fx.Node]:
    index = {n: i for i, n in enumerate(forward_nodes)}
    net = FlowNetwork(2 * len(forward_nodes) + 2)
    source, sink = 2 * len(forward_nodes), 2 * len(forward_nodes) + 1
    for node, i in index.items():
        size = nbytes(node, hints)
        net.add_edge(2 * i, 2 * i + 1, size if _stored_anyway(node, outputs, backward_nodes) else size * UNSTORED_COST)
        # A node on the sink side of its own edge is recomputed in the backward (the forward
        # may still compute it for its own outputs); inputs and non-recomputable ops must not be.
        if node.op == "placeholder" or not recomputable(node):
            net.add_edge(source, 2 * i, INF)
        for user in node.users:
            if user in index:
                net.add_edge(2 * i + 1, 2 * index[user], INF)
    for node in read_by_backward:
        net.add_edge(2 * index[node] + 1, sink, INF)
    value, reached = net.min_cut(source, sink)
    if value == INF:
        raise PartitionError("the joint graph has no finite cut: a value the backward reads cannot be saved")
    return [n for n, i in index.items() if 2 * i in reached and 2 * i + 1 not in reached]


def _stored_anyway(node: torch.fx.Node, outputs: set[torch.fx.Node], backward: set[torch.fx.Node]) -> bool:
    """True when the forward writes ``node``'s result to memory whatever the partition saves."""
    if node.op != "call_function" or node in outputs or not recomputable(node):
        return True
    source = node.args[0] if node.args else None
    if (node.target is operator.getitem or view_source(node.target) is not None) and isinstance(source, torch.fx.Node):
        return _stored_anyway(source, outputs, backward)
    return any(r not in backward for r in library_readers(node))


def sink_recomputed(gm: torch.fx.GraphModule, num_tangents: int) -> int:
    """Move each value the backward recomputes from saved ones to just before its first use;
    return how many moved.

    ``extract`` keeps the joint graph's order, where recomputed forward values come before every
    backward node: a ResNet-50 backward recomputed the ReLUs of its first blocks (three
    32x256x56x56 bf16 activations, 147 MiB) at its start and held them until its end, where their
    gradients are computed. Placed at first use, each lives only as long as eager's would.
    """
    graph = gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if not placeholders:
        return 0
    from_tangents: set[torch.fx.Node] = set(placeholders[len(placeholders) - num_tangents :]) if num_tangents else set()
    for node in nodes:
        if node.op != "placeholder" and any(a in from_tangents for a in node.all_input_nodes):
            from_tangents.add(node)
    # The backward's own nodes keep their order; a recomputed node is emitted just before the
    # first node that reads it (its own recomputed inputs just before it).
    order: list[torch.fx.Node] = []
    emitted: set[torch.fx.Node] = set(placeholders)

    def emit(node: torch.fx.Node) -> None:
        stack = [(node, False)]
        while stack:
            current, ready = stack.pop()
            if current in emitted:
                continue
            if ready:
                emitted.add(current)
                order.append(current)
                continue
            stack.append((current, True))
            for arg in reversed(current.all_input_nodes):
                if arg not in emitted:
                    stack.append((arg, False))

    output = nodes[-1]
    for node in nodes:
        if node in from_tangents:
            emit(node)
    for node in nodes:  # then what the output reads, and anything nothing reads, before it
        if node is not output:
            emit(node)
    emit(output)
    kept = [n for n in nodes if n.op != "placeholder"]
    if order == kept:
        return 0
    moved = sum(1 for a, b in zip(order, kept) if a is not b)
    anchor = placeholders[-1]
    for node in order:
        anchor.append(node)
        anchor = node
    graph.lint()
    gm.recompile()
    return moved


def _ancestors(nodes: list[torch.fx.Node], stop: frozenset[torch.fx.Node] = frozenset()) -> set[torch.fx.Node]:
    # A size read (sym_size.int) is a leaf: extract() reads it from whichever input of the
    # split graph has that size, so the tensor it was traced from need not be available.
    found: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        if node not in stop and node.target is not aten.sym_size.int:
            stack.extend(node.all_input_nodes)
    return found


def extract(gm: torch.fx.GraphModule, inputs: list[torch.fx.Node], outputs: list[Any]) -> torch.fx.GraphModule:
    """A new aten GraphModule computing ``outputs`` from ``inputs`` (nodes of ``gm``)."""
    needed = _ancestors([o for o in outputs if isinstance(o, torch.fx.Node)], frozenset(inputs))
    shape_env = shape_env_of(gm)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    constants: dict[str, Any] = {}
    for node in inputs:
        new = graph.placeholder(node.name)
        new.meta[META_KEY] = node.meta[META_KEY]
        env[node] = new
    for node in gm.graph.nodes:
        if node not in needed or node in env:
            continue
        if node.op == "placeholder":
            raise PartitionError(f"the split graph needs input {node.name}, which is not available to it")
        if node.op == "get_attr":
            constants[str(node.target)] = getattr(gm, str(node.target))
        if node.target is aten.sym_size.int and node.args[0] not in env:
            env[node] = _read_size(graph, node, inputs, env, shape_env)
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in outputs))
    new_gm = torch.fx.GraphModule(constants, graph)
    set_dialect(new_gm, "aten")
    if SHAPE_ENV_KEY in gm.meta:
        new_gm.meta[SHAPE_ENV_KEY] = gm.meta[SHAPE_ENV_KEY]
    return new_gm


def _read_size(
    graph: torch.fx.Graph, node: torch.fx.Node, inputs: list[torch.fx.Node], env: dict[torch.fx.Node, torch.fx.Node], shape_env: SymbolEnv | None
) -> torch.fx.Node:
    found = _size_source(inputs, node.meta[META_KEY], shape_env)
    if found is None:
        raise PartitionError(f"the split graph needs size {node.meta[META_KEY]} ({node.name}), which none of its inputs has")
    new = graph.call_function(aten.sym_size.int, (env[found[0]], found[1]))
    new.meta.update(node.meta)
    return new
