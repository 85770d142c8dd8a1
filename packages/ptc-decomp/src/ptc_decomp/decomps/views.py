# torch.ops overloads are untyped, so every aten call returns Any.
"""Composite views and reshapes mapped onto the core views (view, permute, slice, select, as_strided...)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dims import infer_size, reshape, same, view_strides, wrap_dim
from ..registry import register_decomposition

aten = torch.ops.aten


def _swap(ndim: int, a: int, b: int) -> list[int]:
    order = list(range(ndim))
    order[a], order[b] = order[b], order[a]
    return order


@register_decomposition(aten.t.default)
def t(self: torch.Tensor) -> torch.Tensor:
    """Transpose of a matrix; vectors and scalars are returned as they are."""
    if self.dim() < 2:
        return aten.alias.default(self)
    return aten.permute.default(self, [1, 0])


@register_decomposition(aten.transpose.int)
def transpose(self: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """Swap two dims."""
    if self.dim() == 0:
        return aten.alias.default(self)
    a, b = wrap_dim(dim0, self.dim()), wrap_dim(dim1, self.dim())
    return aten.permute.default(self, _swap(self.dim(), a, b))


@register_decomposition(aten.swapaxes.default)
def swapaxes(self: torch.Tensor, axis0: int, axis1: int) -> torch.Tensor:
    """Swap two dims (numpy names)."""
    return transpose(self, axis0, axis1)


@register_decomposition(aten.swapdims.default)
def swapdims(self: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """Swap two dims."""
    return transpose(self, dim0, dim1)


@register_decomposition(aten.movedim.int)
def movedim(self: torch.Tensor, source: int, destination: int) -> torch.Tensor:
    """Move one dim to another position."""
    n = self.dim()
    if n == 0:
        return aten.alias.default(self)
    src, dst = wrap_dim(source, n), wrap_dim(destination, n)
    order = [d for d in range(n) if d != src]
    order.insert(dst, src)
    return aten.permute.default(self, order)


@register_decomposition(aten.reshape.default)
def reshape_op(self: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A view when the strides allow it, else a contiguous copy viewed."""
    return reshape(self, shape)


