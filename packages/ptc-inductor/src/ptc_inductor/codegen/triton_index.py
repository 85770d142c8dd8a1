"""Printing sympy index expressions, dtypes and scalar constants as Triton source."""

from __future__ import annotations

import math

import sympy
import torch

from ..errors import CodegenError
from .index_print import TRITON, IndexPrinter

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


def texpr(e: sympy.Expr | int) -> str:
    """A Triton integer expression for the index ``e`` (every intermediate value is non-negative)."""
    return IndexPrinter(TRITON)(e)


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
