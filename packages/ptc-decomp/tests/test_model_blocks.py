"""Live traces of model building blocks (forward + backward) decompose to core/1 and match eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ptc_spec
from ptc_decomp import decompose
from ptc_spec import TensorMeta
from ptc_spec.testing import assert_same


class Transformer(nn.Module):
    """Embedding, pre-norm attention (manual softmax or SDPA), GELU MLP and a cross-entropy head."""

    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.emb, self.ln1, self.ln2 = nn.Embedding(20, 8), nn.LayerNorm(8), nn.LayerNorm(8)
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.head, self.sdpa = nn.Linear(8, 20), sdpa

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx.remainder(20))
        q, k, v = (t.unflatten(-1, (2, 4)).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / 2.0
            scores = scores.masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), float("-inf"))
            y = scores.softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(2, 6, 8))
        x = x + self.mlp(self.ln2(x))
        return F.cross_entropy(self.head(x).flatten(0, 1), target.remainder(20).flatten())


class ConvNet(nn.Module):
    """Conv/BatchNorm (eval), depthwise conv, GroupNorm, SiLU, Hardswish, pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.dw, self.gn = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.GroupNorm(2, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.bn(self.conv(x)))
        x = F.max_pool2d(F.hardswish(self.gn(self.dw(x))), 2)
        x = F.avg_pool2d(x, 2, ceil_mode=True) + F.interpolate(x, scale_factor=0.5)
        return F.mse_loss(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), torch.zeros(2, 4))


def _fwd_bwd(module: nn.Module, inputs: list[TensorMeta]) -> tuple[torch.fx.GraphModule, list[Any]]:
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    names = list(state)

    def step(*args: torch.Tensor) -> Any:
        out = torch.func.functional_call(module, dict(zip(names, args[: len(names)])), tuple(args[len(names) :]))
        return (out, *torch.autograd.grad(out, [a for a in args if a.requires_grad]))

    metas = [TensorMeta.of(v.shape, v.dtype, requires_grad=v.requires_grad) for v in state.values()] + inputs
    values = [v.detach().requires_grad_(v.requires_grad) for v in state.values()]
    values += [m.example(seed=i) for i, m in enumerate(inputs)]
    return ptc_spec.trace(step, *metas), values


CASES = {
    "transformer_manual": (lambda: Transformer(False), [TensorMeta.of((2, 6), torch.int64), TensorMeta.of((2, 6), torch.int64)]),
    "transformer_sdpa": (lambda: Transformer(True), [TensorMeta.of((2, 6), torch.int64), TensorMeta.of((2, 6), torch.int64)]),
    "convnet_eval": (lambda: ConvNet().eval(), [TensorMeta.of((2, 3, 8, 8), requires_grad=True)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_block_forward_and_backward_decompose_and_match_eager(name: str) -> None:
    torch.manual_seed(0)
    make, inputs = CASES[name]
    module = make()
    gm, values = _fwd_bwd(module, inputs)
    out = decompose(gm)
    ptc_spec.check(out, "core/1")
    assert_same(out(*values), gm(*values))
