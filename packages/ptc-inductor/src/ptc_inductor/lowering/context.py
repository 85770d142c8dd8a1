"""The graph being lowered: the one mutable place where IR nodes and buffers are collected."""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .. import sizes
from ..indexing import Expr, contiguous_strides
from ..ir import (
    Buffer,
    BufferArg,
    ComputedNode,
    ExternNode,
    Layout,
    Loader,
    Node,
    TensorValue,
    expand_index,
    flexible_layout,
    squeeze_ranges,
    with_simplified_indices,
)
from ..sizes import Size
from ..virtualized import ops


def is_dense(size: Sequence[Size], stride: Sequence[Size]) -> bool:
    """True when ``stride`` is a permutation of row-major strides for ``size`` (no gaps, no overlap).

    Symbolic strides are ordered by their hints, then each is checked to be exactly the product
    of the sizes inside it, so the answer holds at every size."""
    dims = sorted(((sizes.hint(st), i) for i, (sz, st) in enumerate(zip(size, stride)) if sz != 1))
    running: Size = 1
    for _, i in dims:
        if not sizes.equal(stride[i], running):
            return False
        running = sizes.normalize(running * size[i])
    return True


Strides = tuple[Size, ...]
Strided = tuple[Sequence[Size], Size]
Restride = Callable[[Strides, int], Strided | None]
"""How a view's (strides, offset) follow from its base's, or None when no strides can express it."""


