"""Regenerate packages/ptc-decomp/tests/fixtures: aten graphs of real layers' forward and backward.

Each building block of GPT-2, BERT, ResNet, ViT, ConvNeXt and EfficientNet (written with plain
torch.nn) is traced with ptc_spec.trace over its parameters and inputs, forward plus
torch.autograd.grad backward, in training and eval mode. ptc_spec.trace records in-place ops
faithfully, so a small functionalization step (what ptc_aot does in the real pipeline)
rewrites them: dropout's bernoulli_/div_ on fresh temporaries become their functional forms,
and training batch norm becomes _native_batch_norm_legit_functional whose updated running
statistics are returned as extra outputs. Dropout uses p=1e-9 so graphs keep their random ops
but stay deterministic in practice.

    PYTHONPATH=packages/ptc-spec/src python tools/make_decomp_fixtures.py
"""

from __future__ import annotations

import argparse
import inspect
import operator
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import ptc_spec
from ptc_spec import META_KEY, TensorMeta

aten = torch.ops.aten
P = 1e-9
OUT = Path(__file__).resolve().parents[1] / "packages" / "ptc-decomp" / "tests" / "fixtures"


class Attention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2, sdpa: bool = True) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads, self.sdpa = nn.Linear(d, 3 * d), nn.Linear(d, d), heads, sdpa
        self.drop = nn.Dropout(P)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
            mask = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
            att = self.drop(F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1))
            y = att @ v
        return self.drop(self.proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class GPT2(nn.Module):
    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(50, 16), nn.Embedding(8, 16)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(16), nn.LayerNorm(16), nn.LayerNorm(16)
        self.attn = Attention(sdpa=sdpa)
        self.mlp = nn.Sequential(nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 16), nn.Dropout(P))
        self.head = nn.Linear(16, 50, bias=False)

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        idx, target = idx.remainder(50), target.remainder(50)
        x = self.wte(idx) + self.wpe(torch.arange(0, idx.shape[1]))
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, 50), target.view(-1), ignore_index=-1)


class BERT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.typ, self.ln = nn.Embedding(50, 16), nn.Embedding(2, 16), nn.LayerNorm(16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=P, activation="gelu", batch_first=True)
        self.pool, self.cls = nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        idx, target = idx.remainder(50), target.remainder(3)
        x = self.ln(self.tok(idx) + self.typ(torch.zeros_like(idx)))
        pooled = torch.tanh(self.pool(self.layer(x)[:, 0]))
        return F.cross_entropy(self.cls(pooled), target)


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.avg, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.bn2(self.conv2(x)) + x)
        return self.fc(torch.flatten(self.avg(x), 1))


class ViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 16))
        self.pos = nn.Parameter(torch.zeros(1, 5, 16))
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=P, activation="gelu", batch_first=True, norm_first=True)
        self.ln, self.head = nn.LayerNorm(16), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.ln(self.layer(x))[:, 0])


class ConvNeXt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dw, self.ln = nn.Conv2d(8, 8, 7, padding=3, groups=8), nn.LayerNorm(8, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(8, 32), nn.Linear(32, 8)
        self.gamma = nn.Parameter(torch.full((8,), 1e-1))
        self.gn = nn.GroupNorm(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = (self.gamma * self.pw2(F.gelu(self.pw1(self.ln(y))))).permute(0, 3, 1, 2)
        return self.gn(x + y)


class EfficientNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.expand, self.bn0 = nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32)
        self.dw, self.bn1 = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32)
        self.se1, self.se2 = nn.Conv2d(32, 8, 1), nn.Conv2d(8, 32, 1)
        self.proj, self.bn2 = nn.Conv2d(32, 8, 1, bias=False), nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.bn0(self.expand(x)))
        y = F.silu(self.bn1(self.dw(y)))
        scale = torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
        y = F.hardswish(self.bn2(self.proj(y * scale)))
        return x + F.dropout(y, P, self.training)


