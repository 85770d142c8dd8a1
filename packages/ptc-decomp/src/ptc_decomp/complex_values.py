"""Complex numbers stay eager: a call that touches a complex value runs as a fallback.

Kernel generators have no complex type (the loop IR, C++ and Triton all compute on real
scalars), so a complex value must never reach a fused kernel. Rather than decompose complex
arithmetic into pairs of real ops, every call whose tensors, dtype arguments or scalars are
complex, or whose result is, stays as the op itself, marked as a fallback, and runs as the
eager kernel; the real values around it are still decomposed and fused.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

COMPLEX_REASON = "it computes on complex numbers, which kernels do not"
"""The reason logged for fallbacks made because of complex values."""


def _is_complex(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.dtype.is_complex
    if isinstance(x, torch.dtype):
        return x.is_complex
    return isinstance(x, complex)


def touches_complex(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call's arguments hold a complex tensor, a complex dtype or a complex scalar."""
    return any(_is_complex(x) for x in pytree.tree_leaves((args, kwargs)))


def returns_complex(result: Any) -> bool:
    """Whether a call's result holds a complex tensor."""
    return any(isinstance(x, torch.Tensor) and x.dtype.is_complex for x in pytree.tree_leaves(result))
