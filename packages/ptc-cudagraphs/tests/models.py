"""Small models shared by the GPU tests (plain torch.nn, random init)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def mlp(device: str = "cuda") -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)).to(device)


class Block(nn.Module):
    """A pre-norm GPT block with causal self-attention written out (no fused kernels)."""

    def __init__(self, dim: int = 64, heads: int = 4, seq: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).tril())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
