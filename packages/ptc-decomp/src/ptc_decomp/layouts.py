"""Comparing a decomposition's result with the metadata its graph node records, static or symbolic.

A decomposition of a symbolic graph returns traced tensors whose sizes are ``torch.SymInt``;
the node records sympy expressions, possibly written before a guard made two symbols one
(``s2`` replaced by ``s0``). Comparing SymInts with ``==`` would *decide* the comparison and
record a guard; these checks instead compare expressions through the SymbolEnv, which only
answers what holds for every size the guards admit, and record nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch

from ptc_spec import SymbolEnv, SymSize, TensorMeta, expr_of


def _expr(value: object) -> sympy.Basic:
    return expr_of(value) if not isinstance(value, sympy.Basic) else value


def same_size(env: SymbolEnv, a: object, b: object) -> bool:
    """True when sizes ``a`` and ``b`` (ints, SymInts or sympy) are equal for every admitted size."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    left, right = env.simplify(_expr(a)), env.simplify(_expr(b))
    if left == right:
        return True
    return env.statically_known(sympy.Eq(left, right)) is True


def same_shape(env: SymbolEnv, shape: Sequence[object], expected: Sequence[SymSize]) -> bool:
    """True when ``shape`` equals ``expected`` dim by dim for every admitted size."""
    return len(shape) == len(expected) and all(same_size(env, a, b) for a, b in zip(shape, expected))


def _is_one(env: SymbolEnv, size: object) -> bool:
    return same_size(env, size, 1)


def same_layout(env: SymbolEnv, value: torch.Tensor, expected: TensorMeta) -> bool:
    """True when ``value`` has ``expected``'s strides wherever they matter (dims of size 1 never do)."""
    if all(isinstance(s, int) for s in value.shape) and value.numel() <= 1:
        return True
    return all(_is_one(env, size) or same_size(env, a, b) for size, a, b in zip(value.shape, value.stride(), expected.stride))


def dense(env: SymbolEnv, meta: TensorMeta) -> bool:
    """True when ``meta``'s layout is non-overlapping and dense (a permuted contiguous layout).

    Dims are ordered by their strides at the hints; the strides must then be the running
    products of the sizes exactly, so the answer holds at every admitted size.
    """
    dims = [(stride, size) for stride, size in zip(meta.stride, meta.shape) if not _is_one(env, size)]
    dims.sort(key=lambda d: env.size_hint(sympy.sympify(d[0])))
    running: SymSize = 1
    for stride, size in dims:
        if not same_size(env, stride, running):
            return False
        running = size * running if isinstance(size, int) and isinstance(running, int) else env.simplify(sympy.sympify(size) * running)
    return True


def contiguous(env: SymbolEnv, meta: TensorMeta) -> bool:
    """True when ``meta`` is row-major contiguous at every admitted size (size-1 dims ignored)."""
    running: SymSize = 1
    for size, stride in reversed(list(zip(meta.shape, meta.stride))):
        if _is_one(env, size):
            continue
        if not same_size(env, stride, running):
            return False
        running = size * running if isinstance(size, int) and isinstance(running, int) else env.simplify(sympy.sympify(size) * running)
    return True
