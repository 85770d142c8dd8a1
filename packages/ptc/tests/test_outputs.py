"""ptc.compile returns what eager returns, in every output arrangement, through every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ptc
from ptc_spec.testing import compare_with_eager

BACKENDS = ["eager", "aot_eager", "inductor"]

# Multi-output ops returned unchanged, outputs returned twice or with their views, inputs
# returned as they are or as views, and Python values among the tensors.
CASES: dict[str, Callable[..., Any]] = {
    "sort": lambda x: torch.sort(x, 1),
    "topk": lambda x: torch.topk(x, 3, largest=False),
    "max_dim": lambda x: torch.max(x, 1),
    "max_pool2d_indices": lambda x: F.max_pool2d(x.view(1, 2, 4, 3), 2, return_indices=True),
    "var_mean": lambda x: torch.var_mean(x, 0, correction=0),
    "std_mean": lambda x: torch.std_mean(x, 1),
    "aminmax": lambda x: torch.aminmax(x),
    "cummax": lambda x: torch.cummax(x, 0),
    "sort_values_and_a_product": lambda x: (x.sort(0).indices, x.sort(0).values * x),
    "same_tensor_twice": lambda x: (x.relu(),) * 2,
    "output_and_views": lambda x: (lambda y: (y, y[1], y.t()))(x * 2),
    "input_and_input_view": lambda x: (x, x[:, :2], x.mean()),
    "python_values": lambda x: (None, 7, x.tanh(), {"k": (1.5, x.abs())}),
}


def _aliasing(outputs: Any) -> list[tuple[int, int, bool]]:
    leaves = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    ptrs = [t.untyped_storage().data_ptr() for t in leaves]
    return [(i, j, ptrs[i] == ptrs[j]) for i in range(len(leaves)) for j in range(i + 1, len(leaves))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_equal_eager_with_the_same_aliasing(backend: str, name: str, dtype: torch.dtype) -> None:
    fn = CASES[name]
    x = torch.randn(4, 6).to(dtype)
    compiled = ptc.compile(fn, backend=backend, fullgraph=True)
    actual = compare_with_eager(compiled, fn, x)
    assert _aliasing(actual) == _aliasing(fn(x))


class _RingBuffer(torch.nn.Module):
    """A state buffer written in place and read back through a view held as another attribute
    (a KV cache kept as one tensor with per-layer views)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(2, 6))
        self.first = self.state[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state.add_(x)
        return self.first * 2 + x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_write_to_an_input_is_seen_through_another_input_sharing_its_storage(backend: str, dtype: torch.dtype) -> None:
    eager, model = _RingBuffer().to(dtype), _RingBuffer().to(dtype)
    compiled = ptc.compile(model, backend=backend)
    for step in range(3):
        x = torch.randn(2, 6).to(dtype)
        torch.testing.assert_close(compiled(x), eager(x), msg=f"step {step}")
        torch.testing.assert_close(model.state, eager.state)
