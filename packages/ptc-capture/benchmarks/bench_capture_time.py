"""First-call capture time with backend eager, ptc_capture vs torch.compile: a small GPT (4 layers)
and, when transformers is installed, GPT-2 (12 layers, random init).

Run: PYTHONPATH=packages/ptc-spec/src:packages/ptc-capture/src python -m pytest
packages/ptc-capture/benchmarks/bench_capture_time.py --benchmark-only -p no:cacheprovider
(target: at most half of torch.compile(backend="eager")'s time; GPT-2 itself needs transformers).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ptc_capture


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.size(-1)), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, heads: int = 4, vocab: int = 100) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _gpt2():
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    return model, torch.randint(0, 50257, (1, 64))


MODELS = {"gpt-mini": lambda: (GPT().eval(), torch.randint(0, 100, (2, 16))), "gpt2-12": _gpt2}


@pytest.fixture(scope="module", params=list(MODELS))
def model_and_input(request):
    torch.manual_seed(0)
    return MODELS[request.param]()


def test_ptc_capture_first_call(benchmark, model_and_input):
    model, idx = model_and_input

    def first_call():
        ptc_capture.reset()
        with torch.no_grad():
            ptc_capture.optimize("eager")(model)(idx)

    benchmark.pedantic(first_call, rounds=5, iterations=1, warmup_rounds=1)


def test_torch_compile_first_call(benchmark, model_and_input):
    model, idx = model_and_input

    def first_call():
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, backend="eager")(idx)

    benchmark.pedantic(first_call, rounds=5, iterations=1, warmup_rounds=1)
