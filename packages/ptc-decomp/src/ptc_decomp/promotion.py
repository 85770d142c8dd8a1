# torch.ops overloads are untyped, so every aten call returns Any.
"""Type promotion as eager PyTorch does it, and the casts decompositions use to follow it.

Eager promotes in three tiers: tensors with dimensions decide first, then 0-dim tensors, then
Python numbers; a lower tier only matters when it is of a higher category (bool < integer <
float < complex). See https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten

_REDUCED_FLOATS = (torch.float16, torch.bfloat16)


def category(dtype: torch.dtype) -> int:
    """0 for bool, 1 for integers, 2 for floats, 3 for complex."""
    if dtype == torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def scalar_dtype(value: bool | int | float | complex | torch.SymInt | torch.SymFloat | torch.SymBool) -> torch.dtype:
    """The dtype a Python number (or a symbolic size standing for one) takes part in promotion with."""
    if isinstance(value, (bool, torch.SymBool)):
        return torch.bool
    if isinstance(value, (int, torch.SymInt)):
        return torch.int64
    if isinstance(value, (float, torch.SymFloat)):
        return torch.get_default_dtype()
    return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64


def _promote_tier(dtypes: list[torch.dtype]) -> torch.dtype | None:
    found: torch.dtype | None = None
    for d in dtypes:
        found = d if found is None else torch.promote_types(found, d)
    return found


def result_type(*operands: Any) -> torch.dtype:
    """The dtype eager gives an elementwise op over ``operands`` (tensors and Python numbers)."""
    dimmed: list[torch.dtype] = []
    zero_dim: list[torch.dtype] = []
    numbers: list[torch.dtype] = []
    for x in operands:
        if x is None:
            continue
        if isinstance(x, torch.Tensor):
            (dimmed if x.dim() > 0 else zero_dim).append(x.dtype)
        elif isinstance(x, (bool, int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)):
            numbers.append(scalar_dtype(x))
        else:
            raise TypeError(f"cannot promote a {type(x).__name__}")
    result: torch.dtype | None = None
    for tier in (dimmed, zero_dim, numbers):
        found = _promote_tier(tier)
        if found is None:
            continue
        if result is None:
            result = found
        elif category(found) > category(result):
            if tier is numbers and category(found) == 2:
                # A Python float lifts integers to the default dtype, never wider.
                result = torch.get_default_dtype()
            elif category(found) == 3 and category(result) == 2:
                # A lower-tier complex keeps the float's precision: float16 -> complex32.
                result = _complex_of(result)
            else:
                result = torch.promote_types(result, found)
    if result is None:
        raise TypeError("result_type needs at least one operand")
    return result


def _complex_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(dtype, torch.complex64)


def float_result_type(*operands: Any) -> torch.dtype:
    """Like result_type, but integers and bools become the default float (true division, mean, gelu)."""
    dtype = result_type(*operands)
    return torch.get_default_dtype() if category(dtype) < 2 else dtype


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager kernels compute in: float32 for float16/bfloat16, the dtype itself otherwise."""
    return torch.float32 if dtype in _REDUCED_FLOATS else dtype


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` converted to ``dtype`` (``x`` itself when it already has it)."""
    if x.dtype == dtype:
        return x
    return aten._to_copy.default(x, dtype=dtype)


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in its opmath dtype, so reduced floats round once, at the end, as eager does."""
    return cast(x, opmath(x.dtype))


def as_operand(value: Any, like: torch.Tensor) -> torch.Tensor:
    """A Python number as a 0-dim tensor that promotes with ``like`` as the number would.

    Only add/sub/mul/div accept Python numbers for Tensor arguments at the dispatcher; for
    the other binary core ops the number becomes a 0-dim tensor of the result dtype, which
    (being 0-dim) never widens ``like`` beyond what the number itself would.
    """
    if isinstance(value, torch.Tensor):
        return value
    return aten.scalar_tensor.default(value, dtype=result_type(like, value), device=like.device)
