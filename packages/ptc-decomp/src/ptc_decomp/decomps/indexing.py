# torch.ops overloads are untyped, so every aten call returns Any.
"""Indexing ops outside core/1 (embedding, index_add/fill/copy, one_hot, *_backward of slicing) via index/scatter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..dims import reshape, wrap_dim
from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.embedding.default)
def embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False, sparse: bool = False) -> torch.Tensor:
    """Rows of ``weight`` picked by ``indices``."""
    if indices.dim() == 1:
        return aten.index_select.default(weight, 0, indices)
    return aten.index.Tensor(weight, [indices])


@register_decomposition(aten.embedding_dense_backward.default)
def embedding_dense_backward(
    grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int, scale_grad_by_freq: bool
) -> torch.Tensor:
    """Gradient rows summed into the weight rows they came from (none into padding_idx)."""
    width = grad_output.shape[-1]
    flat_index = reshape(indices, [-1])
    grad = reshape(upcast(grad_output), [-1, width])
    if padding_idx >= 0:
        keep = aten.unsqueeze.default(aten.ne.Scalar(flat_index, padding_idx), 1)
        grad = aten.mul.Tensor(grad, keep)
    if scale_grad_by_freq:
        ones = aten.full.default([flat_index.shape[0]], 1, dtype=grad.dtype, device=grad.device)
        counts = aten.index_put.default(aten.full.default([num_weights], 0, dtype=grad.dtype, device=grad.device), [flat_index], ones, True)
        grad = aten.div.Tensor(grad, aten.unsqueeze.default(aten.index.Tensor(counts, [flat_index]), 1))
    zeros = aten.full.default([num_weights, width], 0, dtype=grad.dtype, device=grad.device)
    return cast(aten.index_put.default(zeros, [flat_index], grad, True), grad_output.dtype)


def _leading(dim: int) -> list[torch.Tensor | None]:
    return [None] * dim


@register_decomposition(aten.index_add.default)
def index_add(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1) -> torch.Tensor:
    """self with alpha * source's slices added at ``index`` along ``dim``."""
    d = wrap_dim(dim, self.dim())
    values = source if alpha == 1 else aten.mul.Tensor(source, alpha)
    if self.dim() == 0:
        flat = aten.index_put.default(reshape(self, [1]), [reshape(index, [-1])], reshape(values, [-1]), True)
        return aten.view.default(flat, [])
    return aten.index_put.default(self, [*_leading(d), index], values, True)


@register_decomposition(aten.index_copy.default)
def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """self with source's slices written at ``index`` along ``dim``."""
    d = wrap_dim(dim, self.dim())
    if self.dim() == 0:
        return aten.clone.default(reshape(source, []))
    return aten.index_put.default(self, [*_leading(d), index], source, False)


@register_decomposition(aten.index_fill.int_Scalar)
def index_fill(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> torch.Tensor:
    """self with ``value`` written at ``index`` along ``dim``."""
    d = wrap_dim(dim, self.dim())
    fill = aten.scalar_tensor.default(value, dtype=self.dtype, device=self.device)
    if self.dim() == 0:
        return aten.clone.default(fill)
    return aten.index_put.default(self, [*_leading(d), reshape(index, [-1])], fill, False)


@register_decomposition(aten.select_backward.default)
def select_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int) -> torch.Tensor:
    """Zeros of the input's shape with the gradient written at ``index``."""
    zeros = aten.full.default(list(input_sizes), 0, dtype=grad_output.dtype, device=grad_output.device)
    return aten.select_scatter.default(zeros, grad_output, dim, index)


@register_decomposition(aten.slice_backward.default)
def slice_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int) -> torch.Tensor:
    """Zeros of the input's shape with the gradient written into the slice."""
    zeros = aten.full.default(list(input_sizes), 0, dtype=grad_output.dtype, device=grad_output.device)
    return aten.slice_scatter.default(zeros, grad_output, dim, start, end, step)


@register_decomposition(aten.one_hot.default)
def one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """int64 one-hot rows; num_classes must be given (inferring it needs the data)."""
    if num_classes < 0:
        raise RuntimeError("one_hot with num_classes=-1 needs the tensor's values; pass num_classes explicitly")
    classes = aten.arange.start_step(0, num_classes, 1, dtype=self.dtype, device=self.device)
    hits = aten.eq.Tensor(aten.unsqueeze.default(self, -1), classes)
    return cast(hits, torch.int64)


@register_decomposition(aten._unsafe_index.Tensor)
def unsafe_index(self: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Advanced indexing without bounds checks: the checked form computes the same values."""
    return aten.index.Tensor(self, list(indices))


@register_decomposition(aten._unsafe_index_put.default)
def unsafe_index_put(self: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    """index_put without bounds checks."""
    return aten.index_put.default(self, list(indices), values, accumulate)


@register_decomposition(aten.take_along_dim.default)
def take_along_dim(self: torch.Tensor, indices: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """gather along ``dim`` after broadcasting self and indices (flattened when dim is None)."""
    if dim is None:
        return aten.gather.default(reshape(self, [-1]), 0, reshape(indices, [-1]))
    d = wrap_dim(dim, self.dim())
    self_shape, index_shape = list(self.shape), list(indices.shape)
    self_shape[d] = index_shape[d] = 1
    common = list(torch.broadcast_shapes(torch.Size(self_shape), torch.Size(index_shape)))
    self_target, index_target = list(common), list(common)
    self_target[d], index_target[d] = self.shape[d], indices.shape[d]
    return aten.gather.default(aten.expand.default(self, self_target), d, aten.expand.default(indices, index_target))


@register_decomposition(aten.diagonal_backward.default)
def diagonal_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int, dim2: int) -> torch.Tensor:
    """Zeros of the input's shape with the gradient written along the diagonal."""
    sizes = list(input_sizes)
    zeros = aten.full.default(sizes, 0, dtype=grad_output.dtype, device=grad_output.device)
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(sizes[i + 1], 1)
    a, b = wrap_dim(dim1, len(sizes)), wrap_dim(dim2, len(sizes))
    start = offset * strides[b] if offset >= 0 else -offset * strides[a]
    view_sizes = [s for i, s in enumerate(sizes) if i not in (a, b)] + [grad_output.shape[-1]]
    view_strides = [s for i, s in enumerate(strides) if i not in (a, b)] + [strides[a] + strides[b]]
    if grad_output.shape[-1] == 0:
        return zeros
    return aten.as_strided_scatter.default(zeros, grad_output, view_sizes, view_strides, start)
