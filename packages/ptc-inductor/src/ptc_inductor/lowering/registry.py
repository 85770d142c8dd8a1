"""The lowering table: one entry per op, filled by ``@register_lowering`` where the code lives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]

LOWERINGS: dict[Any, LoweringFn] = {}
"""Op overload -> function ``(ctx, *args, **kwargs)`` returning a TensorValue (or a tuple)."""

EXTERN_OPS: set[Any] = set()
"""Ops lowered to a library call through ``torch.ops`` rather than to loop IR."""


def register_lowering(*ops: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` as the lowering of every op in ``ops``."""

    def wrap(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"{op} has two lowerings")
            LOWERINGS[op] = fn
        return fn

    return wrap


def mark_extern(*ops: Any) -> None:
    """Record that ``ops`` are lowered as extern kernels (for coverage reports)."""
    EXTERN_OPS.update(ops)
