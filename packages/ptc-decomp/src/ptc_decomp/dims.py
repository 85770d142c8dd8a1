# torch.ops overloads are untyped, so every aten call returns Any.
"""Dimension bookkeeping shared by decompositions: wrapping dims, reduction dims, view strides."""

from __future__ import annotations

from collections.abc import Sequence

import torch

aten = torch.ops.aten


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` made non-negative for a tensor of ``ndim`` dims (0-dim tensors accept 0 and -1)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def reduction_dims(dim: int | Sequence[int] | None, ndim: int) -> list[int]:
    """The sorted, wrapped dims a reduction covers; None or [] mean every dim."""
    if dim is None:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(ndim))
    return sorted({wrap_dim(d, ndim) for d in dims}) if ndim else []


def numel_of(shape: Sequence[int]) -> int:
    """The product of ``shape``."""
    n = 1
    for s in shape:
        n *= int(s)
    return n


def infer_size(shape: Sequence[int], numel: int) -> list[int]:
    """``shape`` with its one ``-1`` replaced so the sizes multiply to ``numel``."""
    sizes = [int(s) for s in shape]
    if sizes.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in sizes:
        known = numel_of([s for s in sizes if s != -1])
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        sizes[sizes.index(-1)] = numel // known
    elif numel_of(sizes) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return sizes


def view_strides(shape: Sequence[int], stride: Sequence[int], new_shape: Sequence[int]) -> list[int] | None:
    """Strides that let a tensor of (shape, stride) be viewed as ``new_shape``, or None when it must be copied."""
    if numel_of(shape) == 0:
        return _contiguous(new_shape)
    old_shape, old_stride = (list(shape), list(stride)) if shape else ([1], [1])
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    # Old dims group into chunks that are contiguous among themselves; walking from the last
    # dim, each chunk must be covered exactly by a run of new dims, which take strides
    # inside that chunk.
    base = old_stride[-1]
    chunk_numel = 1
    view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        chunk_numel *= old_shape[d]
        chunk_ends = d == 0 or (old_shape[d - 1] != 1 and old_stride[d - 1] != chunk_numel * base)
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < chunk_numel or new_shape[view_d] == 1):
            out[view_d] = view_numel * base
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != chunk_numel:
            return None
        if d > 0:
            base = old_stride[d - 1]
            chunk_numel = 1
            view_numel = 1
    return out if view_d == -1 else None


def _contiguous(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    running = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = running
        running *= max(int(shape[i]), 1)
    return strides


def reshape(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``x`` reshaped: a view when the strides allow one (as eager's reshape), else a contiguous copy viewed."""
    sizes = infer_size(shape, x.numel())
    if list(x.shape) == sizes:
        return aten.alias.default(x)
    if view_strides(list(x.shape), list(x.stride()), sizes) is None:
        x = aten.clone.default(x, memory_format=torch.contiguous_format)
    return aten.view.default(x, sizes)


def keepdim_shape(shape: Sequence[int], dims: Sequence[int]) -> list[int]:
    """``shape`` with each of ``dims`` set to 1."""
    return [1 if i in dims else int(s) for i, s in enumerate(shape)]
