# torch.ops overloads are untyped, so every aten call returns Any.
"""Scalar overloads and trivial aliases mapped onto the core overloads that take a Python number."""

from __future__ import annotations

from typing import Any

import torch

from ..promotion import as_operand, cast, float_result_type, result_type
from ..registry import register_decomposition

aten = torch.ops.aten

# Each Scalar overload behaves exactly like its Tensor overload given a Python number: eager
# wraps the number into a "wrapped number" tensor, which promotes like the number itself.
_SCALAR_TO_TENSOR = {
    aten.add.Scalar: aten.add.Tensor,
    aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor,
    aten.div.Scalar: aten.div.Tensor,
    aten.remainder.Scalar: aten.remainder.Tensor,
    aten.fmod.Scalar: aten.fmod.Tensor,
    aten.bitwise_and.Scalar: aten.bitwise_and.Tensor,
    aten.bitwise_or.Scalar: aten.bitwise_or.Tensor,
    aten.bitwise_xor.Scalar: aten.bitwise_xor.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar: aten.bitwise_left_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar: aten.bitwise_right_shift.Tensor,
}


# The dispatcher accepts a Python number for ``other`` of these four only.
_TAKES_NUMBERS = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor})


def _forward(scalar_op: Any, tensor_op: Any) -> None:
    # add.Scalar/sub.Scalar take alpha positionally, add.Tensor/sub.Tensor only by keyword,
    # so the trailing arguments are passed on by name.
    names = [arg.name for arg in scalar_op._schema.arguments[2:]]

    def decomposition(self: torch.Tensor, other: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        operand = other if tensor_op in _TAKES_NUMBERS else as_operand(other, self)
        return tensor_op(self, operand, **dict(zip(names, args)), **kwargs)

    decomposition.__name__ = f"{scalar_op.__name__.replace('.', '_')}_as_tensor"
    decomposition.__qualname__ = decomposition.__name__
    register_decomposition(scalar_op)(decomposition)


for _scalar, _tensor in _SCALAR_TO_TENSOR.items():
    _forward(_scalar, _tensor)


@register_decomposition(aten.div.Scalar_mode)
def div_scalar_mode(self: torch.Tensor, other: Any, *, rounding_mode: str | None) -> torch.Tensor:
    """div with rounding on a Python number."""
    return aten.div.Tensor_mode(self, other, rounding_mode=rounding_mode)


@register_decomposition(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(self: torch.Tensor, other: Any) -> torch.Tensor:
    """Floor division (Python's //)."""
    return aten.div.Tensor_mode(self, other, rounding_mode="floor")


@register_decomposition(aten.rsub.Tensor)
def rsub(self: torch.Tensor, other: torch.Tensor, *, alpha: Any = 1) -> torch.Tensor:
    """other - alpha * self."""
    return aten.sub.Tensor(other, self, alpha=alpha)


@register_decomposition(aten.rsub.Scalar)
def rsub_scalar(self: torch.Tensor, other: Any, alpha: Any = 1) -> torch.Tensor:
    """number - alpha * self."""
    scaled = aten.neg.default(self) if alpha == 1 else aten.mul.Tensor(self, -alpha)
    return aten.add.Tensor(scaled, other)


@register_decomposition(aten.where.ScalarOther)
def where_scalar_other(condition: torch.Tensor, self: torch.Tensor, other: Any) -> torch.Tensor:
    """where with a Python number for the false branch."""
    return aten.where.self(condition, self, as_operand(other, self))


@register_decomposition(aten.where.ScalarSelf)
def where_scalar_self(condition: torch.Tensor, self: Any, other: torch.Tensor) -> torch.Tensor:
    """where with a Python number for the true branch."""
    return aten.where.self(condition, as_operand(self, other), other)


@register_decomposition(aten.where.Scalar)
def where_scalar(condition: torch.Tensor, self: Any, other: Any) -> torch.Tensor:
    """where with Python numbers for both branches."""
    dtype = result_type(self, other)
    a = aten.scalar_tensor.default(self, dtype=dtype, device=condition.device)
    b = aten.scalar_tensor.default(other, dtype=dtype, device=condition.device)
    return aten.where.self(condition, a, b)


@register_decomposition(aten.masked_fill.Scalar)
def masked_fill_scalar(self: torch.Tensor, mask: torch.Tensor, value: Any) -> torch.Tensor:
    """self with ``value`` where mask is true; the dtype stays self's."""
    fill = aten.scalar_tensor.default(value, dtype=self.dtype, device=self.device)
    return aten.where.self(mask, fill, self)


@register_decomposition(aten.masked_fill.Tensor)
def masked_fill_tensor(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """self with the 0-dim ``value`` where mask is true; the dtype stays self's."""
    return aten.where.self(mask, cast(value, self.dtype), self)


@register_decomposition(aten.clamp_min.default)
def clamp_min(self: torch.Tensor, min: Any) -> torch.Tensor:
    """max(self, min) with clamp's NaN and promotion rules."""
    return aten.clamp.default(self, min, None)


@register_decomposition(aten.clamp_max.default)
def clamp_max(self: torch.Tensor, max: Any) -> torch.Tensor:
    """min(self, max) with clamp's NaN and promotion rules."""
    return aten.clamp.default(self, None, max)


@register_decomposition(aten.clamp_min.Tensor)
def clamp_min_tensor(self: torch.Tensor, min: torch.Tensor) -> torch.Tensor:
    """Elementwise lower bound."""
    return aten.clamp.Tensor(self, min, None)


@register_decomposition(aten.clamp_max.Tensor)
def clamp_max_tensor(self: torch.Tensor, max: torch.Tensor) -> torch.Tensor:
    """Elementwise upper bound."""
    return aten.clamp.Tensor(self, None, max)


@register_decomposition(aten.max.other)
def max_other(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Elementwise max (torch.max(a, b))."""
    return aten.maximum.default(self, other)


@register_decomposition(aten.min.other)
def min_other(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Elementwise min (torch.min(a, b))."""
    return aten.minimum.default(self, other)


@register_decomposition(aten.true_divide.Tensor)
def true_divide(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """True division."""
    return aten.div.Tensor(self, other)


@register_decomposition(aten.detach.default, aten.positive.default)
def detach(self: torch.Tensor) -> torch.Tensor:
    """The same values under a new name (graphs carry no autograd state)."""
    return aten.alias.default(self)


@register_decomposition(aten.lift_fresh_copy.default)
def lift_fresh_copy(self: torch.Tensor) -> torch.Tensor:
    """A fresh copy of a constant."""
    return aten.clone.default(self)


@register_decomposition(aten.copysign.Scalar)
def copysign_scalar(self: torch.Tensor, other: Any) -> torch.Tensor:
    """|self| with the sign of a Python number (integers become the default float)."""
    dtype = float_result_type(self, other)
    return aten.copysign.Tensor(cast(self, dtype), aten.scalar_tensor.default(other, dtype=dtype, device=self.device))


@register_decomposition(aten.remainder.Scalar_Tensor)
def remainder_scalar_tensor(self: Any, other: torch.Tensor) -> torch.Tensor:
    """A Python number modulo a tensor (sign of the divisor)."""
    return aten.remainder.Tensor(as_operand(self, other), other)
