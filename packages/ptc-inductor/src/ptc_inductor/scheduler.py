"""Groups IR nodes into kernels: vertical, reduction prologue/epilogue and horizontal fusion.

A kernel shares one parallel outer loop nest (``outer``) among its nodes; each node runs its
remaining loops inside. A node may join a kernel when every buffer it reads from that kernel
was written at the same outer point, so the shared loop never reads ahead of a write.
"""

from __future__ import annotations

import logging
import math
from collections import ChainMap
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import sympy

from . import sizes
from .analysis import Access, analyze, range_map
from .codegen.triton_heuristics import next_pow2, persistent_limit
from .config import Config, triton_device
from .flatten import leading_count, merged_nodes
from .indexing import bounds, contiguous_strides, is_linear_in, rvar, xvar
from .ir import SPLITTABLE_REDUCTIONS, ComputedNode, ExternNode, Node
from .sizes import Size, known_le, known_lt, static_value

log = logging.getLogger("ptc.inductor.schedule")

SMALL_OUTER = 64
"""Fusing may not shrink a kernel's parallel loop below this many points (it would serialize work)."""
GPU_SMALL_OUTER = 1024
GPU_LARGE_LOOP = 32768
"""On a GPU, fusing may not take a parallel loop of GPU_LARGE_LOOP points or more (the kernel's,
or the joining node's own) down to fewer than GPU_SMALL_OUTER: each outer point is a row of one
program, and a few dozen programs leave most of the chip idle. BERT's query and key head
transposes (393K points each, different inner orders) fused over their common [8, 12] prefix:
96 programs; ResNet-50 fused its first batch-norm-ReLU with a weight's layout copy over [64]."""


@dataclass(frozen=True, slots=True)
class Kernel:
    """Computed nodes sharing the outer loops ``outer``; nodes run in order inside them.

    The last ``partials`` nodes are split column reductions riding along a row kernel (Triton
    only): each program loops over whole chunks of rows, runs the row nodes on every row and
    accumulates the chunk's partial column results in registers, so the rows are read once.
    """

    name: str
    nodes: tuple[ComputedNode, ...]
    outer: tuple[Size, ...]
    partials: int = 0

    @property
    def row_nodes(self) -> tuple[ComputedNode, ...]:
        """The nodes that run over ``outer`` (all of them unless partials ride along)."""
        return self.nodes[: len(self.nodes) - self.partials]

    @property
    def is_empty(self) -> bool:
        """True when no node writes any element (a zero-size output): the kernel is never launched.

        Read from the loop sizes: only a static 0 makes a kernel empty here; a symbolic size that
        is 0 at run time runs no iteration (C++) or no program (Triton's launcher checks its grid).
        A reduction over an empty range still writes its identity values."""
        return all(_numel(n.ranges) == 0 for n in self.nodes)

    @property
    def partial_nodes(self) -> tuple[ComputedNode, ...]:
        """The split column reductions riding along, each over (chunks, *columns) x (rows of a chunk,)."""
        return self.nodes[len(self.nodes) - self.partials :]


Step = Kernel | ExternNode


@dataclass(frozen=True, slots=True)
class Schedule:
    """Steps in execution order, and the recorded accesses of every computed node."""

    steps: tuple[Step, ...]
    accesses: dict[str, Access]

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """The generated kernels, in order."""
        return tuple(s for s in self.steps if isinstance(s, Kernel))


def outer_ranges(nodes: Sequence[ComputedNode]) -> tuple[Size, ...] | None:
    """The shared outer loop sizes of ``nodes``, or None when they cannot share a loop nest."""
    reductions = [n for n in nodes if n.is_reduction]
    if reductions:
        outer = reductions[0].ranges
        if any(r.ranges != outer for r in reductions):
            return None
    else:
        outer = nodes[0].ranges
        for n in nodes[1:]:
            k = 0
            while k < min(len(outer), len(n.ranges)) and outer[k] == n.ranges[k]:
                k += 1
            outer = outer[:k]
    if any(n.ranges[: len(outer)] != outer for n in nodes):
        return None
    if not outer and len(nodes) > 1 and any(n.ranges for n in nodes):
        return None
    return outer


