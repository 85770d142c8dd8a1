# torch.ops overloads are untyped, so every aten call returns Any.
"""Activation functions (forward) written with core pointwise ops, computed in opmath like eager."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten

SQRT1_2 = math.sqrt(0.5)
TANH_GELU_K = math.sqrt(2.0 / math.pi)
TANH_GELU_C = 0.044715


@register_decomposition(aten.gelu.default)
def gelu(self: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """x * Phi(x), exact (erf) or with the tanh approximation."""
    x = upcast(self)
    if approximate == "tanh":
        cube = aten.mul.Tensor(aten.mul.Tensor(x, x), x)
        inner = aten.mul.Tensor(aten.add.Tensor(x, aten.mul.Tensor(cube, TANH_GELU_C)), TANH_GELU_K)
        cdf = aten.mul.Tensor(aten.add.Tensor(aten.tanh.default(inner), 1), 0.5)
    else:
        cdf = aten.mul.Tensor(aten.add.Tensor(aten.erf.default(aten.mul.Tensor(x, SQRT1_2)), 1), 0.5)
    return cast(aten.mul.Tensor(x, cdf), self.dtype)


@register_decomposition(aten.silu.default)
def silu(self: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x)."""
    x = upcast(self)
    return cast(aten.mul.Tensor(x, aten.sigmoid.default(x)), self.dtype)


@register_decomposition(aten.relu.default)
def relu(self: torch.Tensor) -> torch.Tensor:
    """max(x, 0), NaN kept."""
    return aten.clamp.default(self, 0, None)


@register_decomposition(aten.threshold.default)
def threshold(self: torch.Tensor, threshold: Any, value: Any) -> torch.Tensor:
    """``value`` where x <= threshold, else x."""
    fill = aten.scalar_tensor.default(value, dtype=self.dtype, device=self.device)
    return aten.where.self(aten.le.Scalar(self, threshold), fill, self)


@register_decomposition(aten.hardtanh.default)
def hardtanh(self: torch.Tensor, min_val: Any = -1, max_val: Any = 1) -> torch.Tensor:
    """x clamped to [min_val, max_val] (integer tensors stay integer, bounds truncated as eager)."""
    if not self.dtype.is_floating_point:
        min_val, max_val = int(min_val), int(max_val)
    return aten.clamp.default(self, min_val, max_val)


@register_decomposition(aten.hardswish.default)
def hardswish(self: torch.Tensor) -> torch.Tensor:
    """x * relu6(x + 3) / 6."""
    x = upcast(self)
    gate = aten.clamp.default(aten.add.Tensor(x, 3), 0, 6)
    return cast(aten.div.Tensor(aten.mul.Tensor(x, gate), 6), self.dtype)


@register_decomposition(aten.hardsigmoid.default)
def hardsigmoid(self: torch.Tensor) -> torch.Tensor:
    """relu6(x + 3) / 6."""
    x = upcast(self)
    return cast(aten.div.Tensor(aten.clamp.default(aten.add.Tensor(x, 3), 0, 6), 6), self.dtype)


@register_decomposition(aten.leaky_relu.default)
def leaky_relu(self: torch.Tensor, negative_slope: Any = 0.01) -> torch.Tensor:
    """x where x > 0, else x * negative_slope."""
    x = upcast(self)
    return cast(aten.where.self(aten.gt.Scalar(x, 0), x, aten.mul.Tensor(x, negative_slope)), self.dtype)


@register_decomposition(aten.elu.default)
def elu(self: torch.Tensor, alpha: Any = 1, scale: Any = 1, input_scale: Any = 1) -> torch.Tensor:
    """scale * x where x > 0, else alpha * scale * (exp(x * input_scale) - 1)."""
    x = upcast(self)
    negative = aten.mul.Tensor(aten.expm1.default(aten.mul.Tensor(x, input_scale)), alpha * scale)
    return cast(aten.where.self(aten.gt.Scalar(x, 0), aten.mul.Tensor(x, scale), negative), self.dtype)


