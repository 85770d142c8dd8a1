"""Regenerate ptc-aot's torch-dialect fixture graphs: ``python tools/make_aot_fixtures.py``.

Each fixture is a small module traced with ``torch.fx.symbolic_trace`` with its parameters
lifted to placeholders, every node's TensorMeta recorded from one eager run, saved with
``ptc_spec.save``. (Until ptc-capture produces them, this stands in for the repository tool.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from ptc_spec import META_KEY, TensorMeta, save, set_dialect

HERE = Path(__file__).resolve().parent.parent / "packages" / "ptc-aot" / "tests" / "fixtures"


def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.linear(torch.tanh(F.linear(x, w1, b1)), w2).sum(-1)


def conv_bn(x: torch.Tensor, w: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return F.relu(F.batch_norm(F.conv2d(x, w), mean, var, gamma, beta, True, 0.1, 1e-5))


def attention(x: torch.Tensor, wqkv: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = F.layer_norm(x, (8,), g, b)
    q, k, v = (h @ wqkv).chunk(3, dim=-1)
    return x + torch.softmax(q @ k.transpose(-2, -1) * 0.35, dim=-1) @ v


FIXTURES: dict[str, tuple[Callable[..., Any], list[TensorMeta]]] = {
    "mlp": (mlp, [TensorMeta.of((4, 6)), TensorMeta.of((8, 6), requires_grad=True), TensorMeta.of((8,), requires_grad=True), TensorMeta.of((3, 8), requires_grad=True)]),
    "conv_bn": (
        conv_bn,
        [TensorMeta.of((2, 3, 5, 5), requires_grad=True), TensorMeta.of((4, 3, 3, 3), requires_grad=True), TensorMeta.of((4,), requires_grad=True),
         TensorMeta.of((4,), requires_grad=True), TensorMeta.of((4,)), TensorMeta.of((4,))],
    ),
    "attention": (attention, [TensorMeta.of((2, 5, 8), requires_grad=True), TensorMeta.of((8, 24), requires_grad=True), TensorMeta.of((8,), requires_grad=True), TensorMeta.of((8,), requires_grad=True)]),
}


class _Recorder(torch.fx.Interpreter):
    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, torch.Tensor):
            n.meta[META_KEY] = TensorMeta.from_tensor(result)
        elif isinstance(result, (tuple, list)):
            n.meta[META_KEY] = tuple(TensorMeta.from_tensor(r) if isinstance(r, torch.Tensor) else None for r in result)
        return result


def build(fn: Callable[..., Any], metas: list[TensorMeta]) -> torch.fx.GraphModule:
    """Trace ``fn`` to a torch-dialect GraphModule with TensorMeta on every node."""
    gm = torch.fx.symbolic_trace(fn)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, meta in zip(placeholders, metas):
        node.meta[META_KEY] = meta
    _Recorder(gm).run(*[m.example(seed=i) for i, m in enumerate(metas)])
    for node, meta in zip(placeholders, metas):
        node.meta[META_KEY] = meta
    set_dialect(gm, "torch")
    return gm


if __name__ == "__main__":
    for name, (fn, metas) in FIXTURES.items():
        save(build(fn, metas), HERE / f"{name}.ptcg")