def buffer_loader(buf: BufferArg, dtype: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    """A loader reading ``buf`` through its strides."""
    name, stride, offset = buf.buffer, buf.stride, buf.offset

    def load(idx: Sequence[Expr]) -> Any:
        expr: Expr = sympy.sympify(offset)
        for i, s in zip(idx, stride):
            expr = expr + i * s
        return ops.load(name, sympy.expand(expr))

    return load


LOAD_COST = 1
"""What reading a realized buffer adds to a value's cost: one ``ops.load``, counted like any op."""


@dataclass(slots=True)
class LazyValue:
    """One value of the graph being lowered that is not in a buffer (yet): what inlining it costs.

    ``value`` is what consumers hold: its loader computes the value until it is realized, then
    reads the buffer, so a late decision to realize also serves the readers made before it.
    ``inputs`` are the keys (indices in the context's table) of the lazy values that loader
    evaluates once per element, ``loads`` the buffers it reads directly, ``ops`` its own ops;
    ``seq`` places it among the nodes; ``view_of``/``restride`` describe a view of another lazy
    value; a graph node's value is a ``candidate`` for realizing, with eager's ``stride``.
    ``stored_as`` is a buffer already holding the value in another layout (a padded product's
    rows), which a graph output may return instead of a copy (see ``stored_view``).
    """

    value: TensorValue
    compute: Loader
    inputs: tuple[int, ...]
    loads: int
    ops: int
    origin: str
    seq: int
    view_of: int | None = None
    restride: Restride | None = None
    stride: tuple[Size, ...] | None = None
    candidate: bool = False
    realized: TensorValue | None = None
    stored_as: BufferArg | None = None
    # Per input: whether the loader evaluates it at the value's own index (a pointwise operand of
    # the same shape), where code generation shares repeated evaluations.
    at_own_index: tuple[bool, ...] = ()
    # The key of the narrower float value this one converts exactly (bf16 to float32, say): the
    # narrow one is stored in its place (see realize_recomputed).
    widens: int | None = None


@dataclass(frozen=True, slots=True)
class Reader:
    """A computed node that inlines lazy values: their keys, evaluated once per element, and its own graph node."""

    name: str
    roots: tuple[int, ...]
    origin: str
    # Per root, as LazyValue's, for a pointwise node (see _evaluations); empty for a reduction.
    at_own_index: tuple[bool, ...] = ()


@dataclass
class LoweringContext:
    """Mutable state of one lowering: nodes in order, buffers by name, and the node being lowered.

    Every lazy value is recorded (``lazy``) with the values its loader inlines, so that the
    cost of inlining it, and how often each computed node evaluates it, can be counted
    transitively. Nodes stay ordered by when their value was defined: a value realized late
    is computed at its definition, ahead of every node that reads it.
    """

    nodes: list[Node] = field(default_factory=list)
    buffers: dict[str, Buffer] = field(default_factory=dict)
    origin: str = ""
    meta: Any = None
    storage_offsets: dict[str, Size] = field(default_factory=dict)
    # Every kernel will be Triton (the backend is forced), not only those over CUDA tensors.
    triton: bool = False
    # The graph stores activations channels-last (lowering/layout.py): a value is computed in the
    # memory order of its buffer, and reductions read channels-last values in memory order.
    channels_last: bool = False
    # Strides the node being lowered wants for its reduction result (a channels-last pooling).
    reduction_stride: tuple[Size, ...] | None = None
    # Values lowerings derive once and share between call sites (matmul.py's zero-padded copies),
    # keyed by the id of a value the entry itself holds (so no other value takes that id).
    shared: dict[Any, Any] = field(default_factory=dict)
    _copies: dict[tuple[BufferArg, tuple[Size, ...]], BufferArg] = field(default_factory=dict)
    _lazy: list[LazyValue] = field(default_factory=list)
    _key_of: dict[int, int] = field(default_factory=dict)
    _readers: list[Reader] = field(default_factory=list)
    _costs: dict[int, int] = field(default_factory=dict)
    _realized_keys: list[int] = field(default_factory=list)
    _node_seqs: list[int] = field(default_factory=list)
    _clock: int = 0
    _counter: int = 0

    def new_name(self, prefix: str = "buf") -> str:
        """A fresh stable buffer name."""
        name = f"{prefix}{self._counter}"
        self._counter += 1
        return name

    def add_buffer(self, name: str, layout: Layout, kind: str) -> Buffer:
        """Record a buffer."""
        buf = Buffer(name, layout, kind)
        self.buffers[name] = buf
        return buf

    def value_of_buffer(self, buf: Buffer) -> TensorValue:
        """A TensorValue reading ``buf`` through its layout."""
        lay = buf.layout
        arg = BufferArg(buf.name, lay.size, lay.stride, lay.offset)
        return TensorValue(lay.dtype, lay.device, lay.size, buffer_loader(arg, lay.dtype), arg)

    def lazy(
        self, value: TensorValue, inputs: Sequence[Any], ops_count: int, view_of: tuple[TensorValue, Restride] | None = None,
        stored_as: BufferArg | None = None, at_own_index: Sequence[Any] = (),
    ) -> TensorValue:
        """Record a new unrealized ``value`` whose loader runs ``ops_count`` ops of its own and
        evaluates each TensorValue in ``inputs`` once per element; return the value consumers use.

        ``view_of`` is (base, restride) for a view of another lazy value: realizing the view can
        then store the base and view its buffer (see ``remap``). ``stored_as`` is a buffer view
        that already holds the value in another layout (see ``stored_view``). ``at_own_index``
        are the inputs the loader evaluates at the value's own index (pointwise operands)."""
        key = len(self._lazy)
        table = self._lazy
        compute = value.loader

        def load(idx: Sequence[Expr]) -> Any:
            real = table[key].realized
            return compute(idx) if real is None else real.loader(idx)

        shown = dataclasses.replace(value, loader=load)
        self._register(shown, compute, inputs, ops_count, {id(a) for a in at_own_index})
        if view_of is not None and id(view_of[0]) in self._key_of:
            self._lazy[key].view_of = self._key_of[id(view_of[0])]
            self._lazy[key].restride = view_of[1]
        self._lazy[key].stored_as = stored_as
        return shown

    def mark_widening(self, value: TensorValue, source: TensorValue) -> None:
        """Record that lazy ``value`` is ``source`` converted exactly to a wider float dtype."""
        key, src = self._key_of.get(id(value)), self._key_of.get(id(source))
        if key is not None and src is not None and source.view is None:
            self._lazy[key].widens = src

    def view_base(self, value: TensorValue) -> tuple[TensorValue, Restride] | None:
        """(base, restride) when ``value`` is an unrealized view of another value (see ``lazy``)."""
        key = self._key_of.get(id(value))
        if key is None or value.view is not None:
            return None
        record = self._lazy[key]
        if record.realized is not None or record.view_of is None or record.restride is None:
            return None
        return self._lazy[record.view_of].value, record.restride

    def stored_view(self, value: TensorValue, stride: Sequence[Size]) -> BufferArg | None:
        """A buffer view already holding ``value`` with strides in the same order as ``stride``
        (eager's), or None: the padded rows of a product (``stored_as``), or a view of them.

        A graph output returned this way has longer rows than eager's, in eager's dim order, as
        torch.compile returns a padded product; storing it again in eager's exact layout cost
        GPT-2's bf16 logits (8x1024x50257) 425 us a step on an H200. Nothing is cached on the
        record: a saved value asking for eager's exact layout still gets a copy."""
        key = self._key_of.get(id(value))
        if key is None or value.view is not None:
            return None
        record = self._lazy[key]
        found: Strided | None = None
        if record.stored_as is not None:
            arg = record.stored_as
            found = (arg.stride, arg.offset)
        elif record.view_of is not None and record.restride is not None:
            base = self._lazy[record.view_of].stored_as
            if base is None:
                return None
            found = record.restride(base.stride, base.offset)
            arg = base
        if found is None or not _same_order(value.size, found[0], stride):
            return None
        return BufferArg(arg.buffer, value.size, tuple(sizes.normalize(s) for s in found[0]), sizes.normalize(found[1]))

    def _register(self, value: TensorValue, compute: Loader, inputs: Sequence[Any], ops_count: int, own: Collection[int] = ()) -> int:
        keys: list[int] = []
        at_own: list[bool] = []
        loads = 0
        for a in inputs:
            if not isinstance(a, TensorValue):
                continue
            key = self._key_of.get(id(a))
            if key is not None:
                keys.append(key)
                at_own.append(id(a) in own)
            elif a.view is not None:
                loads += 1
        self._clock += 1
        record = LazyValue(value, compute, tuple(keys), loads, ops_count, self.origin, self._clock)
        record.at_own_index = tuple(at_own)
        self._lazy.append(record)
        # The record holds the value, which keeps its id() unique while the table uses it.
        self._key_of[id(value)] = len(self._lazy) - 1
        return len(self._lazy) - 1

    def define(self, value: TensorValue, stride: Sequence[Size] | None) -> None:
        """Mark lazy ``value`` as a graph node's result (with eager's ``stride``): one worth realizing."""
        key = self._key_of.get(id(value))
        if key is not None and not self._lazy[key].candidate:
            self._lazy[key].candidate = True
            self._lazy[key].stride = None if stride is None else tuple(stride)

    def cost(self, value: TensorValue) -> int:
        """Ops a consumer inlines by reading ``value``: its own, those of the unrealized values it
        reads (transitively), and one load per realized buffer."""
        if value.view is not None:
            return LOAD_COST
        key = self._key_of.get(id(value))
        return 1 if key is None else self._cost(key)

    def _cost(self, key: int) -> int:
        if self._lazy[key].realized is not None:
            return LOAD_COST
        # Iterative, in creation order (inputs are older than their readers): a long chain of
        # views must not hit the recursion limit.
        pending, stack = set(), [key]
        while stack:
            k = stack.pop()
            if k in pending or k in self._costs or self._lazy[k].realized is not None:
                continue
            pending.add(k)
            stack.extend(self._lazy[k].inputs)
        for k in sorted(pending):
            rec = self._lazy[k]
            total = rec.ops + rec.loads * LOAD_COST
            for i in rec.inputs:
                total += LOAD_COST if self._lazy[i].realized is not None else self._costs[i]
            self._costs[k] = total
        return self._costs[key]

    def _evaluations(self, roots: Sequence[int], at_own_index: Sequence[bool] = ()) -> dict[int, int]:
        """How often each unrealized lazy value is evaluated per element of a node inlining ``roots``.

        In a pointwise node (``at_own_index`` given, per root), evaluations at the same index
        count once however many paths lead there: code generation computes an expression once
        per element (a GELU backward reads its tanh along five paths, through identical
        reshapes). An index is named by the path's pointwise operands (the node's own index) and
        its views (their strides over the base). In a reduction's node every path counts: the
        inlining budget was set counting them so.
        """
        if not at_own_index:
            return self._path_counts(roots)
        signatures: dict[int, set[int]] = {}
        names: dict[tuple[Any, ...], int] = {}
        pending: list[int] = []

        def name(parent: int, edge: Any) -> int:
            return names.setdefault((parent, edge), len(names) + 1)  # 0: the node's own index

        def add(key: int, found: set[int]) -> None:
            if self._lazy[key].realized is not None:
                return
            if key not in signatures:
                signatures[key] = set()
                heapq.heappush(pending, -key)
            signatures[key] |= found

        for j, r in enumerate(roots):
            add(r, {0} if at_own_index[j] else {name(-1, (r, j))})
        # Latest first: every value that inlines a key was made after it, so its set is final
        # when it comes off the heap.
        while pending:
            key = -heapq.heappop(pending)
            record, found = self._lazy[key], signatures[key]
            flags = record.at_own_index or (False,) * len(record.inputs)
            view = self._view_signature(record)
            for position, (i, same) in enumerate(zip(record.inputs, flags)):
                if same:
                    add(i, found)
                else:
                    edge = view if view is not None else (key, position)
                    add(i, {name(s, edge) for s in found})
        return {k: len(v) for k, v in signatures.items()}

    def _view_signature(self, record: LazyValue) -> tuple[Any, ...] | None:
        """How a strided view reads its base: its size and its strides over the base stored
        row-major; None for any other value. Two views alike read the base at the same index."""
        if record.view_of is None or record.restride is None:
            return None
        base = self._lazy[record.view_of].value
        found = record.restride(contiguous_strides(base.size), 0)
        if found is None:
            return None
        return ("view", record.view_of, tuple(record.value.size), tuple(found[0]), found[1])

    def _path_counts(self, roots: Sequence[int]) -> dict[int, int]:
        """Evaluations per element counted per path (see ``_evaluations``)."""
        counts: dict[int, int] = {}
        pending: list[int] = []

        def add(key: int, n: int) -> None:
            if self._lazy[key].realized is not None:
                return
            if key not in counts:
                counts[key] = 0
                heapq.heappush(pending, -key)
            counts[key] += n

        for r in roots:
            add(r, 1)
        while pending:
            key = -heapq.heappop(pending)
            for i in self._lazy[key].inputs:
                add(i, counts[key])
        return counts

    def _origins(self, roots: Sequence[int], own: str) -> tuple[str, ...]:
        names = [self._lazy[k].origin for k in sorted(self._evaluations(roots))]
        return tuple(dict.fromkeys((*names, own)))

    def _insert(self, node: Node, seq: int | None = None) -> None:
        if seq is None:
            self._clock += 1
            seq = self._clock
        at = bisect.bisect_right(self._node_seqs, seq)
        self.nodes.insert(at, node)
        self._node_seqs.insert(at, seq)

    def _roots_of(self, value: TensorValue | None) -> tuple[int, ...]:
        key = None if value is None else self._key_of.get(id(value))
        return () if key is None else (key,)

    def realize(self, value: TensorValue, stride: Sequence[Size] | None = None, *, exact: bool = False) -> TensorValue:
        """Materialize ``value`` into a buffer (once); ``stride`` fixes the layout when dense
        (always, with ``exact``: a padded layout an extern kernel requires)."""
        if value.view is not None:
            return value
        key = self._key_of.get(id(value))
        if key is None:
            key = self._register(value, value.loader, (), 1)
        record = self._lazy[key]
        if record.realized is not None:
            return record.realized
        if record.view_of is not None and not exact:
            shared = self._realize_as_view(record, stride)
            if shared is not None:
                return shared
        if exact and stride is not None:
            layout = Layout(value.dtype, value.device, value.size, tuple(stride), 0, False)
        else:
            layout = self._layout_for(value, stride)
        name = self.new_name()
        buf = self.add_buffer(name, layout, "computed")
        ranges, kept = stride_ordered(value.size, layout.stride) if self.channels_last else squeeze_ranges(value.size)
        ndim = value.ndim
        loader = record.compute

        def body(xs: Sequence[Expr], rs: Sequence[Expr]) -> None:
            idx = expand_index(xs, kept, ndim)
            ops.store(name, layout.index(idx), loader(idx))

        origins = self._origins(record.inputs, record.origin)
        wrapped = with_simplified_indices(body, ranges, ())
        self._readers.append(Reader(name, record.inputs, record.origin, record.at_own_index))
        # Computed where the value was defined: nodes made since may read it through its loader.
        self._insert(ComputedNode(name, "pointwise", (buf,), ranges, (), wrapped, origins), record.seq)
        record.realized = self.value_of_buffer(buf)
        self._costs.clear()
        self._realized_keys.append(key)
        return record.realized

    def as_strided_arg(self, value: TensorValue, stride: Sequence[Size], exact: bool = False) -> BufferArg:
        """A BufferArg of ``value`` laid out as ``stride`` (a dense layout), copying a value stored in
        another memory order (once per buffer and layout); with ``exact`` the strides of size-1
        dims match too (a graph output's must be eager's)."""
        real = self.realize(value, stride)
        arg = real.view
        assert arg is not None
        if _same_strides(arg, stride, False):
            # The same memory order: ``exact`` strides of size-1 dims are relabelled by a view.
            return BufferArg(arg.buffer, arg.size, tuple(stride), arg.offset) if exact and not _same_strides(arg, stride, True) else arg
        key = (arg, tuple(stride))
        found = self._copies.get(key)
        if found is None:
            copy = self.lazy(TensorValue(value.dtype, value.device, value.size, real.loader), [real], 0)
            found = self.realize(copy, stride, exact=True).view
            assert found is not None
            self._copies[key] = found
        return found

    def strides_of(self, value: TensorValue) -> tuple[Size, ...] | None:
        """The strides ``value`` is (or will be, once realized as a graph node's value) stored with; None if unknown."""
        if value.view is not None:
            return value.view.stride
        key = self._key_of.get(id(value))
        if key is None:
            return None
        record = self._lazy[key]
        if record.realized is not None:
            return None if record.realized.view is None else record.realized.view.stride
        return record.stride if record.candidate else None

    def _layout_for(self, value: TensorValue, stride: Sequence[Size] | None) -> Layout:
        if stride is not None and len(stride) == value.ndim and is_dense(value.size, stride):
            return Layout(value.dtype, value.device, value.size, tuple(stride), 0, False)
        return flexible_layout(value.dtype, value.device, value.size)

    def _realize_as_view(self, record: LazyValue, stride: Sequence[Size] | None) -> TensorValue | None:
        """``record``'s value (a view) as a strided view of its base's buffer, or None to copy it.

        The base's other readers want the same data (a norm's output goes to a matmul through a
        reshape and to a residual add without one): storing the base once serves them all, and
        its node keeps the loop ranges of the reductions it reads, so it joins their kernel. An
        unrealized base is realized only when the view covers all of it (not for a slice).
        """
        assert record.view_of is not None and record.restride is not None
        base, restride, value = self._lazy[record.view_of], record.restride, record.value

        def fits(found: Strided | None) -> bool:
            if found is None:
                return False
            return stride is None or all(n == 1 or sizes.equal(a, b) for n, a, b in zip(value.size, found[0], stride))

        if base.realized is None:
            # Only a matter of memory (a bigger base stored to view a part of it): hints decide.
            if sizes.hint(base.value.numel) > sizes.hint(value.numel):
                return None
            if base.view_of is None:
                layout = self._layout_for(base.value, base.stride)
                if not fits(restride(layout.stride, layout.offset)):
                    return None
            real = self.realize(base.value, base.stride)
        else:
            real = base.realized
        arg = real.view
        found = None if arg is None else restride(arg.stride, arg.offset)
        if arg is None or found is None or not fits(found):
            return None
        view = BufferArg(arg.buffer, value.size, tuple(sizes.normalize(s) for s in found[0]), sizes.normalize(found[1]))
        record.realized = TensorValue(value.dtype, value.device, value.size, buffer_loader(view, value.dtype), view)
        self._costs.clear()
        self._realized_keys.append(self._key_of[id(value)])
        return record.realized

    def realize_recomputed(self, budget: int) -> None:
        """Realize graph values while one wastes more than ``budget`` ops recomputing: its cost
        times its evaluations beyond the first, both counted through the values that inline it.

        Run once every reader is known. Inlining compounds: a value inlined into another that is
        itself inlined in k places is evaluated k times, so a residual stream read by every
        layer's norm would otherwise be recomputed from the embeddings in each of them. Greedy,
        most waste first: realizing a value only lowers the waste of the others (the values it
        read are evaluated once more, by its node, instead of once per evaluation of it, and the
        values reading it get cheaper), so a value skipped now never becomes worth realizing.
        """
        reads = [self._evaluations(r.roots, r.at_own_index) for r in self._readers]
        evals: dict[int, int] = {}
        readers: dict[int, set[int]] = {}

        def count(i: int, sign: int) -> None:
            for k, n in reads[i].items():
                evals[k] = evals.get(k, 0) + sign * n
                if sign > 0:
                    readers.setdefault(k, set()).add(i)
                else:
                    readers[k].discard(i)

        def narrow_source(record: LazyValue) -> int | None:
            # A value worth storing that only widens another (a bfloat16 gradient read as float32
            # by a batch norm's backward sums): store the narrow value, half the bytes for every
            # reader, each of which converts it as it loads.
            src = record.widens
            if src is None:
                return None
            source = self._lazy[src]
            return src if source.candidate and source.view_of is None and source.realized is None else None

        def waste(key: int) -> int:
            record, n = self._lazy[key], evals.get(key, 0)
            if not record.candidate or record.realized is not None or n < 2:
                return 0
            if record.widens is not None and self._lazy[record.widens].realized is not None:
                return 0
            return self._cost(key) * (n - 1)

        for i in range(len(reads)):
            count(i, 1)
        # A max-heap of possibly stale wastes (they only ever go down): an entry is current
        # when recomputing it still beats the next one's recorded waste.
        heap = [(-w, -key) for key in range(len(self._lazy)) if (w := waste(key)) > budget]
        heapq.heapify(heap)
        while heap:
            _, neg_key = heapq.heappop(heap)
            key = -neg_key
            w = waste(key)
            if w <= budget:
                continue
            if heap and w < -heap[0][0]:
                heapq.heappush(heap, (-w, neg_key))
                continue
            record = self._lazy[key]
            src = narrow_source(record)
            if src is not None:
                record = self._lazy[src]
            done = len(self._realized_keys)
            self.realize(record.value, record.stride)
            # Realizing a reshape realizes the value it reshapes: recount the readers of both.
            for i in sorted({i for k in self._realized_keys[done:] for i in readers.get(k, ())}):
                count(i, -1)
                reads[i] = self._evaluations(self._readers[i].roots, self._readers[i].at_own_index)
                count(i, 1)
            for i in range(len(reads), len(self._readers)):
                reads.append(self._evaluations(self._readers[i].roots, self._readers[i].at_own_index))
                count(i, 1)
        self._refresh_origins()

    def _refresh_origins(self) -> None:
        """Name in each computed node only the graph nodes it still computes (realizing stops inlining)."""
        where = {n.name: i for i, n in enumerate(self.nodes)}
        for r in self._readers:
            node = self.nodes[where[r.name]]
            origins = self._origins(r.roots, r.origin)
            if isinstance(node, ComputedNode) and node.origins != origins:
                self.nodes[where[r.name]] = dataclasses.replace(node, origins=origins)

    def add_reduction(
        self,
        size: Sequence[Size],
        kept_dims: Sequence[int],
        reduced: Sequence[int],
        inner: Callable[[list[Expr]], Any],
        reduction_type: str,
        dtype: torch.dtype,
        src_dtype: torch.dtype,
        device: torch.device,
        out_size: Sequence[Size],
        out_dtype: torch.dtype,
        finalize: Callable[[Any], Any] | None = None,
        source: TensorValue | None = None,
    ) -> TensorValue:
        """Add a reduction of ``inner`` (over ``size``) across ``reduced`` dims; the result has ``out_size``.

        ``source`` is the lazy value ``inner`` reads, if any, so its evaluations are counted."""
        kept_loop = [d for d in kept_dims if size[d] != 1]
        rdims = [d for d in reduced if size[d] != 1]
        rranges = tuple(size[d] for d in rdims)
        out_sz = tuple(sizes.normalize(s) for s in out_size)
        layout = flexible_layout(out_dtype, device, out_sz)
        out_strides = contiguous_strides(tuple(size[d] for d in kept_loop))
        want = self.reduction_stride
        out_dims = [i for i, s in enumerate(out_sz) if s != 1]
        if want is not None and len(want) == len(out_sz) and len(out_dims) == len(kept_loop) and is_dense(out_sz, want):
            # Stored in the wanted layout, its loops run in that memory order (outermost first).
            layout = Layout(out_dtype, device, out_sz, tuple(want), 0, False)
            order = sorted(range(len(kept_loop)), key=lambda j: -sizes.hint(want[out_dims[j]]))
            kept_loop = [kept_loop[j] for j in order]
            out_strides = tuple(want[out_dims[j]] for j in order)
        ranges = tuple(size[d] for d in kept_loop)
        name = self.new_name()
        buf = self.add_buffer(name, layout, "computed")
        nd = len(size)

        def body(xs: Sequence[Expr], rs: Sequence[Expr]) -> None:
            idx: list[Expr] = [sympy.Integer(0)] * nd
            for v, d in zip(xs, kept_loop):
                idx[d] = v
            for v, d in zip(rs, rdims):
                idx[d] = v
            acc = ops.reduction(dtype, src_dtype, reduction_type, inner(idx))
            result = finalize(acc) if finalize is not None else acc
            if out_dtype != dtype:
                result = ops.to_dtype(result, out_dtype)
            store_at: Expr = sympy.Integer(0)
            for v, s in zip(xs, out_strides):
                store_at = store_at + v * s
            ops.store(name, store_at, result)

        roots = self._roots_of(source)
        origins = self._origins(roots, self.origin)
        wrapped = with_simplified_indices(body, ranges, rranges)
        self._readers.append(Reader(name, roots, self.origin))
        self._insert(ComputedNode(name, "reduction", (buf,), ranges, rranges, wrapped, origins, reduction_type))
        return self.value_of_buffer(buf)

    def add_extern(
        self,
        op: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        metas: Any,
        fallback: bool = False,
        alias_strides: dict[int, tuple[tuple[Size, ...], tuple[str, ...]]] | None = None,
    ) -> Any:
        """Add a library call; returns a TensorValue (or a tuple of them) per ``metas``.

        Non-tensor results (ints, None) are not buffers: their value is the metadata's (a size
        expression where sizes are symbolic). ``alias_strides`` maps an output that views inputs to its strides (as it
        views our buffers) and the buffers it views."""
        multi = isinstance(metas, (tuple, list))
        meta_list = list(metas) if multi else [metas]
        outs: list[Buffer | None] = []
        aliases: list[tuple[str, str]] = []
        name = self.new_name()
        for i, m in enumerate(meta_list):
            if m is None or not hasattr(m, "shape"):
                outs.append(None)
                continue
            size = tuple(sizes.normalize(s) for s in m.shape)
            stride = tuple(sizes.normalize(s) for s in m.stride)
            viewed: tuple[str, ...] = ()
            if alias_strides is not None and i in alias_strides:
                stride, viewed = alias_strides[i]
            layout = Layout(m.dtype, m.device, size, stride, 0, False)
            buf = self.add_buffer(f"{name}_{i}" if multi else name, layout, "extern")
            outs.append(buf)
            aliases.extend((buf.name, base) for base in viewed)
        node = ExternNode(name, op, args, tuple(sorted(kwargs.items())), tuple(outs), multi, (self.origin,), fallback, tuple(aliases))
        self._insert(node)
        values = [self.value_of_buffer(b) if b is not None else (m if not hasattr(m, "shape") else None) for b, m in zip(outs, meta_list)]
        if not multi:
            return values[0]
        # A Tensor[] result (split_with_sizes) stays a list, a tuple result a tuple.
        return list(values) if isinstance(metas, list) else tuple(values)

    def as_arg(self, value: TensorValue) -> BufferArg:
        """A BufferArg for an extern call, realizing lazy values."""
        real = self.realize(value)
        assert real.view is not None
        return real.view

    def as_eager_arg(self, value: TensorValue) -> BufferArg:
        """A BufferArg for an extern call whose results take their layout from its inputs'
        (attention's output follows the query's strides): a value not yet stored is stored in
        eager's layout, so that the results come back in the layouts the graph recorded."""
        key = self._key_of.get(id(value)) if value.view is None else None
        stride = self._lazy[key].stride if key is not None else None
        real = self.realize(value, stride)
        assert real.view is not None
        return real.view

    def as_aligned_arg(self, value: TensorValue, align: int) -> BufferArg:
        """A BufferArg whose last stride is 1 and every other stride and the offset are multiples
        of ``align`` elements (memory-efficient attention's bias); a value laid out otherwise is
        stored into rows padded to ``align``, as eager pads the bias it hands that kernel."""
        if value.view is not None and _aligned(value.view, align):
            return value.view
        realized = self._lazy[self._key_of[id(value)]].realized if value.view is None else None
        if realized is not None and realized.view is not None and _aligned(realized.view, align):
            return realized.view
        broadcast = self._aligned_broadcast(value, align)
        if broadcast is not None:
            return broadcast
        shared = self._aligned_view_of_base(value, align)
        if shared is not None:
            return shared
        if value.view is not None or self._lazy[self._key_of[id(value)]].realized is not None:
            # Already in a buffer of another layout: copy it.
            value = self.lazy(dataclasses.replace(value, view=None), [value], 0)
        real = self.realize(value, padded_strides(value.size, align), exact=True)
        assert real.view is not None
        return real.view

    def _aligned_view_of_base(self, value: TensorValue, align: int) -> BufferArg | None:
        """An unrealized view (a reshape) read from its base's buffer when that holds it in aligned
        rows, as ``realize`` shares a base with its views; None to store the view apart.

        Stored apart, the view was a copy of the base: GPT-2's (8192, 50304) float32 logits
        gradient, reshaped for the LM head's two products, was copied in 0.74 ms of an H200's
        155 ms step, and its loop ranges no longer matched the row sums it is computed with."""
        key = self._key_of.get(id(value)) if value.view is None else None
        record = self._lazy[key] if key is not None else None
        if record is None or record.realized is not None or record.view_of is None or record.restride is None:
            return None
        shared = self._realize_as_view(record, padded_strides(value.size, align))
        if shared is None or shared.view is None or not _aligned(shared.view, align):
            return None
        return shared.view

    def _aligned_broadcast(self, value: TensorValue, align: int) -> BufferArg | None:
        """A lazy view of a smaller value (an attention mask expanded over heads) as a stride-0
        view of that value stored once in aligned rows; None when ``value`` is no such view.

        Storing the expanded value instead costs its full size per call site: a causal mask
        expanded to (batch, heads, seq, seq) in every layer of a transformer."""
        if value.view is not None:
            return None
        record = self._lazy[self._key_of[id(value)]]
        if record.realized is not None or record.view_of is None or record.restride is None:
            return None
        base = self._lazy[record.view_of]
        if sizes.hint(base.value.numel) >= sizes.hint(value.numel):
            return None
        base_arg = self.as_aligned_arg(base.value, align)
        found = record.restride(base_arg.stride, base_arg.offset)
        if found is None:
            return None
        view = BufferArg(base_arg.buffer, value.size, tuple(sizes.normalize(s) for s in found[0]), sizes.normalize(found[1]))
        if not _aligned(view, align):
            return None
        record.realized = TensorValue(value.dtype, value.device, value.size, buffer_loader(view, value.dtype), view)
        self._costs.clear()
        self._realized_keys.append(self._key_of[id(value)])
        return view


def stride_ordered(size: Sequence[Size], stride: Sequence[Size]) -> tuple[tuple[Size, ...], list[int]]:
    """Like ``squeeze_ranges``, with the dims ordered by decreasing stride (ties keep their order):
    loops in this order visit a dense layout's elements in memory order."""
    _, kept = squeeze_ranges(size)
    kept.sort(key=lambda d: -sizes.hint(stride[d]))
    return tuple(size[d] for d in kept), kept


def _same_order(size: Sequence[Size], found: Sequence[Size], want: Sequence[Size]) -> bool:
    """Whether static strides ``found`` and ``want`` order the dims of ``size`` alike (dims of
    one element aside), each dim's stride at least eager's."""
    if not all(isinstance(x, int) for x in (*size, *found, *want)) or 0 in size or not len(found) == len(size) == len(want):
        return False
    dims = [d for d, n in enumerate(size) if n != 1]
    by_found = sorted(dims, key=lambda d: found[d])
    return by_found == sorted(dims, key=lambda d: want[d]) and all(int(found[d]) >= int(want[d]) for d in dims)


def _same_strides(arg: BufferArg, stride: Sequence[Size], exact: bool) -> bool:
    return all((not exact and n == 1) or sizes.equal(a, b) for n, a, b in zip(arg.size, arg.stride, stride))


def padded_strides(size: Sequence[Size], align: int) -> tuple[Size, ...]:
    """Row-major strides of ``size`` with each row (the last dim) padded to a multiple of ``align``."""
    if not size:
        return ()
    row = size[-1]
    padded = align * ((row + align - 1) // align) if isinstance(row, int) else sizes.normalize(align * sympy.floor((row + align - 1) / align))
    strides: list[Size] = [1]
    outer: Size = padded
    for s in reversed(size[:-1]):
        strides.append(outer)
        outer = sizes.normalize(outer * s)
    return tuple(reversed(strides))


def _aligned(arg: BufferArg, align: int) -> bool:
    if arg.size and arg.size[-1] != 1 and arg.stride[-1] != 1:
        return False
    rest = [*arg.stride[:-1], arg.offset]
    return all(sympy.Mod(sympy.sympify(x), align) == 0 for x in rest)