def softplus_opmath(x: torch.Tensor, beta: Any, threshold: Any) -> torch.Tensor:
    """log(1 + exp(beta * x)) / beta, linear above ``threshold`` as eager (x already in opmath)."""
    scaled = aten.mul.Tensor(x, beta)
    soft = aten.div.Tensor(aten.log1p.default(aten.exp.default(scaled)), beta)
    return aten.where.self(aten.gt.Scalar(scaled, threshold), x, soft)


@register_decomposition(aten.softplus.default)
def softplus(self: torch.Tensor, beta: Any = 1, threshold: Any = 20) -> torch.Tensor:
    """Smooth relu: log(1 + exp(beta * x)) / beta."""
    return cast(softplus_opmath(upcast(self), beta, threshold), self.dtype)


@register_decomposition(aten.mish.default)
def mish(self: torch.Tensor) -> torch.Tensor:
    """x * tanh(softplus(x))."""
    x = upcast(self)
    return cast(aten.mul.Tensor(x, aten.tanh.default(softplus_opmath(x, 1, 20))), self.dtype)


@register_decomposition(aten.logit.default)
def logit(self: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given."""
    x = upcast(self) if self.dtype.is_floating_point else cast(self, torch.get_default_dtype())
    if eps is not None:
        x = aten.clamp.default(x, eps, 1 - eps)
    out = aten.log.default(aten.div.Tensor(x, aten.rsub.Scalar(x, 1)))
    return cast(out, self.dtype if self.dtype.is_floating_point else torch.get_default_dtype())


@register_decomposition(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(self: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log(sigmoid(x)), buffer): min(x, 0) - log1p(exp(-|x|)); the buffer is eager's CPU one, exp(-|x|)."""
    x = upcast(self)
    buffer = aten.exp.default(aten.neg.default(aten.abs.default(x)))
    out = aten.sub.Tensor(aten.clamp.default(x, None, 0), aten.log1p.default(buffer))
    return cast(out, self.dtype), cast(buffer, self.dtype)


@register_decomposition(aten.celu.default)
def celu(self: torch.Tensor, alpha: Any = 1.0) -> torch.Tensor:
    """x where x > 0, else alpha * (exp(x / alpha) - 1)."""
    return elu(self, alpha, 1, 1.0 / alpha)


@register_decomposition(aten.glu.default)
def glu(self: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """First half of ``dim`` times sigmoid of the second half."""
    d = dim % self.dim()
    half = self.shape[d] // 2
    a, b = aten.slice.Tensor(self, d, 0, half), aten.slice.Tensor(self, d, half, 2 * half)
    return cast(aten.mul.Tensor(upcast(a), aten.sigmoid.default(upcast(b))), self.dtype)


@register_decomposition(aten._prelu_kernel.default)
def prelu_kernel(self: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x where x > 0, else weight * x (weight already broadcast to self's rank)."""
    return aten.where.self(aten.gt.Scalar(self, 0), self, aten.mul.Tensor(self, weight))


@register_decomposition(aten.hardshrink.default)
def hardshrink(self: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    """x where |x| > lambd, else 0."""
    zero = aten.scalar_tensor.default(0, dtype=self.dtype, device=self.device)
    return aten.where.self(aten.gt.Scalar(aten.abs.default(self), lambd), self, zero)


@register_decomposition(aten.softshrink.default)
def softshrink(self: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    """x - lambd above lambd, x + lambd below -lambd, else 0."""
    x = upcast(self)
    zero = aten.scalar_tensor.default(0, dtype=x.dtype, device=x.device)
    shrunk = aten.where.self(aten.gt.Scalar(x, lambd), aten.sub.Tensor(x, lambd), aten.where.self(aten.lt.Scalar(x, -lambd), aten.add.Tensor(x, lambd), zero))
    return cast(shrunk, self.dtype)
