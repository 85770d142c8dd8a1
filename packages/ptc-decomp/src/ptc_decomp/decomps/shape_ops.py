# torch.ops overloads are untyped, so every aten call returns Any.
"""Copying shape ops: stack, repeat, flip, roll, tril/triu, expand copies, as core cat/slice/index ops."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dims import reshape, wrap_dim
from ..registry import register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.stack.default)
def stack(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Tensors of one shape joined along a new dim."""
    d = wrap_dim(dim, tensors[0].dim() + 1)
    return aten.cat.default([aten.unsqueeze.default(t, d) for t in tensors], d)


@register_decomposition(aten.hstack.default)
def hstack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate along dim 1 (dim 0 for vectors)."""
    parts = [reshape(t, [1]) if t.dim() == 0 else t for t in tensors]
    return aten.cat.default(parts, 0 if parts[0].dim() == 1 else 1)


@register_decomposition(aten.repeat.default)
def repeat(self: torch.Tensor, repeats: Sequence[int]) -> torch.Tensor:
    """self tiled ``repeats`` times along each dim (leading repeats add dims)."""
    extra = len(repeats) - self.dim()
    if extra < 0:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    shape = [1] * extra + list(self.shape)
    x = reshape(self, shape)
    # Interleave a broadcast dim of size r before each dim of size s, then merge each pair.
    paired: list[int] = []
    spread: list[int] = []
    for r, s in zip(repeats, shape):
        paired += [1, s]
        spread += [r, s]
    tiled = aten.expand.default(reshape(x, paired), spread)
    return reshape(aten.clone.default(tiled, memory_format=torch.contiguous_format), [r * s for r, s in zip(repeats, shape)])


@register_decomposition(aten.flip.default)
def flip(self: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """self with the order of ``dims`` reversed."""
    out = self
    for d in {wrap_dim(d, self.dim()) for d in dims} if self.dim() else []:
        n = self.shape[d]
        reverse = aten.arange.start_step(n - 1, -1, -1, dtype=torch.int64, device=self.device)
        out = aten.index_select.default(out, d, reverse)
    return out if out is not self else aten.clone.default(self)


@register_decomposition(aten.roll.default)
def roll(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> torch.Tensor:
    """self rotated by ``shifts`` along ``dims`` (flattened when dims is empty)."""
    if not dims:
        flat = reshape(self, [-1])
        return reshape(roll(flat, shifts, [0]), list(self.shape))
    out = self
    for shift, dim in zip(shifts, dims):
        d = wrap_dim(dim, self.dim())
        n = self.shape[d]
        if isinstance(n, torch.SymInt):
            # A symbolic length: where the cut falls (shift % n) is a size expression whose
            # slices would guard it; a gather of (i - shift) % n computed on tensors holds at every length.
            source = aten.remainder.Scalar(aten.arange.start_step(-shift, n - shift, 1, dtype=torch.int64, device=self.device), n)
            out = aten.index_select.default(out, d, source)
            continue
        if n == 0:
            continue
        s = shift % n
        if s:
            out = aten.cat.default([aten.slice.Tensor(out, d, n - s, n), aten.slice.Tensor(out, d, 0, n - s)], d)
    return out if out is not self else aten.clone.default(self)


def _triangle(self: torch.Tensor, diagonal: int, lower: bool) -> torch.Tensor:
    rows, cols = self.shape[-2], self.shape[-1]
    r = aten.unsqueeze.default(aten.arange.start_step(0, rows, 1, dtype=torch.int64, device=self.device), 1)
    c = aten.arange.start_step(0, cols, 1, dtype=torch.int64, device=self.device)
    offset = aten.sub.Tensor(c, r)
    keep = aten.le.Scalar(offset, diagonal) if lower else aten.ge.Scalar(offset, diagonal)
    zero = aten.scalar_tensor.default(0, dtype=self.dtype, device=self.device)
    return aten.where.self(keep, self, zero)


@register_decomposition(aten.tril.default)
def tril(self: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    """The lower triangle of the last two dims, zeros above ``diagonal``."""
    return _triangle(self, diagonal, lower=True)


@register_decomposition(aten.triu.default)
def triu(self: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    """The upper triangle of the last two dims, zeros below ``diagonal``."""
    return _triangle(self, diagonal, lower=False)


@register_decomposition(aten.expand_copy.default)
def expand_copy(self: torch.Tensor, size: Sequence[int], *, implicit: bool = False) -> torch.Tensor:
    """A fresh tensor holding self broadcast to ``size``."""
    return aten.clone.default(aten.expand.default(self, list(size)), memory_format=torch.contiguous_format)


@register_decomposition(aten.permute_copy.default)
def permute_copy(self: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """A fresh tensor holding self permuted."""
    return aten.clone.default(aten.permute.default(self, list(dims)), memory_format=torch.contiguous_format)


@register_decomposition(aten.view_copy.default)
def view_copy(self: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """A fresh tensor holding self reshaped."""
    return aten.clone.default(reshape(self, list(size)), memory_format=torch.contiguous_format)


@register_decomposition(aten.pixel_shuffle.default)
def pixel_shuffle(self: torch.Tensor, upscale_factor: int) -> torch.Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    r = upscale_factor
    *batch, c, h, w = self.shape
    x = reshape(self, [*batch, c // (r * r), r, r, h, w])
    n = len(batch)
    order = [*range(n), n, n + 3, n + 1, n + 4, n + 2]
    moved = aten.clone.default(aten.permute.default(x, order), memory_format=torch.contiguous_format)
    return aten.view.default(moved, [*batch, c // (r * r), h * r, w * r])


@register_decomposition(aten.pixel_unshuffle.default)
def pixel_unshuffle(self: torch.Tensor, downscale_factor: int) -> torch.Tensor:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    r = downscale_factor
    *batch, c, h, w = self.shape
    x = reshape(self, [*batch, c, h // r, r, w // r, r])
    n = len(batch)
    order = [*range(n), n, n + 2, n + 4, n + 1, n + 3]
    moved = aten.clone.default(aten.permute.default(x, order), memory_format=torch.contiguous_format)
    return aten.view.default(moved, [*batch, c * r * r, h // r, w // r])