def _numel(dims: Sequence[Size]) -> Size:
    return sizes.normalize(math.prod(dims))


def _outer_local(
    load: sympy.Expr,
    store: sympy.Expr,
    k: int,
    consumer: ComputedNode,
    producer: ComputedNode,
) -> bool:
    """True when ``load`` (in the consumer) only reads what the producer wrote at the same outer point."""
    outer_vars = [xvar(i) for i in range(k)]
    cranges = range_map(consumer)
    env = sizes.current()
    if any(s not in cranges and not env.is_symbol(s) for s in load.free_symbols):
        return False
    e_rest, s_rest = load, store
    for v in outer_vars:
        ce, cs = is_linear_in(load, v), is_linear_in(store, v)
        if ce is None or cs is None or sympy.expand(ce - cs) != 0:
            return False
        e_rest = e_rest - ce * v
        s_rest = s_rest - cs * v
    e_rest, s_rest = sympy.expand(e_rest), sympy.expand(s_rest)
    if any(v in e_rest.free_symbols or v in s_rest.free_symbols for v in outer_vars):
        return False
    pranges = range_map(producer)
    if sympy.expand(e_rest - s_rest) == 0:
        return all(known_le(cranges[s], pranges.get(s, 0)) for s in e_rest.free_symbols if s in cranges)
    dense = contiguous_strides(producer.ranges)
    expected = sum((xvar(i) * st for i, st in enumerate(dense)), sympy.Integer(0))
    if sympy.expand(store - expected) != 0:
        return False
    found = bounds(e_rest, cranges)
    return found is not None and known_le(0, found[0]) and known_lt(found[1], _numel(producer.ranges[k:]))


def dependencies_ok(nodes: Sequence[ComputedNode], outer: tuple[Size, ...], accesses: Mapping[str, Access]) -> bool:
    """True when every in-kernel read of ``nodes`` hits data written at the same outer point."""
    k = len(outer)
    writer: dict[str, tuple[ComputedNode, sympy.Expr]] = {}
    for node in nodes:
        acc = accesses[node.name]
        for name, index in acc.loads:
            found = writer.get(name)
            if found is None:
                continue
            if k == 0 and not node.ranges and not node.reduction_ranges:
                continue
            if not _outer_local(index, found[1], k, node, found[0]):
                return False
        for name, index in acc.stores:
            writer[name] = (node, index)
    return True


def live_nodes(nodes: Sequence[Node], accesses: dict[str, Access], outputs: Collection[str]) -> list[Node]:
    """``nodes`` without the computed ones whose buffers nothing reads and no output returns.

    A decomposition can leave work nobody uses (max_pool2d's argmax in inference): it would
    still run, inside the kernel of the value it shares loops with. Extern calls are kept.
    """
    live = set(outputs)
    kept: list[Node] = []
    for node in reversed(nodes):
        if isinstance(node, ComputedNode):
            if not any(b.name in live for b in node.outputs):
                continue
            live.update(accesses[node.name].reads())
        else:
            live.update(node.reads)
        kept.append(node)
    return kept[::-1]


HOIST_BYTES = 1 << 20
"""A node adding more than this to the memory held (and more than it reads from the kernel) never
joins a kernel that runs before an extern call it follows: fusion must not stretch big buffers'
lives."""

UNRELATED_MAX_POINTS = 1 << 20
"""A node of this many points or more joins only a kernel it shares a buffer with (reads or
writes): fusing it with unrelated work saves one launch, small beside the node itself."""


def _bytes_read_from(step: Sequence[ComputedNode], reads: Collection[str]) -> int:
    return sum(sizes.hint(b.layout.nbytes) for n in step for b in n.outputs if b.name in reads)


