"""Fixture graphs of real layers (forward and backward) compile and match eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import assert_meta_strides

import ptc_inductor
import ptc_spec
from ptc_spec.testing import compare_with_eager

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = {"softmax": 1, "layer_norm": 1, "layer_norm_bf16": 1, "softmax_backward": 1, "relu_backward": 1}


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.ptcg")))
def test_fixture_graph_matches_eager(name: str) -> None:
    gm = ptc_spec.load(FIXTURES / f"{name}.ptcg")
    metas = [n.meta[ptc_spec.META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = [m.example(seed=i) for i, m in enumerate(metas)]
    compiled = ptc_inductor.compile(gm)
    bf16 = any(m.dtype == torch.bfloat16 for m in metas)
    tol = {"rtol": 5e-2, "atol": 5e-2} if bf16 else {"rtol": 1e-4, "atol": 1e-4}
    actual = compare_with_eager(compiled, gm, *inputs, **tol)
    assert_meta_strides(gm, actual)
    if name in KERNELS:
        assert compiled.kernel_count == KERNELS[name]
