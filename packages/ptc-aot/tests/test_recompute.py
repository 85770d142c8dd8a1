"""Recompute policy: cheap ops yes, matmuls, reductions and random ops never."""

from __future__ import annotations

import torch

from ptc_aot.recompute import recomputable
from ptc_spec import TensorMeta, trace

aten = torch.ops.aten


def test_policy_on_a_traced_graph() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x @ w).t()
        return torch.bernoulli(h).sum() + h.sum()

    gm = trace(fn, TensorMeta.of((4, 4)), TensorMeta.of((4, 4)))
    verdict = {n.target: recomputable(n) for n in gm.graph.nodes if n.op == "call_function"}
    assert verdict[aten.relu.default] and verdict[aten.t.default]
    assert not verdict[aten.mm.default]
    assert not verdict[aten.sum.default]
    assert not verdict[aten.bernoulli.default]