def _last_readers(nodes: Sequence[Node], accesses: Mapping[str, Access], made: Collection[str], outputs: Collection[str] | None) -> dict[str, int]:
    """For each buffer in ``made`` (those the nodes make), the position of the last node reading
    it; the graph's outputs (and, without ``outputs``, every buffer) are left out: they outlive
    the graph."""
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in accesses[node.name].reads() if isinstance(node, ComputedNode) else node.reads:
            if name in made:
                last[name] = i
    return {} if outputs is None else {name: i for name, i in last.items() if name not in outputs}


def schedule(nodes: Sequence[Node], config: Config, outputs: Collection[str] | None = None) -> Schedule:
    """Order nodes into kernels and extern calls, fusing where legal and profitable.

    With ``outputs`` (the graph's output buffers), computed nodes nothing needs are dropped."""
    accesses = {n.name: analyze(n) for n in nodes if isinstance(n, ComputedNode)}
    if outputs is not None:
        nodes = live_nodes(nodes, accesses, outputs)
    made_by = {b.name: b for n in nodes for b in n.outputs if b is not None}
    last_reader = _last_readers(nodes, accesses, made_by.keys(), outputs)
    steps: list[list[ComputedNode] | ExternNode] = []
    outers: list[tuple[Size, ...]] = []
    produced_at: dict[str, int] = {}
    for position, node in enumerate(nodes):
        if isinstance(node, ExternNode):
            steps.append(node)
            outers.append(())
            for buf in node.outputs:
                if buf is not None:
                    produced_at[buf.name] = len(steps) - 1
            continue
        reads = accesses[node.name].reads()
        earliest = max((produced_at[r] for r in reads if r in produced_at), default=-1)
        best, best_score = -1, -1
        best_outer: tuple[Size, ...] = ()
        best_nodes: list[ComputedNode] = []
        best_accesses: dict[str, Access] = {}
        after_extern = False
        # What computing the node early adds to the memory held: its outputs, less the inputs it
        # is the last to read, which die early with it (a backward's recomputed GELU joined by
        # the GELU's gradient: the gradient is made early, the product it reads dies early).
        made = sum(sizes.hint(b.layout.nbytes) for b in node.outputs)
        made -= sum(sizes.hint(made_by[r].layout.nbytes) for r in reads if last_reader.get(r) == position)
        on_gpu = triton_device(config, node.outputs[0].layout.device)
        own = sizes.hint(_numel(node.ranges))
        for si in range(len(steps) - 1, max(earliest, 0) - 1, -1) if config.fuse else ():
            step = steps[si]
            if isinstance(step, ExternNode):
                after_extern = True
                continue
            if after_extern and made > HOIST_BYTES and made > _bytes_read_from(step, reads):
                # Joining a kernel before an extern call computes the node early: its outputs
                # would live across the call (and any later ones) for nothing but a launch.
                continue
            candidate = [*step, node]
            outer = outer_ranges(candidate)
            merged: dict[str, Access] = {}
            if outer is None and on_gpu:
                # The same elements in another shape (a product's bias add over (tokens, features)
                # read by a GELU over (batch, seq, features)): one side's leading dims merged.
                found = _flattened(step, outers[si], node, accesses)
                if found is not None:
                    candidate, merged = found
                    outer = outer_ranges(candidate)
            if outer is None:
                continue
            view = ChainMap(merged, accesses) if merged else accesses
            # Only a matter of speed (how much parallel work is left): decided at the hints.
            if outer != outers[si] and sizes.hint(_numel(outer)) < min(sizes.hint(_numel(outers[si])), SMALL_OUTER):
                continue
            if on_gpu and sizes.hint(_numel(outer)) < GPU_SMALL_OUTER and max(sizes.hint(_numel(outers[si])), own) >= GPU_LARGE_LOOP:
                continue
            if not dependencies_ok(candidate, outer, view):
                continue
            written = {b.name for n in step for b in n.outputs}
            score = len(reads & written) * 2 + len(reads & {r for n in step for r in accesses[n.name].reads()})
            if score == 0 and own >= UNRELATED_MAX_POINTS:
                # Nothing to share but a launch, which a node this large does not notice; joined,
                # it can change the kernel's loops (GPT-2's twelve recomputed GELUs and its
                # logits' padded copy became one row loop, 891 us against 807 apart).
                continue
            if score > best_score:
                best, best_score, best_outer, best_nodes, best_accesses = si, score, outer, candidate, merged
        if best >= 0:
            group = steps[best]
            assert isinstance(group, list)
            group[:] = best_nodes
            accesses.update(best_accesses)
            outers[best] = best_outer
            target = best
        else:
            steps.append([node])
            outers.append(node.ranges)
            target = len(steps) - 1
        for buf in node.outputs:
            produced_at[buf.name] = target
    final: list[Step] = []
    count = 0
    for step, outer in zip(steps, outers):
        if isinstance(step, ExternNode):
            final.append(step)
        else:
            final.append(Kernel(f"kernel{count}", tuple(step), outer))
            count += 1
    if config.fuse:
        final = _attach_partials(final, accesses, config)
    log.debug("scheduled %d nodes into %d kernels", len(nodes), len(final))
    return Schedule(tuple(final), accesses)


