# torch.ops overloads are untyped, so every aten call returns Any.
"""Reflection and replication padding (1-D, 2-D) and their backward ops, as gathers and scatter-adds."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


def _source_index(size: int, before: int, after: int, reflect: bool, device: torch.device) -> torch.Tensor:
    """For each padded position along one dim, the input index it copies."""
    pos = aten.sub.Tensor(aten.arange.start_step(0, size + before + after, 1, dtype=torch.int64, device=device), before)
    if not reflect:
        return aten.clamp.default(pos, 0, size - 1)
    # Reflection without repeating the edge: fold |i| into [0, size - 1] mirrored at the end.
    folded = aten.abs.default(pos)
    return aten.sub.Tensor(size - 1, aten.abs.default(aten.sub.Tensor(folded, size - 1)))


def _indices(self_shape: Sequence[int], padding: Sequence[int], reflect: bool, device: torch.device) -> list[torch.Tensor | None]:
    dims = len(padding) // 2
    rank = len(self_shape)
    indices: list[torch.Tensor | None] = [None] * (rank - dims)
    for k in range(dims):
        d = rank - dims + k
        # padding lists the last dim first: (left, right, top, bottom).
        before, after = padding[2 * (dims - 1 - k)], padding[2 * (dims - 1 - k) + 1]
        idx = _source_index(self_shape[d], before, after, reflect, device)
        indices.append(aten.view.default(idx, [-1] + [1] * (dims - 1 - k)))
    return indices


def _pad(self: torch.Tensor, padding: Sequence[int], reflect: bool) -> torch.Tensor:
    return aten.index.Tensor(self, _indices(list(self.shape), padding, reflect, self.device))


def _pad_backward(grad_output: torch.Tensor, self: torch.Tensor, padding: Sequence[int], reflect: bool) -> torch.Tensor:
    g = upcast(grad_output)
    zeros = aten.full.default(list(self.shape), 0, dtype=g.dtype, device=g.device)
    summed = aten.index_put.default(zeros, _indices(list(self.shape), padding, reflect, g.device), g, True)
    return cast(summed, grad_output.dtype)


@register_decomposition(aten.reflection_pad1d.default, aten.reflection_pad2d.default)
def reflection_pad(self: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Pad by mirroring the input at its edges (edge not repeated)."""
    return _pad(self, padding, reflect=True)


@register_decomposition(aten.replication_pad1d.default, aten.replication_pad2d.default)
def replication_pad(self: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Pad by repeating the edge values."""
    return _pad(self, padding, reflect=False)


@register_decomposition(aten.reflection_pad1d_backward.default, aten.reflection_pad2d_backward.default)
def reflection_pad_backward(grad_output: torch.Tensor, self: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Each padded gradient added back to the input position it mirrors."""
    return _pad_backward(grad_output, self, padding, reflect=True)


@register_decomposition(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default)
def replication_pad_backward(grad_output: torch.Tensor, self: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Each padded gradient added back to the edge it repeats."""
    return _pad_backward(grad_output, self, padding, reflect=False)
