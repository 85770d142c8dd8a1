"""Small models written as functions of their inputs and parameters, with example inputs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _param(*shape: int, gen: torch.Generator, scale: float = 0.2) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).requires_grad_(True)


def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    return F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2)


def mlp_inputs(gen: torch.Generator) -> list[Any]:
    return [torch.randn(8, 16, generator=gen), _param(32, 16, gen=gen), _param(32, gen=gen), _param(4, 32, gen=gen), _param(4, gen=gen)]


def conv_bn_relu(
    x: torch.Tensor, w: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor
) -> torch.Tensor:
    y = F.conv2d(x, w, padding=1)
    return torch.relu(F.batch_norm(y, running_mean, running_var, gamma, beta, training=True, momentum=0.1))


def conv_bn_relu_inputs(gen: torch.Generator) -> list[Any]:
    return [
        torch.randn(2, 3, 6, 6, generator=gen).requires_grad_(True),
        _param(4, 3, 3, 3, gen=gen),
        _param(4, gen=gen),
        _param(4, gen=gen),
        torch.zeros(4),
        torch.ones(4),
    ]


def gpt_block(
    x: torch.Tensor,
    ln1_w: torch.Tensor,
    ln1_b: torch.Tensor,
    w_qkv: torch.Tensor,
    w_proj: torch.Tensor,
    ln2_w: torch.Tensor,
    ln2_b: torch.Tensor,
    w_fc: torch.Tensor,
    w_out: torch.Tensor,
) -> torch.Tensor:
    batch, seq, dim = x.shape
    heads = 2
    h = F.layer_norm(x, (dim,), ln1_w, ln1_b)
    q, k, v = (h @ w_qkv).split(dim, dim=-1)
    q, k, v = (t.view(batch, seq, heads, dim // heads).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(dim // heads)
    mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
    att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(batch, seq, dim)
    x = x + y @ w_proj
    h = F.layer_norm(x, (dim,), ln2_w, ln2_b)
    return x + F.gelu(h @ w_fc) @ w_out


def gpt_block_inputs(gen: torch.Generator, batch: int = 2, seq: int = 8, dim: int = 16) -> list[Any]:
    return [
        torch.randn(batch, seq, dim, generator=gen).requires_grad_(True),
        _param(dim, gen=gen).detach().add_(1).requires_grad_(True),
        _param(dim, gen=gen),
        _param(dim, 3 * dim, gen=gen),
        _param(dim, dim, gen=gen),
        _param(dim, gen=gen).detach().add_(1).requires_grad_(True),
        _param(dim, gen=gen),
        _param(dim, 4 * dim, gen=gen),
        _param(4 * dim, dim, gen=gen),
    ]


def attention_block(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor) -> torch.Tensor:
    h = F.layer_norm(x, (x.shape[-1],), g, b)
    return F.scaled_dot_product_attention(h @ wq, h @ wk, h @ wv, is_causal=True) + x


def attention_inputs(gen: torch.Generator) -> list[Any]:
    return [torch.randn(2, 5, 8, generator=gen).requires_grad_(True), _param(8, gen=gen), _param(8, gen=gen)] + [
        _param(8, 8, gen=gen) for _ in range(3)
    ]


def embedding_cross_entropy(ids: torch.Tensor, targets: torch.Tensor, table: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.embedding(ids, table) @ w, targets)


def embedding_inputs(gen: torch.Generator) -> list[Any]:
    return [torch.randint(0, 10, (12,), generator=gen), torch.randint(0, 7, (12,), generator=gen), _param(10, 6, gen=gen), _param(6, 7, gen=gen)]


MODELS: dict[str, tuple[Callable[..., Any], Callable[[torch.Generator], list[Any]]]] = {
    "mlp": (mlp, mlp_inputs),
    "conv_bn_relu": (conv_bn_relu, conv_bn_relu_inputs),
    "gpt_block": (gpt_block, gpt_block_inputs),
    "attention": (attention_block, attention_inputs),
    "embedding_cross_entropy": (embedding_cross_entropy, embedding_inputs),
}


def make_inputs(name: str, seed: int = 0) -> list[Any]:
    return MODELS[name][1](torch.Generator().manual_seed(seed))


def keeping(graphs: dict[str, torch.fx.GraphModule], name: str) -> Callable[[torch.fx.GraphModule], torch.fx.GraphModule]:
    """A compiler that records the graph it is given under ``graphs[name]`` and runs it as it is."""

    def compiler(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        graphs[name] = gm
        return gm

    return compiler
