"""Printing sympy index expressions and scalar constants as C++."""

from __future__ import annotations

import math

import sympy
import torch

from ..errors import CodegenError
from .index_print import CPP, IndexPrinter

STORAGE_CTYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.bfloat16: "uint16_t",
    torch.float16: "uint16_t",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "bool",
}


def storage_ctype(dtype: torch.dtype) -> str:
    """The C++ type a buffer of ``dtype`` is stored as."""
    try:
        return STORAGE_CTYPES[dtype]
    except KeyError:
        raise CodegenError(f"the C++ backend does not support dtype {dtype}") from None


def compute_ctype(dtype: torch.dtype) -> str:
    """The C++ type values of ``dtype`` are computed in (bf16/fp16 -> float)."""
    if dtype in (torch.bfloat16, torch.float16):
        return "float"
    return storage_ctype(dtype)


def cexpr(e: sympy.Expr | int) -> str:
    """A C++ int64 expression for the index ``e`` (all intermediate values are non-negative)."""
    return IndexPrinter(CPP)(e)


def cconst(value: object, dtype: torch.dtype) -> str:
    """A C++ literal of ``value`` in the compute type of ``dtype``."""
    ct = compute_ctype(dtype)
    if dtype == torch.bool:
        return "true" if bool(value) else "false"
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return f"std::numeric_limits<{ct}>::quiet_NaN()"
        if math.isinf(v):
            return f"{'-' if v < 0 else ''}std::numeric_limits<{ct}>::infinity()"
        return f"static_cast<{ct}>({v!r})"
    v = int(value)  # type: ignore[call-overload]
    if v == -(2**63):
        return f"std::numeric_limits<{ct}>::lowest()"
    return f"static_cast<{ct}>({v}LL)"
