# torch.ops overloads are untyped, so every aten call returns Any.
"""Random ops rewritten onto ptc.seed / ptc.rand / ptc.randn, which take explicit seeds.

Each random op draws its own seed with ``ptc.seed`` at run time and uses offset 0, so every
draw is independent; backends implement the same distributions, not eager's stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..promotion import cast
from ..registry import register_decomposition

aten = torch.ops.aten
ptc = torch.ops.ptc


def uniform(size: Sequence[int], dtype: torch.dtype, device: torch.device | None) -> torch.Tensor:
    """Uniform [0, 1) samples from a fresh run-time seed."""
    where = torch.device(device) if device is not None else torch.device("cpu")
    seed = ptc.seed.default(where)
    return ptc.rand.default(seed, 0, list(size), dtype=dtype, device=where)


def normal(size: Sequence[int], dtype: torch.dtype, device: torch.device | None) -> torch.Tensor:
    """Standard normal samples from a fresh run-time seed."""
    where = torch.device(device) if device is not None else torch.device("cpu")
    seed = ptc.seed.default(where)
    return ptc.randn.default(seed, 0, list(size), dtype=dtype, device=where)


@register_decomposition(aten.rand.default)
def rand(size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None) -> torch.Tensor:
    """torch.rand."""
    return uniform(size, dtype or torch.get_default_dtype(), device)


@register_decomposition(aten.randn.default)
def randn(size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None) -> torch.Tensor:
    """torch.randn."""
    return normal(size, dtype or torch.get_default_dtype(), device)


@register_decomposition(aten.rand_like.default)
def rand_like(
    self: torch.Tensor, *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None, memory_format: Any = None
) -> torch.Tensor:
    """torch.rand_like."""
    return uniform(list(self.shape), dtype or self.dtype, device or self.device)


@register_decomposition(aten.randn_like.default)
def randn_like(
    self: torch.Tensor, *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None, memory_format: Any = None
) -> torch.Tensor:
    """torch.randn_like."""
    return normal(list(self.shape), dtype or self.dtype, device or self.device)


@register_decomposition(aten.bernoulli.default)
def bernoulli(self: torch.Tensor, *, generator: Any = None) -> torch.Tensor:
    """1 with probability self (elementwise), else 0, in self's dtype."""
    draw = uniform(list(self.shape), torch.float32, self.device)
    return cast(aten.lt.Tensor(draw, self), self.dtype)


@register_decomposition(aten.bernoulli.p)
def bernoulli_p(self: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> torch.Tensor:
    """1 with probability p, else 0, shaped and typed like self."""
    draw = uniform(list(self.shape), torch.float32, self.device)
    return cast(aten.lt.Scalar(draw, p), self.dtype)


@register_decomposition(aten.native_dropout.default)
def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(input * mask / (1 - p), mask), mask true with probability 1 - p; identity when not training."""
    if train is False:
        ones = aten.full.default(list(input.shape), True, dtype=torch.bool, device=input.device)
        return aten.clone.default(input), ones
    draw = uniform(list(input.shape), torch.float32, input.device)
    mask = aten.lt.Scalar(draw, 1 - p)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return aten.mul.Tensor(aten.mul.Tensor(input, mask), scale), mask


@register_decomposition(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """grad * mask * scale."""
    return aten.mul.Tensor(aten.mul.Tensor(grad_output, mask), scale)


@register_decomposition(aten.randint.low)
def randint_low(
    low: int, high: int, size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None
) -> torch.Tensor:
    """Integers uniform in [low, high)."""
    draw = uniform(size, torch.float64, device)
    picked = aten.floor.default(aten.mul.Tensor(draw, high - low))
    picked = aten.clamp.default(aten.add.Tensor(picked, low), low, high - 1)
    return cast(picked, dtype or torch.int64)


@register_decomposition(aten.randint.default)
def randint(
    high: int, size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None, device: torch.device | None = None, pin_memory: bool | None = None
) -> torch.Tensor:
    """Integers uniform in [0, high)."""
    return randint_low(0, high, size, dtype=dtype, device=device)


@register_decomposition(aten.uniform.default)
def uniform_op(self: torch.Tensor, from_: float = 0.0, to: float = 1.0, *, generator: Any = None) -> torch.Tensor:
    """Uniform [from, to) samples shaped and typed like self."""
    draw = uniform(list(self.shape), torch.float32, self.device)
    return cast(aten.add.Tensor(aten.mul.Tensor(draw, to - from_), from_), self.dtype)
