"""TensorMeta: the metadata of one tensor that travels with every graph node."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import sympy
import torch

if TYPE_CHECKING:
    from .shapes import SymbolEnv

SymSize: TypeAlias = int | sympy.Expr
"""A size, stride or offset: a plain int, or a sympy expression over size symbols."""

Hints = Mapping[sympy.Symbol, int]

META_KEY = "ptc_meta"
"""Key of ``node.meta`` that holds a node's TensorMeta (or a tuple of them, or a scalar)."""


def size_symbol(name: str) -> sympy.Symbol:
    """Return the sympy symbol ptc uses for a symbolic size called ``name``."""
    return sympy.Symbol(name, integer=True, positive=True)


def _concrete(value: SymSize, hints: Hints | None) -> int:
    if isinstance(value, int):
        return value
    expr = sympy.sympify(value)
    if hints:
        expr = expr.subs(hints)
    if not expr.is_Integer:
        missing = sorted(str(s) for s in expr.free_symbols)
        raise ValueError(f"size {value} needs hints for {', '.join(missing)}: pass hints={{symbol: int}}")
    return int(expr)


def contiguous_strides(shape: Iterable[SymSize]) -> tuple[SymSize, ...]:
    """Return the row-major strides eager PyTorch gives a fresh tensor of ``shape``."""
    dims = list(shape)
    strides: list[SymSize] = [1] * len(dims)
    running: SymSize = 1
    for i in range(len(dims) - 1, -1, -1):
        strides[i] = running
        size = dims[i]
        # Eager treats a size-0 or size-1 dim as contributing a factor of its size but never
        # below 1, so strides stay positive; mirror that so layouts compare equal.
        if isinstance(size, int) and isinstance(running, int):
            running = running * max(size, 1)
        else:
            running = _canonical(running * size)
    return tuple(strides)


@functools.lru_cache(maxsize=4096)
def _canonical(expr: sympy.Expr) -> sympy.Expr:
    # Expanded sums of products: cheap (sympy.simplify costs milliseconds per call, and every
    # traced node builds a TensorMeta), and equal sizes built differently compare equal.
    return sympy.expand(expr)


