"""Lowerings of creation ops (full, empty, arange, scalar_tensor) and seeded random numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import ptc_spec  # noqa: F401  (importing it registers the torch.ops.ptc random ops)

from ..indexing import Expr, contiguous_strides, linear_index
from ..ir import TensorValue
from ..sizes import Size, normalize
from ..virtualized import ops
from .context import LoweringContext
from .extern import extern_lowering
from .pointwise import broadcast_loader, compute_dtype, scalar
from .registry import register_lowering

aten = torch.ops.aten


def _lazy(ctx: LoweringContext, dtype: torch.dtype, size: Sequence[Size], load: Any, reads: Sequence[TensorValue] = ()) -> TensorValue:
    return ctx.lazy(TensorValue(dtype, torch.device(ctx.meta.device), tuple(normalize(s) for s in size), load), reads, 1)


def _filled(ctx: LoweringContext, fill: Any) -> TensorValue:
    dtype = ctx.meta.dtype
    cd = compute_dtype(dtype)

    def load(idx: Sequence[Expr]) -> Any:
        v = scalar(fill, cd)
        return ops.to_dtype(v, dtype) if cd != dtype else v

    return _lazy(ctx, dtype, ctx.meta.shape, load)


@register_lowering(aten.full.default)
def _full(ctx: LoweringContext, size: Sequence[Size], fill_value: Any, **kwargs: Any) -> TensorValue:
    return _filled(ctx, fill_value)


@register_lowering(aten.scalar_tensor.default)
def _scalar_tensor(ctx: LoweringContext, s: Any, **kwargs: Any) -> TensorValue:
    return _filled(ctx, s)


@register_lowering(aten.empty_strided.default, aten.empty.memory_format)
def _empty(ctx: LoweringContext, *args: Any, **kwargs: Any) -> TensorValue:
    # Uninitialised memory may hold anything; zeros are the cheapest defined choice.
    return _filled(ctx, 0)


@register_lowering(aten.arange.start_step)
def _arange(ctx: LoweringContext, start: Any, end: Any, step: Any = 1, **kwargs: Any) -> TensorValue:
    dtype = ctx.meta.dtype
    cd = torch.float64 if dtype.is_floating_point else torch.int64

    def load(idx: Sequence[Expr]) -> Any:
        i = ops.to_dtype(ops.index_expr(idx[0], torch.int64), cd)
        v = ops.add(ops.mul(i, scalar(step, cd)), scalar(start, cd))
        return ops.to_dtype(v, dtype)

    return _lazy(ctx, dtype, ctx.meta.shape, load)


def _random(kind: str) -> Any:
    def lower(ctx: LoweringContext, seed: TensorValue, offset: Size, size: Sequence[Size], *, dtype: torch.dtype, device: Any) -> TensorValue:
        out = ctx.meta.dtype
        dims = tuple(normalize(s) for s in ctx.meta.shape)
        strides = contiguous_strides(dims)
        seed_load = broadcast_loader(seed, ())

        def load(idx: Sequence[Expr]) -> Any:
            counter = ops.index_expr(linear_index(idx, strides, normalize(offset)), torch.int64)
            v = getattr(ops, kind)(seed_load([]), counter)
            return ops.to_dtype(v, out) if out != torch.float32 else v

        return _lazy(ctx, out, dims, load, (seed,))

    return lower


register_lowering(torch.ops.ptc.rand.default)(_random("rand"))
register_lowering(torch.ops.ptc.randn.default)(_random("randn"))
register_lowering(torch.ops.ptc.seed.default)(extern_lowering(torch.ops.ptc.seed.default))
