"""The main job: compile a GPT-style model with ptc on this machine's device and compare with eager.

    python -m ptc.demo [--layers N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from .api import compile as ptc_compile
from .api import reset
from .pipeline import STATS


class Block(torch.nn.Module):
    """A pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        out: torch.Tensor = x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))
        return out


class GPT(torch.nn.Module):
    """A small GPT (random init): token and position embeddings, blocks, an LM head."""

    def __init__(self, vocab: int = 1024, dim: int = 256, layers: int = 4, heads: int = 4, seq: int = 128) -> None:
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(seq, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


def _median_ms(fn: Callable[[], Any], device: torch.device, steps: int = 10) -> float:
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Compile the model, check it against eager, and report; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    out = sys.stdout.write
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(layers=args.layers).to(device).eval()
    idx = torch.randint(0, 1024, (4, 128), device=device)
    out(f"GPT: {args.layers} layers, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, batch 4 x 128 tokens, on {device}\n")
    reset()
    STATS.reset()
    compiled = ptc_compile(model)
    with torch.no_grad():
        expected = model(idx)
        start = time.perf_counter()
        actual = compiled(idx)
        if device.type == "cuda":
            torch.cuda.synchronize()
        cold = time.perf_counter() - start
        error = float((actual.double() - expected.double()).norm() / expected.double().norm())
        eager_ms = _median_ms(lambda: model(idx), device)
        ptc_ms = _median_ms(lambda: compiled(idx), device)
    out(f"compile time (first call): {cold:.2f} s\n")
    out(f"graphs: {STATS.graphs}, generated kernels: {STATS.kernels}\n")
    out(f"max relative error against eager: {error:.1e}\n")
    out(f"eager {eager_ms:.2f} ms, ptc {ptc_ms:.2f} ms per step: speedup {eager_ms / ptc_ms:.2f}x\n")
    if error > 1e-3:
        out("FAILED: ptc's output differs from eager\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