def _as_size(value: object) -> SymSize:
    if isinstance(value, bool):
        raise TypeError("a size cannot be a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        return int(constant) if constant is not None else _as_size(value.node.expr)
    if isinstance(value, sympy.Expr):
        simplified = _canonical(value)
        return int(simplified) if simplified.is_Integer else simplified
    raise TypeError(f"a size must be an int, a sympy expression or a torch.SymInt, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape, strides, dtype, device, requires_grad and storage offset of one tensor."""

    shape: tuple[SymSize, ...]
    stride: tuple[SymSize, ...]
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool = False
    storage_offset: SymSize = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(_as_size(s) for s in self.shape))
        object.__setattr__(self, "stride", tuple(_as_size(s) for s in self.stride))
        object.__setattr__(self, "storage_offset", _as_size(self.storage_offset))
        object.__setattr__(self, "device", torch.device(self.device))
        if len(self.shape) != len(self.stride):
            raise ValueError(f"shape {self.shape} and stride {self.stride} differ in rank")
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {self.dtype!r}")

    @classmethod
    def of(
        cls,
        shape: Iterable[SymSize],
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        requires_grad: bool = False,
    ) -> TensorMeta:
        """Return the metadata of a fresh contiguous tensor."""
        dims = tuple(shape)
        return cls(dims, contiguous_strides(dims), dtype, torch.device(device), requires_grad)

    @classmethod
    def from_tensor(cls, t: torch.Tensor, device: torch.device | None = None) -> TensorMeta:
        """Return the metadata of ``t`` (``device`` overrides it, e.g. for a meta tensor's logical device).

        SymInt sizes, strides and offset (of a tensor traced with symbolic sizes) become their
        sympy expressions; reading them records no guard.
        """
        return cls(
            tuple(_as_size(s) for s in t.shape),
            tuple(_as_size(s) for s in t.stride()),
            t.dtype,
            device if device is not None else t.device,
            t.requires_grad,
            _as_size(t.storage_offset()),
        )

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def is_symbolic(self) -> bool:
        """True when any size, stride or the offset is a sympy expression."""
        parts = (*self.shape, *self.stride, self.storage_offset)
        return any(not isinstance(p, int) for p in parts)

    @property
    def symbols(self) -> frozenset[sympy.Symbol]:
        """The size symbols this metadata mentions."""
        found: set[sympy.Symbol] = set()
        for p in (*self.shape, *self.stride, self.storage_offset):
            if isinstance(p, sympy.Expr):
                found |= {s for s in p.free_symbols if isinstance(s, sympy.Symbol)}
        return frozenset(found)

    def numel(self, hints: Hints | None = None) -> int:
        """Number of elements (symbolic sizes resolved through ``hints``)."""
        n = 1
        for s in self.concrete_shape(hints):
            n *= s
        return n

    def concrete_shape(self, hints: Hints | None = None) -> tuple[int, ...]:
        """The shape with every symbol replaced by its hint."""
        return tuple(_concrete(s, hints) for s in self.shape)

    def concrete_stride(self, hints: Hints | None = None) -> tuple[int, ...]:
        """The strides with every symbol replaced by its hint."""
        return tuple(_concrete(s, hints) for s in self.stride)

    def is_contiguous(self) -> bool:
        """True when the strides are the row-major strides of the shape (size-1 dims ignored)."""
        expected = contiguous_strides(self.shape)
        return all(sz == 1 or st == ex for sz, st, ex in zip(self.shape, self.stride, expected))

    def replace(self, **changes: object) -> TensorMeta:
        """Return a copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_meta_tensor(self, hints: Hints | None = None, *, env: SymbolEnv | None = None) -> torch.Tensor:
        """Return an empty meta-device tensor with exactly this layout.

        Symbolic sizes take their values from ``hints``; with ``env`` instead, they stay
        symbolic: the tensor's sizes, strides and offset are ``torch.SymInt`` over ``env``.
        """
        if env is not None and self.is_symbolic:
            return self._symbolic_meta_tensor(env)
        t = torch.empty_strided(
            self.concrete_shape(hints),
            self.concrete_stride(hints),
            dtype=self.dtype,
            device="meta",
        )
        offset = _concrete(self.storage_offset, hints)
        if offset:
            base = torch.empty(storage_span(t.shape, t.stride(), offset), dtype=self.dtype, device="meta")
            t = base.as_strided(t.shape, t.stride(), offset)
        return t.requires_grad_(self.requires_grad) if self.dtype.is_floating_point or self.dtype.is_complex else t

    def _symbolic_meta_tensor(self, env: SymbolEnv) -> torch.Tensor:
        # symnode imports this module (through shapes), so it is imported where it is used.
        from .symnode import symbolic

        unknown = sorted(s.name for s in self.symbols if s not in env.hints and s not in env.replacements)
        if unknown:
            raise ValueError(f"sizes {', '.join(unknown)} are not symbols of this SymbolEnv: make them with dynamic_meta or env.create_symbol")
        shape = [symbolic(s, env) for s in self.shape]
        stride = [symbolic(s, env) for s in self.stride]
        offset = symbolic(self.storage_offset, env)
        if isinstance(offset, int) and offset == 0:
            t = torch.empty_strided(shape, stride, dtype=self.dtype, device="meta")
        else:
            span = 1 + offset + sum((sz - 1) * st for sz, st in zip(shape, stride))
            t = torch.empty(span, dtype=self.dtype, device="meta").as_strided(shape, stride, offset)
        return t.requires_grad_(self.requires_grad) if self.dtype.is_floating_point or self.dtype.is_complex else t

    def example(
        self, hints: Hints | None = None, seed: int = 0, device: str | torch.device | None = None
    ) -> torch.Tensor:
        """Return a real tensor with this layout, filled with seeded random values.

        Floats are standard normal, integers lie in [-8, 8) (unsigned: [0, 16)), bools are
        random; the values are reproducible for a given ``seed``.
        """
        shape = self.concrete_shape(hints)
        stride = self.concrete_stride(hints)
        offset = _concrete(self.storage_offset, hints)
        where = torch.device(device) if device is not None else self.device
        gen = torch.Generator().manual_seed(seed)
        # Allocate the whole storage the strides reach, so non-contiguous and offset layouts
        # are real views rather than copies.
        flat = _random_values(storage_span(shape, stride, offset), self.dtype, gen).to(where)
        out = flat.as_strided(shape, stride, offset)
        if self.requires_grad and (self.dtype.is_floating_point or self.dtype.is_complex):
            out = out.detach().requires_grad_(True)
        return out


def storage_span(shape: Iterable[int], stride: Iterable[int], offset: int = 0) -> int:
    """Return how many elements of storage a layout reaches (at least 1)."""
    dims = list(shape)
    if any(s == 0 for s in dims):
        return max(offset, 1)
    return 1 + offset + sum((s - 1) * abs(st) for s, st in zip(dims, stride))


def _random_values(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).to(torch.bool)
    if dtype.is_complex:
        return torch.randn(n, dtype=dtype, generator=gen)
    if dtype.is_floating_point:
        return torch.randn(n, generator=gen).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 16, (n,), generator=gen).to(dtype)
    return torch.randint(-8, 8, (n,), generator=gen).to(dtype)


def _dense_order(shape: tuple[int, ...], stride: tuple[int, ...]) -> list[int] | None:
    """Dims from outermost to innermost when ``stride`` is a dense (permuted contiguous) layout, else None."""
    order = sorted(range(len(shape)), key=lambda d: (-stride[d], d))
    expected = contiguous_strides([shape[d] for d in order])
    for d, want in zip(order, expected):
        if shape[d] != 1 and stride[d] != want:
            return None
    return order


def dynamic_meta(meta: TensorMeta, dims: Iterable[int], env: SymbolEnv) -> TensorMeta:
    """``meta`` with a fresh symbol of ``env`` for each dim in ``dims`` (its size is the hint).

    Dims of size 0 or 1 stay static (eager kernels branch on them). Strides become the
    expressions of a dense layout in the same dim order (contiguous, transposed, channels
    last); expanded (stride 0) dims keep stride 0. Other layouts raise ValueError.
    """
    shape = meta.concrete_shape()
    stride = meta.concrete_stride()
    chosen = sorted({d % len(shape) for d in dims}) if shape else []
    broadcast = {d for d in range(len(shape)) if stride[d] == 0 and shape[d] > 1}
    dense = [d for d in range(len(shape)) if d not in broadcast]
    order = _dense_order(tuple(shape[d] for d in dense), tuple(stride[d] for d in dense))
    if order is None:
        raise ValueError(f"a layout with sizes {shape} and strides {stride} is not dense, so its strides cannot follow dynamic sizes")
    sizes: list[SymSize] = list(shape)
    for d in chosen:
        if shape[d] >= 2:
            sizes[d] = env.create_symbol(shape[d])
    strides: list[SymSize] = [0] * len(shape)
    outer_to_inner = [dense[i] for i in order]
    for d, st in zip(outer_to_inner, contiguous_strides([sizes[d] for d in outer_to_inner])):
        # A size-1 dim's stride is arbitrary in eager; keep the tensor's unless it is the derived one.
        strides[d] = st if shape[d] != 1 or _concrete(st, env.hints) == stride[d] else stride[d]
    return meta.replace(shape=tuple(sizes), stride=tuple(strides))
