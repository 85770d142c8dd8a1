# torch.ops overloads are untyped, so every aten call returns Any.
"""Factory ops (zeros, ones, *_like, new_*, arange, fill, copy) mapped onto full/empty_strided/arange."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..dims import at_least_one, dense_order, same
from ..promotion import cast
from ..registry import register_decomposition

aten = torch.ops.aten


def _layout_of(x: torch.Tensor, memory_format: torch.memory_format | None) -> list[int]:
    """The dim order eager gives a tensor made like ``x`` with ``memory_format``."""
    if memory_format in (None, torch.preserve_format):
        order = dense_order(list(x.shape), list(x.stride()))
        if order is not None:
            return order
    if memory_format == torch.channels_last and x.dim() == 4:
        return [0, 2, 3, 1]
    return list(range(x.dim()))


def full_like_layout(x: torch.Tensor, value: Any, dtype: torch.dtype, device: torch.device, memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """A tensor of x's shape filled with ``value``, laid out like ``x`` (as eager's *_like ops)."""
    order = _layout_of(x, memory_format)
    if order == list(range(x.dim())):
        return aten.full.default(list(x.shape), value, dtype=dtype, device=device)
    # A full tensor in the permuted shape, permuted back, has exactly x's strides.
    filled = aten.full.default([x.shape[d] for d in order], value, dtype=dtype, device=device)
    inverse = [order.index(d) for d in range(x.dim())]
    return aten.permute.default(filled, inverse)


def _like(value: Any) -> Any:
    def decomposition(
        self: torch.Tensor,
        *,
        dtype: torch.dtype | None = None,
        layout: Any = None,
        device: torch.device | None = None,
        pin_memory: bool | None = None,
        memory_format: torch.memory_format | None = None,
    ) -> torch.Tensor:
        return full_like_layout(self, value, dtype or self.dtype, device or self.device, memory_format)

    return decomposition


zeros_like = register_decomposition(aten.zeros_like.default)(_like(0))
ones_like = register_decomposition(aten.ones_like.default)(_like(1))


@register_decomposition(aten.full_like.default)
def full_like(
    self: torch.Tensor,
    fill_value: Any,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """A tensor like self filled with ``fill_value``."""
    return full_like_layout(self, fill_value, dtype or self.dtype, device or self.device, memory_format)


@register_decomposition(aten.empty_like.default)
def empty_like(
    self: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """An uninitialised tensor laid out like self."""
    order = _layout_of(self, memory_format)
    strides: list[int | torch.SymInt] = [0] * self.dim()
    running: int | torch.SymInt = 1
    for d in reversed(order):
        strides[d] = running
        running = running * at_least_one(self.shape[d])
    return aten.empty_strided.default(list(self.shape), strides, dtype=dtype or self.dtype, device=device or self.device)


def _factory(value: Any) -> Any:
    def decomposition(
        size: Sequence[int],
        *,
        dtype: torch.dtype | None = None,
        layout: Any = None,
        device: torch.device | None = None,
        pin_memory: bool | None = None,
    ) -> torch.Tensor:
        return aten.full.default(list(size), value, dtype=dtype or torch.get_default_dtype(), device=device)

    return decomposition


zeros = register_decomposition(aten.zeros.default)(_factory(0))
ones = register_decomposition(aten.ones.default)(_factory(1))


def _new(value: Any) -> Any:
    def decomposition(
        self: torch.Tensor,
        size: Sequence[int],
        *,
        dtype: torch.dtype | None = None,
        layout: Any = None,
        device: torch.device | None = None,
        pin_memory: bool | None = None,
    ) -> torch.Tensor:
        return aten.full.default(list(size), value, dtype=dtype or self.dtype, device=device or self.device)

    return decomposition


new_zeros = register_decomposition(aten.new_zeros.default)(_new(0))
new_ones = register_decomposition(aten.new_ones.default)(_new(1))


@register_decomposition(aten.new_full.default)
def new_full(
    self: torch.Tensor,
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """A tensor of ``size`` filled with ``fill_value``, self's dtype and device by default."""
    return aten.full.default(list(size), fill_value, dtype=dtype or self.dtype, device=device or self.device)


@register_decomposition(aten.new_empty.default)
def new_empty(
    self: torch.Tensor,
    size: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """An uninitialised contiguous tensor of ``size``."""
    return aten.empty.memory_format(list(size), dtype=dtype or self.dtype, device=device or self.device)


@register_decomposition(aten.new_empty_strided.default)
def new_empty_strided(
    self: torch.Tensor,
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """An uninitialised tensor with explicit strides."""
    return aten.empty_strided.default(list(size), list(stride), dtype=dtype or self.dtype, device=device or self.device)


def _arange_dtype(start: Any, end: Any, step: Any) -> torch.dtype:
    if any(isinstance(v, (float, torch.SymFloat)) for v in (start, end, step)):
        return torch.get_default_dtype()
    return torch.int64


@register_decomposition(aten.arange.default)
def arange(
    end: Any,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """0, 1, ... < end."""
    return aten.arange.start_step(0, end, 1, dtype=dtype or _arange_dtype(0, end, 1), device=device)


@register_decomposition(aten.arange.start)
def arange_start(
    start: Any,
    end: Any,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """start, start + 1, ... < end."""
    return aten.arange.start_step(start, end, 1, dtype=dtype or _arange_dtype(start, end, 1), device=device)


@register_decomposition(aten.fill.Scalar)
def fill_scalar(self: torch.Tensor, value: Any) -> torch.Tensor:
    """A tensor like self, every element ``value``."""
    return full_like_layout(self, value, self.dtype, self.device)


@register_decomposition(aten.fill.Tensor)
def fill_tensor(self: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A tensor like self, every element the 0-dim ``value``."""
    spread = aten.expand.default(cast(value, self.dtype), list(self.shape))
    return aten.clone.default(spread, memory_format=torch.contiguous_format)


@register_decomposition(aten.zero.default)
def zero(self: torch.Tensor) -> torch.Tensor:
    """A tensor like self filled with zeros."""
    return full_like_layout(self, 0, self.dtype, self.device)


@register_decomposition(aten.copy.default)
def copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """src's values broadcast into self's shape, dtype and device."""
    value = src
    if src.dtype != self.dtype or src.device != self.device:
        value = aten._to_copy.default(src, dtype=self.dtype, device=self.device)
    if value.dim() != self.dim() or not all(same(a, b) for a, b in zip(value.shape, self.shape)):
        value = aten.expand.default(value, list(self.shape))
    return aten.clone.default(value)

