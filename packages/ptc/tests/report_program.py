"""The small program the report tests compile: a graph break, a recompile, kernels (imported, so its lines are stable)."""

from __future__ import annotations

import torch


def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.relu(x) * 2
    print("halfway")
    return (a + y).softmax(-1)


def run(compiled: object) -> None:
    """First compile at 8 rows, then a recompile at 16 rows."""
    assert callable(compiled)
    compiled(torch.randn(8, 4), torch.randn(8, 4))
    compiled(torch.randn(16, 4), torch.randn(16, 4))
