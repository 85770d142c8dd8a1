# torch.ops overloads are untyped, so every aten call returns Any.
"""Backward ops of activations (gelu_backward, silu_backward, threshold_backward, ...)."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..promotion import cast, upcast
from ..registry import register_decomposition
from .activations import SQRT1_2, TANH_GELU_C, TANH_GELU_K

aten = torch.ops.aten

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _zero_like(x: torch.Tensor) -> torch.Tensor:
    return aten.scalar_tensor.default(0, dtype=x.dtype, device=x.device)


@register_decomposition(aten.gelu_backward.default)
def gelu_backward(grad_output: torch.Tensor, self: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """grad * d gelu(x) / dx."""
    g, x = upcast(grad_output), upcast(self)
    if approximate == "tanh":
        x_sq = aten.mul.Tensor(x, x)
        inner = aten.mul.Tensor(aten.add.Tensor(x, aten.mul.Tensor(aten.mul.Tensor(x_sq, x), TANH_GELU_C)), TANH_GELU_K)
        t = aten.tanh.default(inner)
        left_derivative = aten.mul.Tensor(aten.add.Tensor(t, 1), 0.5)
        inner_derivative = aten.mul.Tensor(aten.add.Tensor(aten.mul.Tensor(x_sq, 3 * TANH_GELU_C), 1), TANH_GELU_K)
        tanh_derivative = aten.rsub.Scalar(aten.mul.Tensor(t, t), 1)
        right_derivative = aten.mul.Tensor(aten.mul.Tensor(aten.mul.Tensor(x, 0.5), tanh_derivative), inner_derivative)
        derivative = aten.add.Tensor(left_derivative, right_derivative)
    else:
        cdf = aten.mul.Tensor(aten.add.Tensor(aten.erf.default(aten.mul.Tensor(x, SQRT1_2)), 1), 0.5)
        pdf = aten.mul.Tensor(aten.exp.default(aten.mul.Tensor(aten.mul.Tensor(x, x), -0.5)), _INV_SQRT_2PI)
        derivative = aten.add.Tensor(cdf, aten.mul.Tensor(x, pdf))
    return cast(aten.mul.Tensor(g, derivative), grad_output.dtype)


@register_decomposition(aten.silu_backward.default)
def silu_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad * sigmoid(x) * (1 + x * (1 - sigmoid(x)))."""
    g, x = upcast(grad_output), upcast(self)
    s = aten.sigmoid.default(x)
    derivative = aten.mul.Tensor(s, aten.add.Tensor(aten.mul.Tensor(x, aten.rsub.Scalar(s, 1)), 1))
    return cast(aten.mul.Tensor(g, derivative), grad_output.dtype)


