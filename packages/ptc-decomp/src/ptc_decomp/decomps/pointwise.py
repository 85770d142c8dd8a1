# torch.ops overloads are untyped, so every aten call returns Any.
"""Pointwise ops outside core/1 (lerp, addcmul/addcdiv, xlogy, square, isfinite, round with decimals...)."""

from __future__ import annotations

from typing import Any

import torch

from ..promotion import as_operand, cast, category, float_result_type, opmath, result_type
from ..registry import register_decomposition

aten = torch.ops.aten


def _lerp(self: torch.Tensor, end: torch.Tensor, weight: Any) -> torch.Tensor:
    dtype = result_type(self, end)
    a, b = cast(self, opmath(dtype)), cast(end, opmath(dtype))
    w = cast(weight, opmath(dtype)) if isinstance(weight, torch.Tensor) else weight
    diff = aten.sub.Tensor(b, a)
    # Eager switches formula at |weight| = 0.5 so both ends are reproduced exactly.
    low = aten.add.Tensor(a, aten.mul.Tensor(diff, w))
    high = aten.sub.Tensor(b, aten.mul.Tensor(diff, aten.rsub.Scalar(w, 1) if isinstance(w, torch.Tensor) else 1 - w))
    if isinstance(w, torch.Tensor):
        out = aten.where.self(aten.lt.Scalar(aten.abs.default(w), 0.5), low, high)
    else:
        out = low if abs(w) < 0.5 else high
    return cast(out, dtype)


@register_decomposition(aten.lerp.Scalar)
def lerp_scalar(self: torch.Tensor, end: torch.Tensor, weight: Any) -> torch.Tensor:
    """self + weight * (end - self)."""
    return _lerp(self, end, weight)


@register_decomposition(aten.lerp.Tensor)
def lerp_tensor(self: torch.Tensor, end: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """self + weight * (end - self), elementwise weight."""
    return _lerp(self, end, weight)


@register_decomposition(aten.addcmul.default)
def addcmul(self: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: Any = 1) -> torch.Tensor:
    """self + value * tensor1 * tensor2."""
    dtype = result_type(self, tensor1, tensor2)
    a, b, c = (cast(t, opmath(dtype)) for t in (self, tensor1, tensor2))
    scaled = b if value == 1 else aten.mul.Tensor(b, value)
    return cast(aten.add.Tensor(a, aten.mul.Tensor(scaled, c)), dtype)


@register_decomposition(aten.addcdiv.default)
def addcdiv(self: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: Any = 1) -> torch.Tensor:
    """self + value * tensor1 / tensor2 (floating only, as eager)."""
    dtype = result_type(self, tensor1, tensor2)
    if category(tensor1.dtype) < 2 and category(tensor2.dtype) < 2:
        raise RuntimeError("Integer division with addcdiv is no longer supported; divide with torch.div instead")
    a, b, c = (cast(t, opmath(dtype)) for t in (self, tensor1, tensor2))
    scaled = b if value == 1 else aten.mul.Tensor(b, value)
    return cast(aten.add.Tensor(a, aten.div.Tensor(scaled, c)), dtype)


@register_decomposition(aten.xlogy.Tensor)
def xlogy(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """x * log(y), 0 where x is 0 (NaN where y is NaN)."""
    dtype = float_result_type(self, other)
    x, y = cast(self, dtype), cast(other, dtype)
    product = aten.mul.Tensor(x, aten.log.default(y))
    zero = aten.scalar_tensor.default(0, dtype=dtype, device=product.device)
    out = aten.where.self(aten.eq.Scalar(x, 0), zero, product)
    return aten.where.self(aten.isnan.default(y), y, out)


@register_decomposition(aten.square.default)
def square(self: torch.Tensor) -> torch.Tensor:
    """x * x (bools become int64, as eager's pow(x, 2))."""
    x = cast(self, torch.int64) if self.dtype == torch.bool else self
    return aten.mul.Tensor(x, x)


@register_decomposition(aten.isfinite.default)
def isfinite(self: torch.Tensor) -> torch.Tensor:
    """Not NaN and not infinite; always true for integers."""
    if category(self.dtype) < 2:
        return aten.full.default(list(self.shape), True, dtype=torch.bool, device=self.device)
    bad = aten.logical_or.default(aten.isnan.default(self), aten.isinf.default(self))
    return aten.logical_not.default(bad)


@register_decomposition(aten.isposinf.default)
def isposinf(self: torch.Tensor) -> torch.Tensor:
    """True where +inf."""
    if category(self.dtype) < 2:
        return aten.full.default(list(self.shape), False, dtype=torch.bool, device=self.device)
    return aten.eq.Scalar(self, float("inf"))


@register_decomposition(aten.isneginf.default)
def isneginf(self: torch.Tensor) -> torch.Tensor:
    """True where -inf."""
    if category(self.dtype) < 2:
        return aten.full.default(list(self.shape), False, dtype=torch.bool, device=self.device)
    return aten.eq.Scalar(self, float("-inf"))


@register_decomposition(aten.round.decimals)
def round_decimals(self: torch.Tensor, *, decimals: int) -> torch.Tensor:
    """Round half to even at ``decimals`` digits, by scaling as eager does."""
    if decimals == 0:
        return aten.round.default(self)
    scale = 10.0 ** abs(decimals)
    if decimals > 0:
        return aten.div.Tensor(aten.round.default(aten.mul.Tensor(self, scale)), scale)
    return aten.mul.Tensor(aten.round.default(aten.div.Tensor(self, scale)), scale)


@register_decomposition(aten.sgn.default)
def sgn(self: torch.Tensor) -> torch.Tensor:
    """sign for real tensors."""
    if self.dtype.is_complex:
        raise RuntimeError("sgn of complex tensors is not decomposed: core/1 has no complex division by |z|")
    return aten.sign.default(self)


@register_decomposition(aten.relu6.default)
def relu6(self: torch.Tensor) -> torch.Tensor:
    """clamp(x, 0, 6)."""
    return aten.clamp.default(self, 0, 6)


@register_decomposition(aten.deg2rad.default)
def deg2rad(self: torch.Tensor) -> torch.Tensor:
    """Degrees to radians (integers become the default float)."""
    dtype = float_result_type(self)
    return aten.mul.Tensor(cast(self, dtype), 0.017453292519943295)


@register_decomposition(aten.rad2deg.default)
def rad2deg(self: torch.Tensor) -> torch.Tensor:
    """Radians to degrees (integers become the default float)."""
    dtype = float_result_type(self)
    return aten.mul.Tensor(cast(self, dtype), 57.29577951308232)


@register_decomposition(aten.xlogy.Scalar_Other)
def xlogy_scalar_other(self: torch.Tensor, other: Any) -> torch.Tensor:
    """x * log(number)."""
    return xlogy(self, as_operand(other, self))


@register_decomposition(aten.xlogy.Scalar_Self)
def xlogy_scalar_self(self: Any, other: torch.Tensor) -> torch.Tensor:
    """number * log(y)."""
    return xlogy(as_operand(self, other), other)
