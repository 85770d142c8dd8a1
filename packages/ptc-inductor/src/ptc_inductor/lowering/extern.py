"""Ops lowered to library calls through ``torch.ops``: matmul, convolution, attention, scans, scatters.

Fallback nodes (any aten op, run as its eager kernel) are lowered the same way, in ``fallback.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ptc_spec import TensorMeta

from ..ir import TensorValue
from ..sizes import static_value
from .context import LoweringContext
from .registry import LOWERINGS, mark_extern, register_lowering

aten = torch.ops.aten


def extern_args(ctx: LoweringContext, a: Any) -> Any:
    """``a`` with every TensorValue (in lists and tuples too) realized as a BufferArg."""
    if isinstance(a, TensorValue):
        return ctx.as_arg(a)
    if isinstance(a, list):
        return [extern_args(ctx, x) for x in a]
    if isinstance(a, tuple):
        return tuple(extern_args(ctx, x) for x in a)
    return a


# Memory-efficient attention reads its bias in aligned rows: every stride but the last a
# multiple of 16 elements (eager pads the bias to that before calling it). op -> bias position.
_ALIGNED_BIAS = {
    aten._scaled_dot_product_efficient_attention.default: 3,
    aten._scaled_dot_product_efficient_attention_backward.default: 4,
    aten._efficient_attention_forward.default: 3,
    aten._efficient_attention_backward.default: 4,
}
_BIAS_ALIGNMENT = 16

# Attention kernels lay their outputs out like their inputs (the output follows the query's
# strides, each gradient its input's): inputs stored in another layout than eager's made Llama's
# output come back in another layout than the graph recorded, and cost a copy a layer.
_LAYOUT_FROM_INPUTS = frozenset(
    op
    for name in (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    )
    if (op := getattr(getattr(aten, name, None), "default", None)) is not None
)


def extern_lowering(op: Any) -> Callable[..., Any]:
    """A lowering that calls ``op`` through torch.ops on realized inputs."""
    mark_extern(op)
    aligned = _ALIGNED_BIAS.get(op)
    eager_layouts = op in _LAYOUT_FROM_INPUTS

    def arg(ctx: LoweringContext, i: int, a: Any) -> Any:
        if not isinstance(a, TensorValue):
            return extern_args(ctx, a)
        if i == aligned:
            return ctx.as_aligned_arg(a, _BIAS_ALIGNMENT)
        return ctx.as_eager_arg(a) if eager_layouts else ctx.as_arg(a)

    def lower(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
        lowered = tuple(arg(ctx, i, a) for i, a in enumerate(args))
        return ctx.add_extern(op, lowered, {k: extern_args(ctx, v) for k, v in kwargs.items()}, ctx.meta)

    return lower


# cuDNN convolves without the bias and adds it in a second pass over the output (eager calls
# add_ after it); the bias is left to ptc's kernels instead, where it fuses into whatever reads
# the output (the layer norm after each of ConvNeXt's depthwise convolutions: 22 add_ passes,
# 0.46 ms of its 4.4 ms bf16 step on an H200). oneDNN adds the bias inside the convolution.
_BIAS_APART_DEVICE_TYPES = frozenset({"cuda"})


def bias_apart(lower: Callable[..., Any]) -> Callable[..., Any]:
    """A convolution lowering that calls ``lower`` without the bias and adds the bias as a
    pointwise value, on devices whose library adds it in a pass of its own."""

    def split(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
        weight, bias = (args[1], args[2]) if len(args) > 2 else (None, None)
        meta = ctx.meta
        if (
            kwargs or not isinstance(weight, TensorValue) or not isinstance(bias, TensorValue)
            or bias.device.type not in _BIAS_APART_DEVICE_TYPES or static_value(bias.size[0]) is None
        ):  # fmt: skip
            return lower(ctx, *args, **kwargs)
        out = lower(ctx, *args[:2], None, *args[3:])
        # Output channels are dim 1 of (N, C, *spatial) (aten's convolution is always batched),
        # transposed convolutions too.
        per_channel = [int(bias.size[0])] + [1] * (weight.ndim - 2)
        ctx.meta = TensorMeta.of(tuple(per_channel), bias.dtype, bias.device)
        try:
            shaped = LOWERINGS[aten.view.default](ctx, bias, per_channel)
        finally:
            ctx.meta = meta
        return LOWERINGS[aten.add.Tensor](ctx, out, shaped)

    return split


EXTERN = (
    # mm and addmm: matmul.py (extern calls too, with aligned output rows).
    aten.bmm.default,
    aten.convolution_backward.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    # core/2: the cuDNN, out-of-tree and variable-length attention kernels. Every result is a
    # buffer (logsumexp, RNG seed/offset, debug mask, even when 0-size); None and SymInt
    # results are not.
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_cudnn_attention_backward.default,
    aten._scaled_dot_product_fused_attention_overrideable.default,
    aten._scaled_dot_product_fused_attention_overrideable_backward.default,
    aten._efficient_attention_forward.default,
    aten._efficient_attention_backward.default,
    aten._flash_attention_forward.default,
    aten._flash_attention_backward.default,
    aten._cdist_forward.default,
    # Scans and sorts: sequential along one dim, library kernels are already good.
    aten.cumsum.default,
    aten.cumprod.default,
    aten.sort.default,
    aten.sort.stable,
    aten.topk.default,
    aten.searchsorted.Tensor,
    aten.bucketize.Tensor,
    # Scatters write data-dependent positions; part 1 leaves them to aten.
    aten.index_put.default,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
    aten.as_strided_scatter.default,
)

for _op in EXTERN:
    register_lowering(_op)(extern_lowering(_op))
register_lowering(aten.convolution.default)(bias_apart(extern_lowering(aten.convolution.default)))
