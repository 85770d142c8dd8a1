"""A cold compile loads none of torch's own compiler: ptc replaces it, and importing
torch._dynamo alone (with torch._inductor and triton behind it) cost a second of a small GPT's
first call. Each check runs in a fresh process, where nothing has imported it yet."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import sys
    import torch
    import ptc
    from ptc_spec.testing import compare_with_eager

    MODEL = "{model}"
    torch.manual_seed(0)
    if MODEL == "gpt":
        dim, heads = 32, 4

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
                self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
                self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

            def forward(self, x):
                b, t, c = x.shape
                q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
                q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
                att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
                return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

        class GPT(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = torch.nn.Embedding(100, dim), torch.nn.Embedding(8, dim)
                self.block = Block()
                self.head = torch.nn.Linear(dim, 100)

            def forward(self, idx):
                x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
                return self.head(self.block(x))

        model, inputs = GPT().eval(), (torch.randint(0, 100, (1, 8)),)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
        ).eval()
        inputs = (torch.randn(2, 3, 16, 16),)
    if "{step}" == "train":
        # A training step: capture's meta runs see tensors that require grad, below autograd's
        # dispatch; past the eager backend, ptc-aot traces the backward too (the norms'
        # gradients, batch norm's functional form, the pooling's expanded gradient).
        model.train()
        expected = model(*inputs)
        expected.sum().backward()
        assert "torch._dynamo" not in sys.modules, "eager alone imported torch._dynamo"
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        actual = ptc.compile(model, backend="{backend}", mode="{mode}")(*inputs)
        actual.sum().backward()
        torch.testing.assert_close(actual, expected)
        for p, w in zip(model.parameters(), want):
            torch.testing.assert_close(p.grad, w)
    else:
        with torch.no_grad():
            model(*inputs)  # eager first: its own one-time imports are not the compile's
            assert "torch._dynamo" not in sys.modules, "eager alone imported torch._dynamo"
            compare_with_eager(ptc.compile(model, mode="{mode}"), model, *inputs)
    loaded = sorted(m for m in sys.modules if m == "torch._dynamo" or m.startswith(("torch._dynamo.", "torch._inductor")))
    print("LOADED", loaded)
    """
)


@pytest.mark.parametrize(
    ("model", "mode", "backend", "step"),
    [
        ("gpt", "reduce-overhead", "inductor", "infer"),
        ("convbn", "default", "inductor", "infer"),
        ("gpt", "default", "eager", "train"),
        ("gpt", "default", "inductor", "train"),
        ("convbn", "default", "inductor", "train"),
    ],
)
def test_cold_compile_imports_no_torch_compiler(model: str, mode: str, backend: str, step: str) -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PTC_CACHE_DIR": cache}
        env.pop("PTC_INDUCTOR_CACHE_DIR", None)
        proc = subprocess.run([sys.executable, "-c", PROGRAM.format(model=model, mode=mode, backend=backend, step=step)], env=env,
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout[-3000:]
