"""Printing sympy index expressions and scalar constants as C++."""

from __future__ import annotations

import math

import sympy
import torch

from ..errors import CodegenError

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


def cexpr(e: sympy.Expr) -> str:
    """A C++ int64 expression for the index ``e`` (all intermediate values are non-negative)."""
    if e.is_Integer:
        v = int(e)
        return f"{v}LL" if abs(v) >= 2**31 else str(v)
    if e.is_Symbol:
        return str(e.name)
    if e.is_Add:
        return "(" + " + ".join(cexpr(a) for a in e.as_ordered_terms()) + ")"
    if e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            raise CodegenError(f"index {e} has a fractional coefficient")
        factors = [cexpr(a) for a in sympy.Mul.make_args(rest)]
        if coeff != 1:
            factors.insert(0, cexpr(coeff))
        return "(" + "*".join(factors) + ")"
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if not den.is_Integer:
            raise CodegenError(f"index {e} divides by a non-constant")
        return f"({cexpr(sympy.expand(num))} / {cexpr(den)})"
    if isinstance(e, sympy.Mod):
        return f"({cexpr(e.args[0])} % {cexpr(e.args[1])})"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return "(" + "*".join([cexpr(e.base)] * int(e.exp)) + ")"
    raise CodegenError(f"cannot print index expression {e} as C++")


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
