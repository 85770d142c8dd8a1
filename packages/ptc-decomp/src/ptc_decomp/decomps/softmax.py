# torch.ops overloads are untyped, so every aten call returns Any.
"""softmax, log_softmax and their backward ops, numerically stable and in opmath like eager."""

from __future__ import annotations

import torch

from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


def _shifted(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x minus its max along ``dim``, so exp cannot overflow."""
    if x.numel() == 0:
        return x
    return aten.sub.Tensor(x, aten.amax.default(x, [dim], True))


def _softmax_opmath(x: torch.Tensor, dim: int) -> torch.Tensor:
    e = aten.exp.default(_shifted(x, dim))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [dim], True))


def _log_softmax_opmath(x: torch.Tensor, dim: int) -> torch.Tensor:
    shifted = _shifted(x, dim)
    total = aten.sum.dim_IntList(aten.exp.default(shifted), [dim], True)
    return aten.sub.Tensor(shifted, aten.log.default(total))


@register_decomposition(aten._softmax.default)
def softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)); float32 out of float16 when half_to_float."""
    out_dtype = torch.float32 if half_to_float else self.dtype
    return cast(_softmax_opmath(upcast(self), dim), out_dtype)


@register_decomposition(aten._log_softmax.default)
def log_softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """(x - max) - log(sum(exp(x - max)))."""
    out_dtype = torch.float32 if half_to_float else self.dtype
    return cast(_log_softmax_opmath(upcast(self), dim), out_dtype)


@register_decomposition(aten._safe_softmax.default)
def safe_softmax(self: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """softmax, but 0 (not NaN) along rows that are entirely -inf (fully masked attention rows)."""
    x = upcast(cast(self, dtype) if dtype is not None else self)
    out = _softmax_opmath(x, dim)
    masked = aten.all.dims(aten.eq.Scalar(x, float("-inf")), [dim], True)
    zero = aten.scalar_tensor.default(0, dtype=out.dtype, device=out.device)
    return cast(aten.where.self(masked, zero, out), dtype or self.dtype)


@register_decomposition(aten.softmax.int)
def softmax_int(self: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.softmax: optional cast first, then _softmax."""
    return softmax(cast(self, dtype) if dtype is not None else self, dim, False)


@register_decomposition(aten.log_softmax.int)
def log_softmax_int(self: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.log_softmax: optional cast first, then _log_softmax."""
    return log_softmax(cast(self, dtype) if dtype is not None else self, dim, False)


@register_decomposition(aten._softmax_backward_data.default)
def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
    """y * (g - sum(g * y)) from the forward's output y."""
    g, y = upcast(grad_output), upcast(output)
    gy = aten.mul.Tensor(g, y)
    out = aten.sub.Tensor(gy, aten.mul.Tensor(y, aten.sum.dim_IntList(gy, [dim], True)))
    return cast(out, input_dtype)


@register_decomposition(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
    """g - exp(y) * sum(g) from the forward's output y."""
    g, y = upcast(grad_output), upcast(output)
    out = aten.sub.Tensor(g, aten.mul.Tensor(aten.exp.default(y), aten.sum.dim_IntList(g, [dim], True)))
    return cast(out, input_dtype)
