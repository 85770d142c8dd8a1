"""Printing sympy index expressions, dtypes and scalar constants as Triton source."""

from __future__ import annotations

import math

import sympy
import torch

from ..errors import CodegenError

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.bfloat16: "tl.bfloat16",
    torch.float16: "tl.float16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    """The ``tl.*`` name of ``dtype``."""
    try:
        return TL_DTYPES[dtype]
    except KeyError:
        raise CodegenError(f"the Triton backend does not support dtype {dtype}") from None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype values of ``dtype`` are computed in: bf16/fp16 are widened to float32."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def texpr(e: sympy.Expr) -> str:
    """A Triton integer expression for the index ``e`` (every intermediate value is non-negative)."""
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return str(e.name)
    if e.is_Add:
        return "(" + " + ".join(texpr(a) for a in e.as_ordered_terms()) + ")"
    if e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            raise CodegenError(f"index {e} has a fractional coefficient")
        factors = [texpr(a) for a in sympy.Mul.make_args(rest)]
        if coeff != 1:
            factors.insert(0, texpr(coeff))
        return "(" + " * ".join(factors) + ")"
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if not den.is_Integer:
            raise CodegenError(f"index {e} divides by a non-constant")
        # Operands are non-negative, so Triton's truncating // is floor division here.
        return f"({texpr(sympy.expand(num))} // {texpr(den)})"
    if isinstance(e, sympy.Mod):
        return f"({texpr(e.args[0])} % {texpr(e.args[1])})"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return "(" + " * ".join([texpr(e.base)] * int(e.exp)) + ")"
    raise CodegenError(f"cannot print index expression {e} as Triton")


def tconst(value: object, dtype: torch.dtype) -> str:
    """A 0-d Triton tensor holding ``value`` in the compute type of ``dtype``."""
    tdt = tl_dtype(compute_dtype(dtype))
    if dtype == torch.bool:
        return f"tl.full([], {bool(value)}, tl.int1)"
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        text = f'float("{v}")' if math.isnan(v) or math.isinf(v) else repr(v)
        return f"tl.full([], {text}, {tdt})"
    return f"tl.full([], {int(value)}, {tdt})"  # type: ignore[call-overload]


def identity(rtype: str, dtype: torch.dtype) -> str:
    """The Python literal of the neutral element of reduction ``rtype`` over ``dtype``."""
    if rtype in ("sum", "any", "welford"):
        return "0"
    if rtype in ("prod", "all"):
        return "1"
    lowest = rtype in ("max", "argmax")
    if dtype.is_floating_point:
        return 'float("-inf")' if lowest else 'float("inf")'
    if dtype == torch.bool:
        return "0" if lowest else "1"
    info = torch.iinfo(dtype)
    return str(info.min if lowest else info.max)
