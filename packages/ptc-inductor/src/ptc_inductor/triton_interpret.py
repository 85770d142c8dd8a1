"""Running generated Triton modules under ``TRITON_INTERPRET=1`` (how CI tests the backend).

Triton's interpreter does not implement ``libdevice`` (extern calls) and truncates float32 to
bfloat16 instead of rounding to nearest-even; generated modules call ``libdevice.*`` and
``ptc_round_bf16``, so under the interpreter those globals are rebound to ``INTERPRETER_GLOBALS``,
which compute the same functions with torch on the host. Loops over a symbolic size
(``range(0, s1, RBLOCK)``) get a ``range`` that reads the interpreter's scalar arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch


def interpreting() -> bool:
    """True when Triton kernels run in Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _lift(fn: Callable[..., torch.Tensor], result: str | None = None) -> Callable[..., Any]:
    """A libdevice stand-in: unwraps the interpreter's tensors, applies ``fn``, wraps the result."""

    def call(*args: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        first = next(a for a in args if isinstance(a, tl.core.tensor))
        scalar = first.dtype
        arrays = [np.asarray(a.handle.data) if isinstance(a, tl.core.tensor) else np.asarray(a) for a in args]
        out = fn(*[torch.from_numpy(np.ascontiguousarray(x)) for x in arrays])
        out_dtype = getattr(tl, result) if result else scalar
        data = out.numpy().astype(np.int32 if result == "int32" else arrays[0].dtype)
        ty = out_dtype if data.ndim == 0 else tl.block_type(out_dtype, list(data.shape))
        return tl.core.tensor(TensorHandle(data, out_dtype), ty)

    return call


def _cast_like(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    # Two-argument math in torch promotes; libdevice works in the first operand's type.
    return lambda a, b: fn(a, b.to(a.dtype))


INTERPRETER_LIBDEVICE = SimpleNamespace(
    expm1=_lift(torch.expm1),
    log10=_lift(torch.log10),
    log1p=_lift(torch.log1p),
    sqrt=_lift(torch.sqrt),
    rsqrt=_lift(torch.rsqrt),
    tan=_lift(torch.tan),
    asin=_lift(torch.asin),
    acos=_lift(torch.acos),
    atan=_lift(torch.atan),
    sinh=_lift(torch.sinh),
    cosh=_lift(torch.cosh),
    tanh=_lift(torch.tanh),
    asinh=_lift(torch.asinh),
    acosh=_lift(torch.acosh),
    atanh=_lift(torch.atanh),
    erf=_lift(torch.erf),
    erfc=_lift(torch.erfc),
    erfinv=_lift(torch.erfinv),
    lgamma=_lift(torch.lgamma),
    cyl_bessel_i0=_lift(torch.special.i0),
    trunc=_lift(torch.trunc),
    nearbyint=_lift(torch.round),
    signbit=_lift(lambda x: torch.signbit(x).to(torch.int32), "int32"),
    fmod=_lift(_cast_like(torch.fmod)),
    pow=_lift(_cast_like(torch.pow)),
    atan2=_lift(_cast_like(torch.atan2)),
    copysign=_lift(_cast_like(torch.copysign)),
    nextafter=_lift(_cast_like(torch.nextafter)),
    fmax=_lift(_cast_like(torch.fmax)),
    fmin=_lift(_cast_like(torch.fmin)),
    hypot=_lift(_cast_like(torch.hypot)),
)
"""The libdevice functions generated code calls, computed with torch for the interpreter."""

def _range(*args: Any) -> range:
    """``range`` over kernel scalars: the interpreter holds a scalar argument (a size) as a
    one-element array, which its ``__index__`` cannot convert under NumPy 2."""
    import triton.language as tl

    return range(*(int(a.handle.data.item()) if isinstance(a, tl.core.tensor) else a for a in args))


INTERPRETER_GLOBALS: dict[str, object] = {
    "libdevice": INTERPRETER_LIBDEVICE,
    "ptc_round_bf16": _lift(lambda x: x.to(torch.bfloat16).to(x.dtype)),
    "range": _range,
}
"""Module globals of a generated kernel module that the interpreter needs replaced."""