@register_decomposition(aten._unsafe_view.default)
def unsafe_view(self: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """A view when the strides allow it, else a contiguous copy viewed (what the op guarantees)."""
    sizes = infer_size(size, self.numel())
    if view_strides(list(self.shape), list(self.stride()), sizes) is None:
        self = aten.clone.default(self, memory_format=torch.contiguous_format)
    return aten.view.default(self, sizes)


@register_decomposition(aten._reshape_alias.default)
def reshape_alias(self: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """The view with the given sizes and strides at self's offset."""
    return aten.as_strided.default(self, size, stride)


@register_decomposition(aten.view_as.default, aten.reshape_as.default)
def view_as(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """self reshaped to other's shape."""
    return reshape(self, list(other.shape))


@register_decomposition(aten.flatten.using_ints)
def flatten(self: torch.Tensor, start_dim: int = 0, end_dim: int = -1) -> torch.Tensor:
    """Merge dims start_dim..end_dim into one."""
    if self.dim() == 0:
        return reshape(self, [1])
    start, end = wrap_dim(start_dim, self.dim()), wrap_dim(end_dim, self.dim())
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return aten.alias.default(self)
    shape = list(self.shape)
    merged = 1
    for s in shape[start : end + 1]:
        merged *= s
    return reshape(self, shape[:start] + [merged] + shape[end + 1 :])


@register_decomposition(aten.unflatten.int)
def unflatten(self: torch.Tensor, dim: int, sizes: Sequence[int]) -> torch.Tensor:
    """Split one dim into ``sizes``."""
    d = wrap_dim(dim, self.dim())
    shape: list[int | torch.SymInt] = list(self.shape)
    inner = infer_size(sizes, shape[d])
    return reshape(self, shape[:d] + inner + shape[d + 1 :])


@register_decomposition(aten.squeeze.default)
def squeeze(self: torch.Tensor) -> torch.Tensor:
    """Drop every size-1 dim."""
    return aten.squeeze.dims(self, [d for d, s in enumerate(self.shape) if s == 1])


@register_decomposition(aten.squeeze.dim)
def squeeze_dim(self: torch.Tensor, dim: int) -> torch.Tensor:
    """Drop ``dim`` if it has size 1."""
    return aten.squeeze.dims(self, [dim])


@register_decomposition(aten.expand_as.default)
def expand_as(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """self broadcast to other's shape."""
    return aten.expand.default(self, list(other.shape))


@register_decomposition(aten.narrow.default)
def narrow(self: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    """``length`` positions of ``dim`` from ``start``."""
    d = wrap_dim(dim, self.dim())
    begin = start + self.shape[d] if start < 0 else start
    return aten.slice.Tensor(self, d, begin, begin + length)


@register_decomposition(aten.split.Tensor)
def split(self: torch.Tensor, split_size: int, dim: int = 0) -> list[torch.Tensor]:
    """Pieces of ``split_size`` along ``dim`` (the last may be shorter)."""
    d = wrap_dim(dim, self.dim())
    length = self.shape[d]
    if split_size == 0 and length == 0:
        return [aten.alias.default(self)]
    # The number of pieces is a Python int (on a symbolic length the op's own meta kernel
    # guarded it); every piece but the last has split_size, the last ends at the length, so
    # no piece's end needs min() (which would guard where the length lies).
    count = max(int((length + split_size - 1) // split_size), 1)
    ends = [(i + 1) * split_size for i in range(count - 1)] + [length]
    return [aten.slice.Tensor(self, d, i * split_size, end) for i, end in enumerate(ends)]


@register_decomposition(aten.split_with_sizes.default)
def split_with_sizes(self: torch.Tensor, split_sizes: Sequence[int], dim: int = 0) -> list[torch.Tensor]:
    """Pieces of the given sizes along ``dim``."""
    d = wrap_dim(dim, self.dim())
    if sum(split_sizes) != self.shape[d]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {self.shape[d]}")
    pieces = []
    start = 0
    for size in split_sizes:
        pieces.append(aten.slice.Tensor(self, d, start, start + size))
        start += size
    return pieces


@register_decomposition(aten.chunk.default)
def chunk(self: torch.Tensor, chunks: int, dim: int = 0) -> list[torch.Tensor]:
    """At most ``chunks`` equal pieces along ``dim``."""
    d = wrap_dim(dim, self.dim())
    size = (self.shape[d] + chunks - 1) // chunks
    return split(self, size, d)


@register_decomposition(aten.unbind.int)
def unbind(self: torch.Tensor, dim: int = 0) -> list[torch.Tensor]:
    """Every position of ``dim``, that dim removed."""
    d = wrap_dim(dim, self.dim())
    return [aten.select.int(self, d, i) for i in range(self.shape[d])]


def _smaller(a: int | torch.SymInt, b: int | torch.SymInt) -> int | torch.SymInt:
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else torch.sym_min(a, b)


def _clamp_low(a: int | torch.SymInt) -> int | torch.SymInt:
    return max(a, 0) if isinstance(a, int) else torch.sym_max(a, 0)


@register_decomposition(aten.diagonal.default)
def diagonal(self: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> torch.Tensor:
    """The diagonal of dims (dim1, dim2) as a strided view, moved to the last dim."""
    n = self.dim()
    a, b = wrap_dim(dim1, n), wrap_dim(dim2, n)
    if a == b:
        raise RuntimeError("diagonal dimensions cannot be identical")
    start = self.storage_offset()
    # sym_min/sym_max keep the length an expression (Min(s0, s1)); Python's min/max would
    # decide which side is smaller and guard it. An empty diagonal's offset is irrelevant,
    # so the offset is applied unless the length is known to be 0.
    if offset >= 0:
        length = _clamp_low(_smaller(self.shape[a], self.shape[b] - offset))
        start += 0 if same(length, 0) else offset * self.stride(b)
    else:
        length = _clamp_low(_smaller(self.shape[a] + offset, self.shape[b]))
        start -= 0 if same(length, 0) else offset * self.stride(a)
    sizes = [s for i, s in enumerate(self.shape) if i not in (a, b)] + [length]
    strides = [s for i, s in enumerate(self.stride()) if i not in (a, b)] + [self.stride(a) + self.stride(b)]
    return aten.as_strided.default(self, sizes, strides, start)