# -- split column reductions riding along row kernels --------------------------------------------

CHUNK = sympy.Symbol("pc", integer=True, nonnegative=True)
ROW = sympy.Symbol("rr", integer=True, nonnegative=True)
"""A row loop's chunk of rows and row within it: generated Triton names them ``pc`` and ``rr``."""


def _partial_shape(kernel: Kernel) -> tuple[int, tuple[int, ...], int] | None:
    """(chunks, columns, rows per chunk) when every node of ``kernel`` is a split column reduction
    (over static sizes: a row loop keeps whole rows in one tile, and splits are static)."""
    first = kernel.nodes[0]
    if len(first.ranges) < 2 or len(first.reduction_ranges) != 1 or kernel.partials:
        return None
    dims = [static_value(s) for s in (*first.ranges, *first.reduction_ranges)]
    if any(d is None for d in dims):
        return None
    for n in kernel.nodes:
        if not n.is_reduction or n.reduction_type not in SPLITTABLE_REDUCTIONS:
            return None
        if n.ranges != first.ranges or n.reduction_ranges != first.reduction_ranges:
            return None
        if any(not b.layout.dtype.is_floating_point for b in n.outputs):
            return None
    return int(first.ranges[0]), tuple(int(s) for s in first.ranges[1:]), int(first.reduction_ranges[0])


def _row_index(node: ComputedNode, index: sympy.Expr, chunk: int, cols: tuple[int, ...]) -> sympy.Expr:
    """A row kernel node's ``index`` at row ``_chunk * chunk + _row``, its columns named x1.. ."""
    table: dict[sympy.Expr, sympy.Expr] = {xvar(0): CHUNK * chunk + ROW}
    if node.is_reduction:
        table.update({rvar(i): xvar(i + 1) for i in range(len(cols))})
    return sympy.expand(index.xreplace(table))


def partial_index(index: sympy.Expr) -> sympy.Expr:
    """A split partial's ``index`` in row-loop terms: its chunk (x0) is CHUNK, its row in the chunk (r0) ROW."""
    return sympy.expand(index.xreplace({xvar(0): CHUNK, rvar(0): ROW}))


