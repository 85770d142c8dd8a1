"""A user's custom ops (torch.library.custom_op with a fake kernel) compile and run as their eager kernels."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ptc
from ptc.pipeline import STATS
from ptc_spec.testing import compare_with_eager


@torch.library.custom_op("ptc_tests::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """x * scale + y, as an opaque kernel."""
    return x * scale + y


@scale_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.scale = inputs[2]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    return grad * ctx.scale, grad, None


scale_add.register_autograd(_backward, setup_context=_setup)


def _uses_custom_ops(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Called both through torch.ops and through the Python handle, between fused ops.
    return torch.ops.ptc_tests.scale_add(x.sin(), y, 2.0).cos(), scale_add(x, y * 3, 0.5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("grads", [False, True], ids=["inference", "training"])
def test_custom_ops_compile_in_one_graph_and_match_eager(backend: str, grads: bool) -> None:
    STATS.reset()
    compiled = ptc.compile(_uses_custom_ops, backend=backend, fullgraph=True)
    x, y = torch.randn(4, 5, requires_grad=grads), torch.randn(4, 5, requires_grad=grads)
    compare_with_eager(compiled, _uses_custom_ops, x, y, grads=grads)
    if backend == "inductor":
        assert STATS.fallbacks["ptc_tests.scale_add.default"] >= 1
