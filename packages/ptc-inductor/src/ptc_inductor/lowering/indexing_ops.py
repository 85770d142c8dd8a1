"""Lowerings of gathers (index, gather, index_select) and slice/select scatters as loop IR."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ..indexing import Expr
from ..ir import TensorValue
from ..sizes import Size, normalize
from ..virtualized import ops
from .context import LoweringContext
from .pointwise import broadcast_loader, compute_dtype, scalar
from .registry import register_lowering
from .views import clamp_position, position

aten = torch.ops.aten


def _lazy(ctx: LoweringContext, x: TensorValue, size: Sequence[Size], load: Any, reads: Sequence[TensorValue]) -> TensorValue:
    """A lazy value of ``x``'s dtype whose loader ``load`` reads ``x`` and the other ``reads``."""
    return ctx.lazy(TensorValue(x.dtype, x.device, tuple(normalize(s) for s in size), load), (x, *reads), 1)


def _indirect(index: TensorValue, at: Sequence[Expr], size: Size) -> Expr:
    return ops.indirect_indexing(index.loader(list(at)), size)


@register_lowering(aten.gather.default)
def _gather(ctx: LoweringContext, x: TensorValue, dim: int, index: TensorValue, *, sparse_grad: bool = False) -> TensorValue:
    d = dim + x.ndim if dim < 0 else dim

    def load(idx: Sequence[Expr]) -> Any:
        src = list(idx)
        if x.ndim:
            src[d] = _indirect(index, idx, x.size[d])
        return x.loader(src)

    return _lazy(ctx, x, ctx.meta.shape, load, (index,))


@register_lowering(aten.index_select.default)
def _index_select(ctx: LoweringContext, x: TensorValue, dim: int, index: TensorValue) -> TensorValue:
    d = dim + x.ndim if dim < 0 else dim

    def load(idx: Sequence[Expr]) -> Any:
        src = list(idx)
        if x.ndim:
            src[d] = _indirect(index, [idx[d]] if index.ndim else [], x.size[d])
        return x.loader(src)

    return _lazy(ctx, x, ctx.meta.shape, load, (index,))


@register_lowering(aten.index.Tensor)
def _index(ctx: LoweringContext, x: TensorValue, indices: Sequence[TensorValue | None]) -> TensorValue:
    positions = [i for i, t in enumerate(indices) if t is not None]
    tensors = [t for t in indices if t is not None]
    if any(t.dtype == torch.bool for t in tensors):
        raise NotImplementedError("boolean masks in index.Tensor have data-dependent shapes; decompose them first")
    nb = max(t.ndim for t in tensors)
    bshape: list[Size] = [1] * nb
    for t in tensors:
        for j, s in enumerate(t.size):
            k = nb - t.ndim + j
            # Broadcasting: a dim of 1 takes the other's size (non-1 sizes agree, as traced).
            if bshape[k] == 1:
                bshape[k] = s
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    others = [d for d in range(x.ndim) if d not in positions]
    out_size = [normalize(s) for s in ctx.meta.shape]
    loaders = {p: broadcast_loader(t, bshape) for p, t in zip(positions, tensors)}

    def load(idx: Sequence[Expr]) -> Any:
        bidx = list(idx[first : first + nb])
        # Every dim of ``src`` is set below (a 0-dim result, x[i] with a 0-dim i, has no idx[0]).
        src: list[Expr] = [sympy.Integer(0)] * x.ndim
        rest = list(idx[:first]) + list(idx[first + nb :])
        for d, v in zip(others, rest):
            src[d] = v
        for p in positions:
            src[p] = ops.indirect_indexing(loaders[p](bidx), x.size[p])
        return x.loader(src)

    return _lazy(ctx, x, out_size, load, tensors)


def _scatter_region(ctx: LoweringContext, x: TensorValue, src: TensorValue, inside: Any, src_index: Any) -> TensorValue:
    cd = compute_dtype(x.dtype)

    def load(idx: Sequence[Expr]) -> Any:
        mask = inside(idx)
        if mask is None:
            return x.loader(idx)
        s = ops.masked(mask, lambda: _cast(src.loader(src_index(idx)), src.dtype, cd), 0, cd)
        v = ops.where(mask, s, _cast(x.loader(idx), x.dtype, cd))
        return ops.to_dtype(v, x.dtype) if cd != x.dtype else v

    return _lazy(ctx, x, x.size, load, (src,))


def _cast(v: Any, a: torch.dtype, b: torch.dtype) -> Any:
    return ops.to_dtype(v, b) if a != b else v


@register_lowering(aten.slice_scatter.default)
def _slice_scatter(ctx: LoweringContext, x: TensorValue, src: TensorValue, dim: int = 0, start: Size | None = None, end: Size | None = None, step: int = 1) -> TensorValue:
    d = dim + x.ndim if dim < 0 else dim
    n = x.size[d]
    lo = 0 if start is None else clamp_position(start, n)
    length = src.size[d]

    def inside(idx: Sequence[Expr]) -> Any:
        e = ops.index_expr(idx[d] - lo, torch.int64)
        conds = [ops.ge(e, ops.constant(0, torch.int64)), ops.lt(e, scalar(normalize(length * step), torch.int64))]
        if step != 1:
            conds.append(ops.eq(ops.index_expr(idx[d] - lo, torch.int64), ops.mul(ops.floordiv(e, ops.constant(step, torch.int64)), ops.constant(step, torch.int64))))
        m = conds[0]
        for c in conds[1:]:
            m = ops.logical_and(m, c)
        return m

    def src_index(idx: Sequence[Expr]) -> list[Expr]:
        out = list(idx)
        out[d] = (idx[d] - lo) // step if step != 1 else idx[d] - lo
        return out

    return _scatter_region(ctx, x, src, inside, src_index)


@register_lowering(aten.select_scatter.default)
def _select_scatter(ctx: LoweringContext, x: TensorValue, src: TensorValue, dim: int, index: Size) -> TensorValue:
    d = dim + x.ndim if dim < 0 else dim
    i = position(index, x.size[d])

    def inside(idx: Sequence[Expr]) -> Any:
        return ops.eq(ops.index_expr(idx[d], torch.int64), scalar(i, torch.int64))

    def src_index(idx: Sequence[Expr]) -> list[Expr]:
        return [v for j, v in enumerate(idx) if j != d]

    return _scatter_region(ctx, x, src, inside, src_index)