def _can_ride(row: Kernel, part: Kernel, shape: tuple[int, tuple[int, ...], int], accesses: dict[str, Access]) -> bool:
    """True when ``part``'s split reductions can run inside ``row``'s row loop, reading its rows.

    Every row node must cover the same columns (so both share one tile of lanes); anything the
    partials read that the row nodes write must be read at the very element written; and they
    must share at least one load, or riding along would save nothing.
    """
    if len(row.outer) != 1 or row.partials or static_value(row.outer[0]) is None:
        return False
    chunks, cols, chunk = shape
    if chunks * chunk != row.outer[0] or chunk < 2:
        return False
    itemsize = max(b.layout.dtype.itemsize for n in (*row.nodes, *part.nodes) for b in n.outputs)
    if next_pow2(math.prod(cols)) > persistent_limit(itemsize):
        return False  # a row must fit one tile, as in a persistent kernel
    inners = [n.reduction_ranges if n.is_reduction else n.ranges[1:] for n in row.nodes]
    if any(inner != cols and (n.is_reduction or inner) for n, inner in zip(row.nodes, inners)) or cols not in inners:
        return False  # no row node reads whole rows: the partials would only serialize it
    stores = {name: _row_index(n, i, chunk, cols) for n in row.nodes for name, i in accesses[n.name].stores}
    row_loads = {(name, _row_index(n, i, chunk, cols)) for n in row.nodes for name, i in accesses[n.name].loads}
    shared = False
    for n in part.nodes:
        for name, index in accesses[n.name].loads:
            at = partial_index(index)
            if name in stores and stores[name] != at:
                return False
            shared = shared or (name, at) in row_loads
    return shared


def _flattened(
    step: Sequence[ComputedNode], outer: tuple[Size, ...], node: ComputedNode, accesses: Mapping[str, Access]
) -> tuple[list[ComputedNode], dict[str, Access]] | None:
    """``[*step, node]`` with the leading dims of ``node`` (or of every node of ``step``) merged
    to match the other side's first loop, with the merged nodes' accesses; None if neither can."""
    if not outer or not node.ranges:
        return None
    count = leading_count(node.ranges, outer[0])
    if count is not None:
        found = merged_nodes([node], accesses, count)
        if found is not None:
            return [*step, *found[0]], found[1]
    count = leading_count(outer, node.ranges[0])
    if count is not None:
        found = merged_nodes(step, accesses, count)
        if found is not None:
            return [*found[0], node], found[1]
    return None


def _as_row_loop(row: Kernel, shape: tuple[int, tuple[int, ...], int], accesses: Mapping[str, Access]) -> tuple[Kernel, dict[str, Access]] | None:
    """``row`` over one loop of rows, with the accesses of nodes that changed: itself, or its
    leading loops merged into one when they cover the partials' rows (a layer norm's backward
    over (batch, seq) rows, whose weight gradient is split into chunks of tokens); else None."""
    if len(row.outer) == 1:
        return row, {}
    chunks, _, chunk = shape
    if row.partials or leading_count(row.outer, chunks * chunk) != len(row.outer):
        return None
    found = merged_nodes(row.nodes, accesses, len(row.outer))
    if found is None:
        return None
    return Kernel(row.name, tuple(found[0]), (sizes.normalize(chunks * chunk),)), found[1]


def _attach_partials(steps: list[Step], accesses: dict[str, Access], config: Config) -> list[Step]:
    """Move each split column reduction into the row kernel that reads the same rows, when legal."""
    out = list(steps)
    j = 0
    while j < len(out):
        part = out[j]
        if not isinstance(part, Kernel) or (shape := _partial_shape(part)) is None or not triton_device(config, part.nodes[0].outputs[0].layout.device):
            j += 1
            continue
        reads = {r for n in part.nodes for r in accesses[n.name].reads()}
        merged = False
        for i in range(j - 1, -1, -1):
            row = out[i]
            rows = _as_row_loop(row, shape, accesses) if isinstance(row, Kernel) else None
            if rows is not None and _can_ride(rows[0], part, shape, {**accesses, **rows[1]}):
                accesses.update(rows[1])
                out[i] = Kernel(row.name, rows[0].nodes + part.nodes, rows[0].outer, len(part.nodes))
                del out[j]
                merged = True
                break
            # Moving the partials before this step must not make them read a buffer before it is written.
            written = {b.name for n in row.nodes for b in n.outputs} if isinstance(row, Kernel) else {b.name for b in row.outputs if b is not None}
            if written & reads:
                break
        if not merged:
            j += 1
    return out
