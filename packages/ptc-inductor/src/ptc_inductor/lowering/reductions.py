"""Lowerings of reductions: sum, prod, amax, amin, argmax, argmin, any, all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..indexing import Expr
from ..ir import TensorValue
from ..virtualized import ops
from .context import LoweringContext
from .pointwise import compute_dtype
from .registry import register_lowering

aten = torch.ops.aten


def _dims(dims: Any, ndim: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d + max(ndim, 1) if d < 0 else d for d in dims} & set(range(ndim))) if ndim else []


def reduce(
    ctx: LoweringContext,
    x: TensorValue,
    dims: Any,
    keepdim: bool,
    reduction_type: str,
    acc_dtype: torch.dtype,
    src_dtype: torch.dtype,
) -> TensorValue:
    """A reduction of ``x`` over ``dims`` into a buffer of the node's output dtype and shape."""
    rdims = _dims(dims, x.ndim)
    kept = [d for d in range(x.ndim) if d not in rdims]
    loader = x.loader
    xdtype = x.dtype

    def inner(idx: list[Expr]) -> Any:
        v = loader(idx)
        return ops.to_dtype(v, src_dtype) if xdtype != src_dtype else v

    out_size = tuple(int(s) for s in ctx.meta.shape)
    return ctx.add_reduction(
        x.size, kept, rdims, inner, reduction_type, acc_dtype, src_dtype, x.device, out_size, ctx.meta.dtype, source=x
    )


def _sum_acc(out: torch.dtype) -> torch.dtype:
    return compute_dtype(out)


@register_lowering(aten.sum.dim_IntList)
def _sum(ctx: LoweringContext, x: TensorValue, dim: Sequence[int] | None = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> TensorValue:
    acc = _sum_acc(ctx.meta.dtype)
    return reduce(ctx, x, dim, keepdim, "sum", acc, acc)


@register_lowering(aten.prod.dim_int)
def _prod_dim(ctx: LoweringContext, x: TensorValue, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> TensorValue:
    acc = _sum_acc(ctx.meta.dtype)
    return reduce(ctx, x, [dim], keepdim, "prod", acc, acc)


@register_lowering(aten.prod.default)
def _prod(ctx: LoweringContext, x: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    acc = _sum_acc(ctx.meta.dtype)
    return reduce(ctx, x, None, False, "prod", acc, acc)


@register_lowering(aten.amax.default)
def _amax(ctx: LoweringContext, x: TensorValue, dim: Sequence[int] = (), keepdim: bool = False) -> TensorValue:
    cd = compute_dtype(x.dtype)
    return reduce(ctx, x, dim, keepdim, "max", cd, cd)


@register_lowering(aten.amin.default)
def _amin(ctx: LoweringContext, x: TensorValue, dim: Sequence[int] = (), keepdim: bool = False) -> TensorValue:
    cd = compute_dtype(x.dtype)
    return reduce(ctx, x, dim, keepdim, "min", cd, cd)


@register_lowering(aten.argmax.default)
def _argmax(ctx: LoweringContext, x: TensorValue, dim: int | None = None, keepdim: bool = False) -> TensorValue:
    cd = compute_dtype(x.dtype)
    return reduce(ctx, x, dim, keepdim, "argmax", torch.int64, cd)


@register_lowering(aten.argmin.default)
def _argmin(ctx: LoweringContext, x: TensorValue, dim: int | None = None, keepdim: bool = False) -> TensorValue:
    cd = compute_dtype(x.dtype)
    return reduce(ctx, x, dim, keepdim, "argmin", torch.int64, cd)


@register_lowering(aten.any.dims)
def _any(ctx: LoweringContext, x: TensorValue, dim: Sequence[int] | None = None, keepdim: bool = False) -> TensorValue:
    return reduce(ctx, x, dim, keepdim, "any", torch.bool, torch.bool)


@register_lowering(aten.all.dims)
def _all(ctx: LoweringContext, x: TensorValue, dim: Sequence[int] | None = None, keepdim: bool = False) -> TensorValue:
    return reduce(ctx, x, dim, keepdim, "all", torch.bool, torch.bool)
