"""Arguments a call does not read in its mode are not saved for the backward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from aot_models import keeping

from ptc_aot import aot
from ptc_aot.api import SAVED_OUTPUTS_KEY

aten = torch.ops.aten


def _batch_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.batch_norm(x, mean, var, w, b, True, 0.1, 1e-5).tanh()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_training_batch_norm_saves_no_running_statistics(dtype: torch.dtype) -> None:
    graphs: dict[str, torch.fx.GraphModule] = {}

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, 5, generator=g).to(dtype).requires_grad_()
    w = torch.rand(3, generator=g).to(dtype).requires_grad_()
    b = torch.randn(3, generator=g).to(dtype).requires_grad_()
    mean, var = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    compiled = aot(_batch_norm, [x, w, b, mean, var], fw_compiler=keeping(graphs, "forward"), bw_compiler=keeping(graphs, "backward"))
    eager_mean, eager_var = mean.clone(), var.clone()
    expected = _batch_norm(x, w, b, eager_mean, eager_var)
    got = compiled(x, w, b, mean, var)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close((mean, var), (eager_mean, eager_var))
    grads = torch.autograd.grad(got.sum(), [x, w, b])
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), [x, w, b]))
    (call,) = [n for n in graphs["backward"].graph.nodes if n.target is aten.native_batch_norm_backward.default]
    assert call.args[3] is None and call.args[4] is None
    # Saved: the input, the weight, the batch's mean and inverse deviation, the tanh output.
    assert graphs["forward"].meta[SAVED_OUTPUTS_KEY] == 5


@pytest.mark.parametrize(
    ("op", "args", "dropped"),
    [
        # cuDNN's and MIOpen's backwards take the saved mean and inverse deviation, never the running ones.
        (aten.cudnn_batch_norm_backward.default, ("x", "g", "w", "rm", "rv", "sm", "sv", 1e-5, "r"), True),
        (aten.miopen_batch_norm_backward.default, ("x", "g", "w", "rm", "rv", "sm", "sv", 1e-5), True),
        (aten.batch_norm_backward.default, ("g", "x", "w", "rm", "rv", "sm", "sv", True, 1e-5, [True] * 3, "r"), True),
        # Without update (evaluation mode) the running statistics are what it normalized by.
        (aten.batch_norm_backward.default, ("g", "x", "w", "rm", "rv", "sm", "sv", False, 1e-5, [True] * 3, "r"), False),
        (aten.native_batch_norm_backward.default, ("g", "x", "w", "rm", "rv", "sm", "sv", False, 1e-5, [True] * 3), False),
    ],
)
def test_running_statistics_are_dropped_exactly_where_the_backward_ignores_them(op: Any, args: tuple[Any, ...], dropped: bool) -> None:
    from ptc_aot.ignored_args import drop_ignored_arguments

    graph = torch.fx.Graph()
    nodes = {name: graph.placeholder(name) for name in ("x", "g", "w", "rm", "rv", "sm", "sv", "r")}
    call = graph.call_function(op, tuple(nodes.get(a, a) if isinstance(a, str) else a for a in args))
    graph.output(call)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert drop_ignored_arguments(gm) == int(dropped)
    assert (call.args[3], call.args[4]) == ((None, None) if dropped else (nodes["rm"], nodes["rv"]))
