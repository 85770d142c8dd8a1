"""Lowerings of reductions: sum, prod, amax, amin, argmax, argmin, any, all."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..indexing import Expr, unravel
from ..ir import SPLITTABLE_REDUCTIONS, TensorValue
from ..sizes import Size, hint, normalize, static_value
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


SPLIT_OUTPUTS_BELOW = 8192
"""A column reduction with fewer outputs than this gives a GPU too few programs (a tile holds
about 32 outputs) to reach its memory bandwidth: it is split into partial reductions."""
SPLIT_MIN_REDUCED = 2048
"""Reductions shorter than this are not split: a second kernel would cost more than it saves."""
SPLIT_MIN_PER_PARTIAL = 32
SPLIT_MAX_PARTIALS = 1 << 20
SPLIT_MAX_FACTOR = 1024
"""Bounds of a split: each partial reduces at least SPLIT_MIN_PER_PARTIAL points, all partials
of a reduction together stay within SPLIT_MAX_PARTIALS values (the second pass's input, at
most a few percent of what the first reads), and there are at most SPLIT_MAX_FACTOR partials
per output. Many short partials matter when the partials ride along a row kernel (the
scheduler's row loop): each chunk of rows is one program there, and a GPU wants hundreds."""


def _leading_run(size: Sequence[Size], rdims: Sequence[int]) -> tuple[int, int] | None:
    """The first and last dim of the run of adjacent reduced dims that starts at the first
    reduced dim of more than one element, or None when every reduced dim has one element."""
    dims = [d for d in rdims if size[d] != 1]
    if not dims:
        return None
    end = dims[0]
    while end + 1 in rdims:
        end += 1
    return dims[0], end


def split_factor(size: Sequence[Size], kept: Sequence[int], rdims: Sequence[int], reduction_type: str) -> int:
    """Into how many partial reductions to cut a reduction over ``rdims`` of ``size`` (1: none).

    Only column reductions (the last dim is kept, as in a bias or norm weight's gradient) are
    split: row reductions already give one program per row. The factor is a power of two that
    divides the leading run of adjacent reduced dims taken as one (a layer norm's weight
    gradient over (batch, seq) is cut into chunks of tokens, as over a flat (tokens,) dim), so
    every partial covers whole, equal chunks of it. That needs the reduced and kept sizes to be
    static: a factor must divide the run at every size, and a split kernel's row loop keeps
    whole rows in one tile.
    """
    dims = [d for d in rdims if size[d] != 1]
    run = _leading_run(size, rdims)
    if reduction_type not in SPLITTABLE_REDUCTIONS or run is None or (len(size) - 1) in dims:
        return 1
    if any(static_value(size[d]) is None for d in (*dims, *kept)):
        return 1
    outputs = math.prod(int(size[k]) for k in kept)
    total = math.prod(int(size[d]) for d in dims)
    # No outputs: nothing to compute, and the kernel is never launched; do not make two.
    if outputs == 0 or outputs >= SPLIT_OUTPUTS_BELOW or total < SPLIT_MIN_REDUCED:
        return 1
    first = math.prod(int(s) for s in size[run[0] : run[1] + 1])
    factor = 1
    while (
        first % (2 * factor) == 0
        and total // (2 * factor) >= SPLIT_MIN_PER_PARTIAL
        and outputs * 2 * factor <= SPLIT_MAX_PARTIALS
        and 2 * factor <= SPLIT_MAX_FACTOR
    ):
        factor *= 2
    return factor


def _split_reduce(
    ctx: LoweringContext,
    x: TensorValue,
    size: Sequence[Size],
    kept: list[int],
    rdims: list[int],
    inner: Any,
    factor: int,
    reduction_type: str,
    acc_dtype: torch.dtype,
    src_dtype: torch.dtype,
) -> TensorValue:
    """The reduction as ``factor`` partial results per output (the leading run of reduced dims,
    taken as one, cut into equal chunks), then a reduction of the partials."""
    run = _leading_run(size, rdims)
    assert run is not None
    d, e = run
    run_sizes = list(size[d : e + 1])
    chunk = math.prod(int(s) for s in run_sizes) // factor
    # The input seen with dims d..e flattened and split into (factor, chunk): later dims move
    # by the run's length less two.
    split = [*size[:d], factor, chunk, *size[e + 1 :]]

    def moved(k: int) -> int:
        return k if k < d else k - (e - d) + 1

    kept_split = sorted([*(moved(k) for k in kept), d])
    reduced_split = sorted([moved(r) for r in rdims if not d <= r <= e] + [d + 1])

    def chunked(idx: list[Expr]) -> Any:
        return inner([*idx[:d], *unravel(idx[d] * chunk + idx[d + 1], run_sizes), *idx[d + 2 :]])

    partial_size = tuple(normalize(split[k]) for k in kept_split)
    partial = ctx.add_reduction(
        split, kept_split, reduced_split, chunked, reduction_type, acc_dtype, src_dtype, x.device, partial_size, acc_dtype, source=x
    )
    at = kept_split.index(d)
    rest = [i for i in range(len(partial_size)) if i != at]
    out_size = tuple(normalize(s) for s in ctx.meta.shape)
    return ctx.add_reduction(
        partial_size, rest, [at], partial.loader, reduction_type, acc_dtype, acc_dtype, x.device, out_size, ctx.meta.dtype, source=partial
    )


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
    size: Sequence[Size] = x.size
    order = _memory_order(ctx, x, kept) if reduction_type in MEMORY_ORDER_REDUCTIONS else None
    if order is not None:
        # Seen in memory order, a batch norm's sum over (N, H, W) of a channels-last value is a
        # column sum (channels innermost), which the GPU path splits over enough programs.
        size = [x.size[d] for d in order]
        kept = [order.index(d) for d in kept]
        rdims = sorted(order.index(d) for d in rdims)
        logical = [order.index(d) for d in range(x.ndim)]

        def load(idx: Sequence[Expr]) -> Any:
            return x.loader([idx[p] for p in logical])

        loader = load

    def inner(idx: list[Expr]) -> Any:
        v = loader(idx)
        return ops.to_dtype(v, src_dtype) if xdtype != src_dtype else v

    if x.device.type == "cuda" or ctx.triton:
        factor = split_factor(size, kept, rdims, reduction_type)
        if factor > 1:
            return _split_reduce(ctx, x, size, kept, rdims, inner, factor, reduction_type, acc_dtype, src_dtype)
    out_size = tuple(normalize(s) for s in ctx.meta.shape)
    return ctx.add_reduction(
        size, kept, rdims, inner, reduction_type, acc_dtype, src_dtype, x.device, out_size, ctx.meta.dtype, source=x
    )


MEMORY_ORDER_REDUCTIONS = ("sum", "prod", "max", "min", "any", "all")
"""Reductions whose result does not depend on the order points are visited (argmax's ties do)."""


def _memory_order(ctx: LoweringContext, x: TensorValue, kept: Sequence[int]) -> list[int] | None:
    """The dims of ``x`` by decreasing stride when the graph runs channels-last and ``x`` is stored
    in another order than row-major, and the kept dims keep their relative order (the result is
    stored in it); otherwise None."""
    if not ctx.channels_last:
        return None
    stride = ctx.strides_of(x)
    if stride is None or len(stride) != x.ndim:
        return None
    # Size-1 dims (any stride) go first: no loop runs over them.
    order = sorted(range(x.ndim), key=lambda d: (x.size[d] != 1, -hint(stride[d])))
    moved = [d for d in order if d in kept and x.size[d] != 1]
    if order == list(range(x.ndim)) or moved != sorted(moved):
        return None
    return order


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