BLOCKS: dict[str, tuple[Callable[[], nn.Module], list[TensorMeta]]] = {
    "gpt2_sdpa": (lambda: GPT2(True), [TensorMeta.of((2, 8), torch.int64), TensorMeta.of((2, 8), torch.int64)]),
    "gpt2_manual": (lambda: GPT2(False), [TensorMeta.of((2, 8), torch.int64), TensorMeta.of((2, 8), torch.int64)]),
    "bert": (BERT, [TensorMeta.of((2, 8), torch.int64), TensorMeta.of((2,), torch.int64)]),
    "resnet": (ResNet, [TensorMeta.of((2, 3, 8, 8), requires_grad=True)]),
    "vit": (ViT, [TensorMeta.of((2, 3, 8, 8), requires_grad=True)]),
    "convnext": (ConvNeXt, [TensorMeta.of((2, 8, 8, 8), requires_grad=True)]),
    "efficientnet": (EfficientNet, [TensorMeta.of((2, 8, 8, 8), requires_grad=True)]),
}


def trace_block(module: nn.Module, inputs: list[TensorMeta]) -> torch.fx.GraphModule:
    """Forward + backward of ``module`` as one aten graph: (params..., buffers..., inputs...) -> (out, grads...)."""
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    names = [*params, *buffers]

    def step(*args: torch.Tensor) -> Any:
        state = dict(zip(names, args[: len(names)]))
        out = torch.func.functional_call(module, state, tuple(args[len(names) :]))
        wrt = [a for a in args if a.requires_grad]
        grads = torch.autograd.grad(out.float().sum(), wrt)
        return (out, *grads)

    # Placeholders are named after the parameters and buffers (tests pick values by name).
    labels = [n.replace(".", "_") for n in names] + [f"input{i}" for i in range(len(inputs))]
    step.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(label, inspect.Parameter.POSITIONAL_OR_KEYWORD) for label in labels]
    )
    metas = [TensorMeta.of(p.shape, p.dtype, requires_grad=True) for p in params.values()]
    metas += [TensorMeta.of(b.shape, b.dtype) for b in buffers.values()]
    return functionalize(ptc_spec.trace(step, *metas, *inputs))


_FUNCTIONAL = {
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.div_.Scalar: aten.div.Scalar,
    aten.div_.Tensor: aten.div.Tensor,
    aten.mul_.Tensor: aten.mul.Tensor,
    aten.add_.Tensor: aten.add.Tensor,
}


def functionalize(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite the in-place ops these blocks emit into functional ones (a stand-in for ptc_aot)."""
    graph = gm.graph
    extra_outputs: list[torch.fx.Node] = []
    placeholders = {n for n in graph.nodes if n.op == "placeholder"}
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _FUNCTIONAL:
            node.target = _FUNCTIONAL[node.target]
            if node.args[0] in placeholders:
                extra_outputs.append(node)
        elif node.target is aten.native_batch_norm.default and node.args[5] and node.args[3] is not None:
            node.target = aten._native_batch_norm_legit_functional.default
            outs = list(node.meta[META_KEY]) + [node.args[3].meta[META_KEY], node.args[4].meta[META_KEY]]
            node.meta[META_KEY] = tuple(outs)
            with graph.inserting_after(node):
                for i in (4, 3):
                    getter = graph.call_function(operator.getitem, (node, i))
                    getter.meta[META_KEY] = outs[i]
                    extra_outputs.insert(0, getter)
        elif isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
            raise SystemExit(f"no functional form known for {node.target}")
    output = next(n for n in graph.nodes if n.op == "output")
    output.args = (tuple(output.args[0]) + tuple(extra_outputs),)
    graph.lint()
    gm.recompile()
    ptc_spec.check(gm, "aten")
    return gm


def main(argv: list[str] | None = None) -> int:
    """Write one .ptcg file per block and mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (make, inputs) in BLOCKS.items():
        for mode in ("train", "eval"):
            torch.manual_seed(0)
            module = make().train(mode == "train")
            gm = trace_block(module, inputs)
            path = args.out / f"{name}_{mode}.ptcg"
            ptc_spec.save(gm, path)
            sys.stdout.write(f"{path.name}: {len(gm.graph.nodes)} nodes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
