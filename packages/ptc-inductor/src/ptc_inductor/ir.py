"""The loop-level IR: layouts, buffers, computed nodes (pointwise, reduction) and extern kernels.

A computed node's contents are its ``body``: a function of the loop variables that calls the
virtual ``ops`` handler (load, compute, store). Views never appear here: they are index
remappings folded into the loaders at lowering time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .indexing import Expr, contiguous_strides, linear_index, rvar, simplify_with_ranges, xvar
from .sizes import Size, equal, normalize
from .virtualized import current_handler, set_ops_handler

Body = Callable[[Sequence[Expr], Sequence[Expr]], None]
Loader = Callable[[Sequence[Expr]], Any]

REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "welford", "sumexp")
SPLITTABLE_REDUCTIONS = ("sum", "max", "min")
"""Reductions whose partial results over chunks combine with the same reduction (on GPUs, long
column reductions are split into such partials)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a buffer's elements live: dtype, device, size, stride, offset.

    A flexible layout was chosen by the compiler (row-major) and may be reused freely; a fixed
    one is dictated from outside (graph inputs, outputs with eager's strides, extern results).
    """

    dtype: torch.dtype
    device: torch.device
    size: tuple[Size, ...]
    stride: tuple[Size, ...]
    offset: Size = 0
    flexible: bool = False

    def index(self, idx: Sequence[Expr]) -> Expr:
        """The storage index (relative to the data pointer) of the element at ``idx``."""
        return linear_index(idx, self.stride, self.offset)

    @property
    def numel(self) -> Size:
        """Number of logical elements."""
        return normalize(math.prod(self.size))

    @property
    def storage_numel(self) -> Size:
        """Number of storage elements the layout reaches (at least 1)."""
        if any(s == 0 for s in self.size):
            return max(self.offset, 1) if isinstance(self.offset, int) else self.offset
        # Symbolic sizes are at least 2, so no other dim empties the layout.
        return normalize(1 + self.offset + sum((s - 1) * abs(st) for s, st in zip(self.size, self.stride)))

    @property
    def nbytes(self) -> Size:
        """Bytes of storage the layout needs."""
        return normalize(self.storage_numel * self.dtype.itemsize)

    @property
    def is_contiguous(self) -> bool:
        """True when the strides are row-major (size-1 dims ignored) and there is no offset."""
        want = contiguous_strides(self.size)
        return self.offset == 0 and all(n == 1 or equal(s, w) for n, s, w in zip(self.size, self.stride, want))


def flexible_layout(dtype: torch.dtype, device: torch.device, size: Sequence[Size]) -> Layout:
    """A row-major layout the compiler is free to choose."""
    dims = tuple(normalize(s) for s in size)
    return Layout(dtype, device, dims, contiguous_strides(dims), 0, True)


@dataclass(frozen=True, slots=True)
class Buffer:
    """A named storage: a graph input, a constant, a computed result or an extern result."""

    name: str
    layout: Layout
    kind: str


@dataclass(frozen=True, slots=True)
class ComputedNode:
    """A pointwise or reduction loop nest writing one or more buffers.

    ``ranges`` are the parallel loop sizes (size-1 dims dropped), ``reduction_ranges`` the
    reduced ones; ``body(xs, rs)`` loads, computes and stores through ``ops``.
    """

    name: str
    kind: str
    outputs: tuple[Buffer, ...]
    ranges: tuple[Size, ...]
    reduction_ranges: tuple[Size, ...]
    body: Body = field(compare=False)
    origins: tuple[str, ...] = ()
    reduction_type: str | None = None

    @property
    def is_reduction(self) -> bool:
        """True for reduction nodes."""
        return self.kind == "reduction"


@dataclass(frozen=True, slots=True)
class BufferArg:
    """An extern kernel argument: a (possibly strided) view of a buffer."""

    buffer: str
    size: tuple[Size, ...]
    stride: tuple[Size, ...]
    offset: Size


@dataclass(frozen=True, slots=True)
class ExternNode:
    """A library call through ``torch.ops``; ``args`` hold BufferArg where tensors go.

    A ``fallback`` runs an op outside the op set as its eager kernel. ``aliases`` pairs each
    output that is a view of an input (schema alias info) with the buffer it views: that
    buffer's storage must outlive the output, and the output's storage is never reused.
    """

    name: str
    op: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[Buffer | None, ...]
    multi: bool
    origins: tuple[str, ...] = ()
    fallback: bool = False
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """Names of the buffers the call reads."""
        found: list[str] = []

        def visit(a: Any) -> None:
            if isinstance(a, BufferArg):
                found.append(a.buffer)
            elif isinstance(a, (list, tuple)):
                for item in a:
                    visit(item)

        visit(self.args)
        visit(tuple(v for _, v in self.kwargs))
        return tuple(dict.fromkeys(found))


Node = ComputedNode | ExternNode


@dataclass(frozen=True, slots=True)
class FloatSize:
    """A float computed from sizes (``s1 / 2`` from ``x.size(1) / 2``): exact sympy at compile
    time, a Python float at run time (integer sizes stay plain sympy expressions)."""

    expr: sympy.Expr


@dataclass(frozen=True, slots=True)
class TensorValue:
    """A tensor during lowering: dtype, device, size and a loader from index to ``ops`` value.

    ``view`` is set when the value is a strided view of a realized buffer, so extern kernels
    and outputs can use it without a copy.
    """

    dtype: torch.dtype
    device: torch.device
    size: tuple[Size, ...]
    loader: Loader = field(compare=False)
    view: BufferArg | None = None

    @property
    def ndim(self) -> int:
        """Number of dims."""
        return len(self.size)

    @property
    def numel(self) -> Size:
        """Number of elements."""
        return normalize(math.prod(self.size))


def squeeze_ranges(size: Sequence[Size]) -> tuple[tuple[Size, ...], list[int]]:
    """The loop ranges of ``size`` without its size-1 dims, and the dims they came from."""
    kept = [i for i, s in enumerate(size) if s != 1]
    return tuple(size[i] for i in kept), kept


def expand_index(vars_: Sequence[Expr], kept: Sequence[int], ndim: int) -> list[Expr]:
    """A full index of ``ndim`` dims: ``vars_`` at the ``kept`` dims, 0 elsewhere."""
    full: list[Expr] = [sympy.Integer(0)] * ndim
    for v, d in zip(vars_, kept):
        full[d] = v
    return full


class _IndexSimplifier:
    """Forwards ``ops`` calls, simplifying index arguments with the node's loop ranges."""

    def __init__(self, inner: Any, ranges: dict[sympy.Symbol, Size]) -> None:
        self._inner = inner
        self._ranges = ranges

    def load(self, name: str, index: Expr) -> Any:
        return self._inner.load(name, simplify_with_ranges(index, self._ranges))

    def store(self, name: str, index: Expr, value: Any) -> Any:
        return self._inner.store(name, simplify_with_ranges(index, self._ranges), value)

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> Any:
        return self._inner.index_expr(simplify_with_ranges(expr, self._ranges), dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def with_simplified_indices(body: Body, ranges: Sequence[Size], reduction_ranges: Sequence[Size]) -> Body:
    """Wrap ``body`` so every index it issues is simplified against the loop ranges once built."""
    table: dict[sympy.Symbol, Size] = {xvar(i): s for i, s in enumerate(ranges)}
    table.update({rvar(i): s for i, s in enumerate(reduction_ranges)})

    def run(xs: Sequence[Expr], rs: Sequence[Expr]) -> None:
        with set_ops_handler(_IndexSimplifier(current_handler(), table)):
            body(xs, rs)

    return run
