"""Max pooling's indices cross to the backward as int8 window offsets, with eager's gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from aot_models import keeping

from ptc_aot import aot
from ptc_spec import META_KEY

# (kernel, stride, padding, dilation, ceil_mode)
POOLS = {
    "resnet_stem": (3, 2, 1, 1, False),
    "2x2": (2, 2, 0, 1, False),
    "ceil": (3, 2, 0, 1, True),
    "dilated": ((3, 2), (1, 2), (1, 0), (2, 3), False),
    "overlapping": (4, 1, 2, 1, False),
}


def _saved(graphs: dict[str, torch.fx.GraphModule], num_outputs: int) -> list[Any]:
    (out,) = [n for n in graphs["forward"].graph.nodes if n.op == "output"]
    return [a.meta[META_KEY] for a in out.args[0][num_outputs:]]


def _run(fn: Any, inputs: list[torch.Tensor], num_outputs: int = 1) -> list[Any]:
    graphs: dict[str, torch.fx.GraphModule] = {}

    compiled = aot(fn, inputs, fw_compiler=keeping(graphs, "forward"), bw_compiler=keeping(graphs, "backward"))
    got, expected = compiled(*inputs), fn(*inputs)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    flat_got = got if isinstance(got, tuple) else (got,)
    flat_expected = expected if isinstance(expected, tuple) else (expected,)
    loss_got = sum(g.float().sum() for g in flat_got if g.is_floating_point())
    loss_expected = sum(e.float().sum() for e in flat_expected if e.is_floating_point())
    # Same pooled positions, same gradients, bit for bit: ReLU's zeros make ties everywhere.
    torch.testing.assert_close(torch.autograd.grad(loss_got, inputs), torch.autograd.grad(loss_expected, inputs), rtol=0, atol=0)
    return _saved(graphs, num_outputs)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_max_pool_saves_int8_window_offsets_and_trains_as_eager(pool: str, dtype: torch.dtype, channels_last: bool) -> None:
    kernel, stride, padding, dilation, ceil_mode = POOLS[pool]

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(x * w), kernel, stride, padding, dilation, ceil_mode).tanh()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 13, 11, generator=g).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(3, 1, 1, generator=g).to(dtype)
    saved = _run(fn, [x.requires_grad_(), w.requires_grad_()])
    pooled = F.max_pool2d(x.detach(), kernel, stride, padding, dilation, ceil_mode).shape
    assert [m.dtype for m in saved if tuple(m.shape) == tuple(pooled) and not m.dtype.is_floating_point] == [torch.int8]


def test_indices_the_caller_receives_stay_int64_indices() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, indices = F.max_pool2d(x.exp(), 3, 2, 1, return_indices=True)
        return out, indices

    x = torch.randn(2, 3, 9, 9).requires_grad_()
    saved = _run(fn, [x], num_outputs=2)
    assert torch.int8 not in [m.dtype for m in saved]