@register_decomposition(aten.tanh_backward.default)
def tanh_backward(grad_output: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """grad * (1 - y**2) from the forward's output y."""
    g, y = upcast(grad_output), upcast(output)
    return cast(aten.mul.Tensor(g, aten.rsub.Scalar(aten.mul.Tensor(y, y), 1)), grad_output.dtype)


@register_decomposition(aten.sigmoid_backward.default)
def sigmoid_backward(grad_output: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """grad * y * (1 - y) from the forward's output y."""
    g, y = upcast(grad_output), upcast(output)
    return cast(aten.mul.Tensor(g, aten.mul.Tensor(y, aten.rsub.Scalar(y, 1))), grad_output.dtype)


@register_decomposition(aten.threshold_backward.default)
def threshold_backward(grad_output: torch.Tensor, self: torch.Tensor, threshold: Any) -> torch.Tensor:
    """grad where x > threshold, else 0 (relu's backward)."""
    return aten.where.self(aten.le.Scalar(self, threshold), _zero_like(grad_output), grad_output)


@register_decomposition(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output: torch.Tensor, self: torch.Tensor, min_val: Any, max_val: Any) -> torch.Tensor:
    """grad inside (min_val, max_val), else 0."""
    outside = aten.logical_or.default(aten.le.Scalar(self, min_val), aten.ge.Scalar(self, max_val))
    return aten.where.self(outside, _zero_like(grad_output), grad_output)


@register_decomposition(aten.hardswish_backward.default)
def hardswish_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """0 below -3, grad * (x / 3 + 0.5) on [-3, 3], grad above."""
    g, x = upcast(grad_output), upcast(self)
    middle = aten.mul.Tensor(g, aten.add.Tensor(aten.div.Tensor(x, 3), 0.5))
    upper = aten.where.self(aten.le.Scalar(x, 3), middle, g)
    out = aten.where.self(aten.lt.Scalar(x, -3), _zero_like(g), upper)
    return cast(out, grad_output.dtype)


@register_decomposition(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad / 6 strictly inside (-3, 3), else 0."""
    g, x = upcast(grad_output), upcast(self)
    inside = aten.logical_and.default(aten.gt.Scalar(x, -3), aten.lt.Scalar(x, 3))
    return cast(aten.where.self(inside, aten.div.Tensor(g, 6), _zero_like(g)), grad_output.dtype)


@register_decomposition(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output: torch.Tensor, self: torch.Tensor, negative_slope: Any, self_is_result: bool) -> torch.Tensor:
    """grad where x > 0, else grad * negative_slope."""
    g = upcast(grad_output)
    out = aten.where.self(aten.gt.Scalar(self, 0), g, aten.mul.Tensor(g, negative_slope))
    return cast(out, grad_output.dtype)


@register_decomposition(aten.elu_backward.default)
def elu_backward(
    grad_output: torch.Tensor, alpha: Any, scale: Any, input_scale: Any, is_result: bool, self_or_result: torch.Tensor
) -> torch.Tensor:
    """elu's derivative, from the input or (is_result) from the output."""
    g, v = upcast(grad_output), upcast(self_or_result)
    if is_result:
        negative = aten.mul.Tensor(aten.mul.Tensor(g, input_scale), aten.add.Tensor(v, alpha * scale))
    else:
        exp = aten.exp.default(aten.mul.Tensor(v, input_scale))
        negative = aten.mul.Tensor(aten.mul.Tensor(g, input_scale * alpha * scale), exp)
    out = aten.where.self(aten.le.Scalar(v, 0), negative, aten.mul.Tensor(g, scale))
    return cast(out, grad_output.dtype)


@register_decomposition(aten.softplus_backward.default)
def softplus_backward(grad_output: torch.Tensor, self: torch.Tensor, beta: Any, threshold: Any) -> torch.Tensor:
    """grad * sigmoid(beta * x), grad itself above the threshold."""
    g, x = upcast(grad_output), upcast(self)
    scaled = aten.mul.Tensor(x, beta)
    z = aten.exp.default(scaled)
    soft = aten.div.Tensor(aten.mul.Tensor(g, z), aten.add.Tensor(z, 1))
    return cast(aten.where.self(aten.gt.Scalar(scaled, threshold), g, soft), grad_output.dtype)


@register_decomposition(aten.mish_backward.default)
def mish_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """grad * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)**2)), sp = softplus(x)."""
    g, x = upcast(grad_output), upcast(self)
    t = aten.tanh.default(aten.log1p.default(aten.exp.default(x)))
    s = aten.sigmoid.default(x)
    tail = aten.mul.Tensor(aten.mul.Tensor(x, s), aten.rsub.Scalar(aten.mul.Tensor(t, t), 1))
    return cast(aten.mul.Tensor(g, aten.add.Tensor(t, tail)), grad_output.dtype)


@register_decomposition(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(grad_output: torch.Tensor, self: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """grad * (1 - sigmoid(x)) = grad * sigmoid(-x)."""
    g, x = upcast(grad_output), upcast(self)
    return cast(aten.mul.Tensor(g, aten.sigmoid.default(aten.neg.default(x))), grad_output.dtype)


@register_decomposition(aten.glu_backward.default)
def glu_backward(grad_output: torch.Tensor, self: torch.Tensor, dim: int) -> torch.Tensor:
    """[grad * sigmoid(b), grad * a * sigmoid(b) * (1 - sigmoid(b))] along ``dim``."""
    d = dim % self.dim()
    half = self.shape[d] // 2
    a, b = upcast(aten.slice.Tensor(self, d, 0, half)), upcast(aten.slice.Tensor(self, d, half, 2 * half))
    g = upcast(grad_output)
    s = aten.sigmoid.default(b)
    grad_a = aten.mul.Tensor(g, s)
    grad_b = aten.mul.Tensor(aten.mul.Tensor(grad_a, a), aten.rsub.Scalar(s, 1))
    return cast(aten.cat.default([grad_a, grad_b], d), grad_output.dtype)


@register_decomposition(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(grad_output: torch.Tensor, self: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad where x > 0 else weight * grad, grad * x where x <= 0 else 0), both of self's shape."""
    positive = aten.gt.Scalar(self, 0)
    grad_input = aten.where.self(positive, grad_output, aten.mul.Tensor(grad_output, weight))
    grad_weight = aten.where.self(positive, _zero_like(grad_output), aten.mul.Tensor(grad_output, self))
    return grad_input, grad_weight


@register_decomposition(aten.hardshrink_backward.default)
def hardshrink_backward(grad_out: torch.Tensor, self: torch.Tensor, lambd: Any) -> torch.Tensor:
    """grad where |x| > lambd, else 0."""
    inside = aten.logical_and.default(aten.ge.Scalar(self, -lambd), aten.le.Scalar(self, lambd))
    return aten.where.self(inside, _zero_like(grad_out), grad_out)


@register_decomposition(aten.softshrink_backward.default)
def softshrink_backward(grad_output: torch.Tensor, self: torch.Tensor, lambd: Any) -> torch.Tensor:
    """grad where |x| > lambd, else 0."""
    inside = aten.logical_and.default(aten.ge.Scalar(self, -lambd), aten.le.Scalar(self, lambd))
    return aten.where.self(inside, _zero_like(grad_output), grad_output)


@register_decomposition(aten.logit_backward.default)
def logit_backward(grad_output: torch.Tensor, self: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """grad / (x * (1 - x)); 0 outside [eps, 1 - eps] when eps is given, NaN outside [0, 1] otherwise."""
    g, x = upcast(grad_output), upcast(self)
    inner = aten.div.Tensor(g, aten.mul.Tensor(x, aten.rsub.Scalar(x, 1)))
    low, high = (0.0, 1.0) if eps is None else (eps, 1.0 - eps)
    outside = aten.logical_or.default(aten.lt.Scalar(x, low), aten.gt.Scalar(x, high))
    fill = aten.scalar_tensor.default(float("nan") if eps is None else 0.0, dtype=inner.dtype, device=inner.device)
    return cast(aten.where.self(outside, fill, inner), grad_output.dtype)
