"""The graph being lowered: the one mutable place where IR nodes and buffers are collected."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..indexing import Expr, contiguous_strides
from ..ir import (
    Buffer,
    BufferArg,
    ComputedNode,
    ExternNode,
    Layout,
    Node,
    TensorValue,
    expand_index,
    flexible_layout,
    squeeze_ranges,
    with_simplified_indices,
)
from ..virtualized import ops


def is_dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """True when ``stride`` is a permutation of row-major strides for ``size`` (no gaps, no overlap)."""
    dims = sorted((st, sz) for sz, st in zip(size, stride) if sz != 1)
    running = 1
    for st, sz in dims:
        if st != running:
            return False
        running *= sz
    return True


def buffer_loader(buf: BufferArg, dtype: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    """A loader reading ``buf`` through its strides."""
    name, stride, offset = buf.buffer, buf.stride, buf.offset

    def load(idx: Sequence[Expr]) -> Any:
        expr: Expr = sympy.Integer(offset)
        for i, s in zip(idx, stride):
            expr = expr + i * s
        return ops.load(name, sympy.expand(expr))

    return load


@dataclass
class LoweringContext:
    """Mutable state of one lowering: nodes in order, buffers by name, and the node being lowered."""

    nodes: list[Node] = field(default_factory=list)
    buffers: dict[str, Buffer] = field(default_factory=dict)
    origin: str = ""
    meta: Any = None
    costs: dict[int, int] = field(default_factory=dict)
    origins: dict[int, tuple[str, ...]] = field(default_factory=dict)
    _realized: dict[int, TensorValue] = field(default_factory=dict)
    storage_offsets: dict[str, int] = field(default_factory=dict)
    _keep: list[TensorValue] = field(default_factory=list)
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

    def track(self, value: TensorValue, inputs: Sequence[Any], cost: int) -> None:
        """Record a new lazy ``value``: its cost (``cost`` plus its inputs') and the graph nodes it came from."""
        tensors = [a for a in inputs if isinstance(a, TensorValue)]
        self.costs[id(value)] = cost + sum(self.cost(a) for a in tensors)
        found: dict[str, None] = {}
        for a in tensors:
            found.update(dict.fromkeys(self.origins.get(id(a), ())))
        found[self.origin] = None
        self.origins[id(value)] = tuple(found)
        # Holding the value keeps its id() unique while the tables above use it.
        self._keep.append(value)

    def cost(self, value: TensorValue) -> int:
        """Estimated ops in ``value``'s loader (0 for a realized buffer)."""
        if value.view is not None:
            return 0
        return self.costs.get(id(value), 1)

    def realize(self, value: TensorValue, stride: Sequence[int] | None = None) -> TensorValue:
        """Materialize ``value`` into a buffer (once); ``stride`` fixes the layout when dense."""
        if value.view is not None:
            return value
        cached = self._realized.get(id(value))
        if cached is not None:
            return cached
        if stride is not None and len(stride) == value.ndim and is_dense(value.size, stride):
            layout = Layout(value.dtype, value.device, value.size, tuple(stride), 0, False)
        else:
            layout = flexible_layout(value.dtype, value.device, value.size)
        name = self.new_name()
        buf = self.add_buffer(name, layout, "computed")
        ranges, kept = squeeze_ranges(value.size)
        ndim = value.ndim
        loader = value.loader

        def body(xs: Sequence[Expr], rs: Sequence[Expr]) -> None:
            idx = expand_index(xs, kept, ndim)
            ops.store(name, layout.index(idx), loader(idx))

        origins = self.origins.get(id(value), (self.origin,))
        wrapped = with_simplified_indices(body, ranges, ())
        self.nodes.append(ComputedNode(name, "pointwise", (buf,), ranges, (), wrapped, origins))
        out = self.value_of_buffer(buf)
        self._realized[id(value)] = out
        self._keep.append(value)
        return out

    def add_reduction(
        self,
        size: Sequence[int],
        kept_dims: Sequence[int],
        reduced: Sequence[int],
        inner: Callable[[list[Expr]], Any],
        reduction_type: str,
        dtype: torch.dtype,
        src_dtype: torch.dtype,
        device: torch.device,
        out_size: Sequence[int],
        out_dtype: torch.dtype,
        finalize: Callable[[Any], Any] | None = None,
        source: TensorValue | None = None,
    ) -> TensorValue:
        """Add a reduction of ``inner`` (over ``size``) across ``reduced`` dims; the result has ``out_size``."""
        ranges = tuple(size[d] for d in kept_dims if size[d] != 1)
        kept_loop = [d for d in kept_dims if size[d] != 1]
        rdims = [d for d in reduced if size[d] != 1]
        rranges = tuple(size[d] for d in rdims)
        out_sz = tuple(int(s) for s in out_size)
        layout = flexible_layout(out_dtype, device, out_sz)
        name = self.new_name()
        buf = self.add_buffer(name, layout, "computed")
        nd = len(size)
        out_strides = contiguous_strides(ranges)

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

        origins = tuple(dict.fromkeys((*self.origins.get(id(source), ()), self.origin)))
        wrapped = with_simplified_indices(body, ranges, rranges)
        self.nodes.append(ComputedNode(name, "reduction", (buf,), ranges, rranges, wrapped, origins, reduction_type))
        return self.value_of_buffer(buf)

    def add_extern(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], metas: Any) -> Any:
        """Add a library call; returns a TensorValue (or a tuple of them) per ``metas``."""
        multi = isinstance(metas, (tuple, list))
        meta_list = list(metas) if multi else [metas]
        outs: list[Buffer | None] = []
        name = self.new_name()
        for i, m in enumerate(meta_list):
            if m is None or not hasattr(m, "shape"):
                outs.append(None)
                continue
            layout = Layout(m.dtype, m.device, tuple(int(s) for s in m.shape), tuple(int(s) for s in m.stride), 0, False)
            outs.append(self.add_buffer(f"{name}_{i}" if multi else name, layout, "extern"))
        node = ExternNode(name, op, args, tuple(sorted(kwargs.items())), tuple(outs), multi, (self.origin,))
        self.nodes.append(node)
        values = [self.value_of_buffer(b) if b is not None else None for b in outs]
        return tuple(values) if multi else values[0]

    def as_arg(self, value: TensorValue) -> BufferArg:
        """A BufferArg for an extern call, realizing lazy values."""
        real = self.realize(value)
        assert real.view is not None
        return real.view
