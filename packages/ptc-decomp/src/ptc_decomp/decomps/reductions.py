# torch.ops overloads are untyped, so every aten call returns Any.
"""Reductions outside core/1: mean, var/std (and their _mean forms), max/min with indices, logsumexp, norms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..dims import reduction_dims, wrap_dim
from ..promotion import cast, category, opmath, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


def _count(x: torch.Tensor, dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


@register_decomposition(aten.sum.default)
def sum_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of every element."""
    return aten.sum.dim_IntList(self, None, False, dtype=dtype)


def _mean(x: torch.Tensor, dim: Any, keepdim: bool, dtype: torch.dtype | None) -> torch.Tensor:
    out_dtype = dtype or x.dtype
    if category(out_dtype) < 2:
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype."
            f" Got: {str(out_dtype).removeprefix('torch.').capitalize()}"
        )
    dims = reduction_dims(dim, x.dim())
    total = aten.sum.dim_IntList(x, dims, keepdim, dtype=opmath(out_dtype))
    return cast(aten.div.Tensor(total, _count(x, dims)), out_dtype)


@register_decomposition(aten.mean.default)
def mean(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean of every element (floating and complex inputs only, as eager)."""
    return _mean(self, None, False, dtype)


@register_decomposition(aten.mean.dim)
def mean_dim(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean over ``dim``."""
    return _mean(self, dim, keepdim, dtype)


def _var_opmath(x: torch.Tensor, dims: list[int], correction: Any, keepdim: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(variance, mean) of an opmath tensor over ``dims``; eager divides by max(n - correction, 0)."""
    n = _count(x, dims)
    mean_k = aten.div.Tensor(aten.sum.dim_IntList(x, dims, True), n)
    diff = aten.sub.Tensor(x, mean_k)
    if diff.dtype.is_complex:
        squares = aten.mul.Tensor(aten.abs.default(diff), aten.abs.default(diff))
    else:
        squares = aten.mul.Tensor(diff, diff)
    c = 1 if correction is None else correction
    var = aten.div.Tensor(aten.sum.dim_IntList(squares, dims, keepdim), max(n - c, 0))
    mean_out = mean_k if keepdim else aten.squeeze.dims(mean_k, dims)
    return var, mean_out


def _var_and_mean(x: torch.Tensor, dim: Any, correction: Any, keepdim: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if category(x.dtype) < 2:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = reduction_dims(dim, x.dim())
    var, mean_value = _var_opmath(upcast(x), dims, correction, keepdim)
    real = x.dtype.to_real() if x.dtype.is_complex else x.dtype
    return cast(var, real), cast(mean_value, x.dtype)


@register_decomposition(aten.var.correction)
def var(self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: Any = None, keepdim: bool = False) -> torch.Tensor:
    """Variance with a degrees-of-freedom correction (default 1)."""
    return _var_and_mean(self, dim, correction, keepdim)[0]


@register_decomposition(aten.std.correction)
def std(self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: Any = None, keepdim: bool = False) -> torch.Tensor:
    """Standard deviation: sqrt of var."""
    if category(self.dtype) < 2:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = reduction_dims(dim, self.dim())
    variance, _ = _var_opmath(upcast(self), dims, correction, keepdim)
    real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
    return cast(aten.sqrt.default(variance), real)


@register_decomposition(aten.var_mean.correction)
def var_mean(self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: Any = None, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(var, mean) in one pass over the data."""
    return _var_and_mean(self, dim, correction, keepdim)


@register_decomposition(aten.std_mean.correction)
def std_mean(self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: Any = None, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(std, mean)."""
    if category(self.dtype) < 2:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = reduction_dims(dim, self.dim())
    variance, mean_value = _var_opmath(upcast(self), dims, correction, keepdim)
    real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
    return cast(aten.sqrt.default(variance), real), cast(mean_value, self.dtype)


def _arg_input(x: torch.Tensor) -> torch.Tensor:
    # argmax/argmin have no bool kernel; uint8 orders False < True the same way.
    return cast(x, torch.uint8) if x.dtype == torch.bool else x


@register_decomposition(aten.max.dim)
def max_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the max along ``dim``; ties pick the first index."""
    d = wrap_dim(dim, self.dim())
    values = aten.amax.default(self, [d] if self.dim() else [], keepdim)
    return values, aten.argmax.default(_arg_input(self), d if self.dim() else None, keepdim)


@register_decomposition(aten.min.dim)
def min_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the min along ``dim``; ties pick the first index."""
    d = wrap_dim(dim, self.dim())
    values = aten.amin.default(self, [d] if self.dim() else [], keepdim)
    return values, aten.argmin.default(_arg_input(self), d if self.dim() else None, keepdim)


@register_decomposition(aten.max.default)
def max_all(self: torch.Tensor) -> torch.Tensor:
    """The largest element (NaN if any)."""
    return aten.amax.default(self, list(range(self.dim())), False)


@register_decomposition(aten.min.default)
def min_all(self: torch.Tensor) -> torch.Tensor:
    """The smallest element (NaN if any)."""
    return aten.amin.default(self, list(range(self.dim())), False)


@register_decomposition(aten.any.default)
def any_all(self: torch.Tensor) -> torch.Tensor:
    """True if any element is nonzero."""
    return aten.any.dims(self, None, False)


@register_decomposition(aten.all.default)
def all_all(self: torch.Tensor) -> torch.Tensor:
    """True if every element is nonzero."""
    return aten.all.dims(self, None, False)


@register_decomposition(aten.any.dim)
def any_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """any over one dim."""
    return aten.any.dims(self, [dim], keepdim)


@register_decomposition(aten.all.dim)
def all_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """all over one dim."""
    return aten.all.dims(self, [dim], keepdim)


@register_decomposition(aten.logsumexp.default)
def logsumexp(self: torch.Tensor, dim: Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """log(sum(exp(x))) over ``dim``, shifted by the max (0 where the max is infinite)."""
    x = upcast(self) if category(self.dtype) >= 2 else cast(self, torch.get_default_dtype())
    dims = reduction_dims(dim, x.dim())
    if x.numel() == 0:
        return cast(aten.log.default(aten.sum.dim_IntList(aten.exp.default(x), dims, keepdim)), self.dtype if category(self.dtype) >= 2 else x.dtype)
    peak = aten.amax.default(x, dims, True)
    zero = aten.scalar_tensor.default(0, dtype=x.dtype, device=x.device)
    peak = aten.where.self(aten.isinf.default(peak), zero, peak)
    total = aten.sum.dim_IntList(aten.exp.default(aten.sub.Tensor(x, peak)), dims, keepdim)
    shift = peak if keepdim else aten.squeeze.dims(peak, dims)
    out = aten.add.Tensor(aten.log.default(total), shift)
    return cast(out, self.dtype if category(self.dtype) >= 2 else x.dtype)


@register_decomposition(aten.linalg_vector_norm.default)
def linalg_vector_norm(
    self: torch.Tensor, ord: Any = 2, dim: Sequence[int] | None = None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The ``ord``-norm over ``dim``: sum(|x|**ord)**(1/ord), with max/min/count for inf/-inf/0."""
    x = cast(self, dtype) if dtype is not None else self
    real = x.dtype.to_real() if x.dtype.is_complex else x.dtype
    dims = reduction_dims(dim, x.dim())
    magnitude = upcast(aten.abs.default(x))
    if ord == float("inf"):
        out = aten.amax.default(magnitude, dims, keepdim)
    elif ord == float("-inf"):
        out = aten.amin.default(magnitude, dims, keepdim)
    elif ord == 0:
        out = aten.sum.dim_IntList(aten.ne.Scalar(magnitude, 0), dims, keepdim, dtype=magnitude.dtype)
    elif ord == 1:
        out = aten.sum.dim_IntList(magnitude, dims, keepdim)
    elif ord == 2:
        out = aten.sqrt.default(aten.sum.dim_IntList(aten.mul.Tensor(magnitude, magnitude), dims, keepdim))
    else:
        powered = aten.sum.dim_IntList(aten.pow.Tensor_Scalar(magnitude, ord), dims, keepdim)
        out = aten.pow.Tensor_Scalar(powered, 1.0 / ord)
    return cast(out, real)


@register_decomposition(aten.count_nonzero.dim_IntList)
def count_nonzero(self: torch.Tensor, dim: Sequence[int]) -> torch.Tensor:
    """int64 count of nonzero elements over ``dim``."""
    return aten.sum.dim_IntList(aten.ne.Scalar(self, 0), reduction_dims(dim, self.dim()), False, dtype=torch.int64)


@register_decomposition(aten.count_nonzero.default)
def count_nonzero_all(self: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """int64 count of nonzero elements (over one dim or all)."""
    return aten.sum.dim_IntList(aten.ne.Scalar(self, 0), reduction_dims(dim, self.dim()), False, dtype=torch.int64)


@register_decomposition(aten.norm.ScalarOpt_dim)
def norm_dim(self: torch.Tensor, p: Any, dim: Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """The p-norm (default 2) over ``dim``."""
    return linalg_vector_norm(self, 2 if p is None else p, dim, keepdim)


@register_decomposition(aten.norm.Scalar)
def norm_all(self: torch.Tensor, p: Any = 2) -> torch.Tensor:
    """The p-norm of every element."""
    return linalg_vector_norm(self, p, None, False)
