"""Ops lowered to library calls through ``torch.ops``: matmul, convolution, attention, scans, scatters.

Fallback nodes (any aten op, run as its eager kernel) are lowered the same way, in ``fallback.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..ir import TensorValue
from .context import LoweringContext
from .registry import mark_extern, register_lowering

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


def extern_lowering(op: Any) -> Callable[..., Any]:
    """A lowering that calls ``op`` through torch.ops on realized inputs."""
    mark_extern(op)
    aligned = _ALIGNED_BIAS.get(op)

    def lower(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
        lowered = tuple(
            ctx.as_aligned_arg(a, _BIAS_ALIGNMENT) if i == aligned and isinstance(a, TensorValue) else extern_args(ctx, a) for i, a in enumerate(args)
        )
        return ctx.add_extern(op, lowered, {k: extern_args(ctx, v) for k, v in kwargs.items()}, ctx.meta)

    return lower


EXTERN = (
    # mm and addmm: matmul.py (extern calls too, with aligned output rows).
    aten.bmm.default,
    aten.convolution.default,
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
