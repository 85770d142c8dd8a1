# torch.ops overloads are untyped, so every aten call returns Any.
"""Matrix products and convolution helpers reduced to the extern ops mm, bmm, addmm and convolution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..dims import reshape
from ..promotion import cast, upcast
from ..registry import may_decline, register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.matmul.default)
def matmul(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.matmul: dot, mv, mm or broadcast batched bmm by the operands' ranks."""
    a_dim, b_dim = self.dim(), other.dim()
    if a_dim == 1 and b_dim == 1:
        return dot(self, other)
    if a_dim == 2 and b_dim == 1:
        return mv(self, other)
    if a_dim == 1 and b_dim == 2:
        return aten.squeeze.dims(aten.mm.default(aten.unsqueeze.default(self, 0), other), [0])
    if a_dim == 2 and b_dim == 2:
        return aten.mm.default(self, other)
    if a_dim >= 3 and b_dim <= 2:
        # Fold the batch dims of self into rows: one mm instead of a broadcast bmm.
        rows = reshape(self, [-1, self.shape[-1]])
        right = aten.unsqueeze.default(other, 1) if b_dim == 1 else other
        out = aten.mm.default(rows, right)
        shape = list(self.shape[:-1]) + ([] if b_dim == 1 else [other.shape[-1]])
        return aten.view.default(out, shape)
    a = aten.unsqueeze.default(self, 0) if a_dim == 1 else self
    b = aten.unsqueeze.default(other, -1) if b_dim == 1 else other
    batch = list(torch.broadcast_shapes(torch.Size(a.shape[:-2]), torch.Size(b.shape[:-2])))
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    count = 1
    for s in batch:
        count *= s
    a3 = reshape(aten.expand.default(a, batch + [n, k]), [count, n, k])
    b3 = reshape(aten.expand.default(b, batch + [k, m]), [count, k, m])
    out = aten.view.default(aten.bmm.default(a3, b3), batch + [n, m])
    if a_dim == 1:
        out = aten.squeeze.dims(out, [-2])
    if b_dim == 1:
        out = aten.squeeze.dims(out, [-1])
    return out


@register_decomposition(aten.mv.default)
def mv(self: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Matrix times vector."""
    return aten.squeeze.dims(aten.mm.default(self, aten.unsqueeze.default(vec, 1)), [1])


@register_decomposition(aten.dot.default)
def dot(self: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """Inner product of two vectors."""
    out = aten.mm.default(aten.unsqueeze.default(self, 0), aten.unsqueeze.default(tensor, 1))
    return aten.view.default(out, [])


@register_decomposition(aten.outer.default)
def outer(self: torch.Tensor, vec2: torch.Tensor) -> torch.Tensor:
    """Outer product of two vectors."""
    return aten.mul.Tensor(aten.unsqueeze.default(self, 1), aten.unsqueeze.default(vec2, 0))


@register_decomposition(aten.linear.default)
def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """input @ weight.T + bias, with addmm for 2-D inputs."""
    w_t = aten.permute.default(weight, [1, 0]) if weight.dim() == 2 else weight
    if input.dim() == 2 and bias is not None and weight.dim() == 2:
        return aten.addmm.default(bias, input, w_t)
    out = matmul(input, w_t)
    return aten.add.Tensor(out, bias) if bias is not None else out


def _scaled_sum(base: torch.Tensor, product: torch.Tensor, beta: Any, alpha: Any) -> torch.Tensor:
    """beta * base + alpha * product in the product's opmath, rounded once to base's dtype.

    Callers pass products computed from upcast operands: eager's fused kernels round reduced
    floats once, and rounding the product separately loses several percent to cancellation.
    """
    dtype = base.dtype
    if not dtype.is_floating_point and not dtype.is_complex:
        # Eager converts the scalars to the integer result dtype first.
        beta, alpha = (bool(beta), bool(alpha)) if dtype == torch.bool else (int(beta), int(alpha))
    # The epilogue runs in opmath so reduced floats round once more only, as eager's kernels.
    product = upcast(product)
    scaled = product if alpha == 1 else aten.mul.Tensor(product, alpha)
    if beta == 0:
        # Eager ignores self entirely when beta is 0, NaNs included.
        return cast(aten.clone.default(scaled), dtype)
    base = upcast(base)
    return cast(aten.add.Tensor(scaled, base if beta == 1 else aten.mul.Tensor(base, beta)), dtype)


@register_decomposition(aten.baddbmm.default)
def baddbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    """beta * self + alpha * bmm(batch1, batch2)."""
    return _scaled_sum(self, aten.bmm.default(upcast(batch1), upcast(batch2)), beta, alpha)


@register_decomposition(aten.addmv.default)
def addmv(self: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    """beta * self + alpha * mat @ vec."""
    return _scaled_sum(self, mv(upcast(mat), upcast(vec)), beta, alpha)


@register_decomposition(aten.addr.default)
def addr(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    """beta * self + alpha * outer(vec1, vec2)."""
    return _scaled_sum(self, outer(upcast(vec1), upcast(vec2)), beta, alpha)


@register_decomposition(aten.addbmm.default)
def addbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> torch.Tensor:
    """beta * self + alpha * sum over the batch of batch1 @ batch2."""
    if batch1.dtype in (torch.bfloat16, torch.float16) and may_decline():
        # Eager adds one batch's product at a time into the low-precision result, rounding
        # after each; the single mm below rounds once, which differs by more than bf16's
        # tolerance over a few batches. The eager kernel keeps eager's numbers.
        return NotImplemented
    # One mm over the batch folded into the inner dim accumulates once, as eager does in float32.
    b, n, k = batch1.shape
    left = reshape(aten.permute.default(batch1, [1, 0, 2]), [n, b * k])
    right = reshape(batch2, [b * k, batch2.shape[2]])
    return _scaled_sum(self, aten.mm.default(upcast(left), upcast(right)), beta, alpha)


@register_decomposition(aten._convolution.default)
def convolution_legacy(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    benchmark: bool,
    deterministic: bool,
    cudnn_enabled: bool,
    allow_tf32: bool,
) -> torch.Tensor:
    """The backend-selection flags dropped: a plain convolution."""
    return aten.convolution.default(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def _conv(n: int) -> Any:
    def decomposition(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        stride: Sequence[int] = (1,),
        padding: Sequence[int] = (0,),
        dilation: Sequence[int] = (1,),
        groups: int = 1,
    ) -> torch.Tensor:
        def spread(v: Sequence[int]) -> list[int]:
            values = list(v)
            return values * n if len(values) == 1 else values

        batched = input.dim() == n + 2
        x = input if batched else aten.unsqueeze.default(input, 0)
        out = aten.convolution.default(x, weight, bias, spread(stride), spread(padding), spread(dilation), False, [0] * n, groups)
        return out if batched else aten.squeeze.dims(out, [0])

    return decomposition


conv1d = register_decomposition(aten.conv1d.default)(_conv(1))
conv2d = register_decomposition(aten.conv2d.default)(_conv(2))
conv3d = register_decomposition(aten.conv3d.default)(_conv(3))
