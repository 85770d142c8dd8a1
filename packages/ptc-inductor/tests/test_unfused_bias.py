"""addmm whose result only feeds pointwise work is compiled as mm with the bias add fused into the
Triton kernel that reads the product (unfused_bias.py); other addmms stay library calls.

Runs the Triton backend under TRITON_INTERPRET=1 on CPU tensors (CI), or on CUDA."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_triton_kernels import DEVICE, trace_core  # sets TRITON_INTERPRET before triton is imported

import ptc_inductor
from ptc_inductor.config import config_from_env
from ptc_inductor.unfused_bias import unfuse_bias_adds
from ptc_spec.testing import compare_with_eager

aten = torch.ops.aten
pytest.importorskip("triton")


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)


def _compile(fn: Callable[..., Any], *inputs: torch.Tensor, backend: str = "triton") -> tuple[ptc_inductor.CompiledGraph, torch.fx.GraphModule]:
    gm = trace_core(fn, *inputs)
    return ptc_inductor.compile(gm, config=config_from_env().replace(backend=backend)), gm


def _extern_calls(compiled: ptc_inductor.CompiledGraph) -> list[str]:
    # Library calls are `bufN = _opK(...)  # <graph node>`; the node names the op.
    return re.findall(r"= _op\d+\(.*#\s*(addmm|mm)_", compiled.wrapper_source)


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # nn.functional.linear as ptc-decomp leaves it in the core op set: addmm over the flattened rows.
    rows = torch.addmm(b, x.reshape(-1, x.shape[-1]), w.permute(1, 0))
    return rows.view(*x.shape[:-1], w.shape[0])


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    # A transformer MLP on (batch, tokens, dim): linear -> GELU -> linear -> residual add.
    h = _linear(x, w1, b1)
    h = 0.5 * h * (1 + torch.erf(h * 0.7071067811865476))
    return x + _linear(h, w2, b2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float32_biases_that_feed_pointwise_work_fuse_into_its_kernel(dtype: torch.dtype) -> None:
    x, w1, b1, w2, b2 = _rand(2, 7, 32, dtype=dtype), _rand(64, 32, dtype=dtype, seed=1), _rand(64, dtype=dtype, seed=2), _rand(32, 64, dtype=dtype, seed=3), _rand(32, dtype=dtype, seed=4)
    compiled, _ = _compile(_mlp, x, w1, b1, w2, b2)
    # float32 products are plain mm, their biases read by the GELU and residual kernels; a bf16
    # product rounded before its bias add would differ from eager's by an ulp, so it keeps addmm.
    assert _extern_calls(compiled) == (["mm", "mm"] if dtype == torch.float32 else ["addmm", "addmm"]), compiled.wrapper_source
    compare_with_eager(compiled, _mlp, x, w1, b1, w2, b2)


def test_a_product_read_by_a_library_call_or_returned_keeps_addmm() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = _linear(x, w, b)  # read by the next product: addmm's epilogue is free
        z = _linear(y, w2, b)  # returned as it is
        return z, y * 2.0

    x, w, b, w2 = _rand(5, 16), _rand(16, 16, seed=1), _rand(16, seed=2), _rand(16, 16, seed=3)
    compiled, _ = _compile(fn, x, w, b, w2)
    assert _extern_calls(compiled) == ["addmm", "addmm"], compiled.wrapper_source
    compare_with_eager(compiled, fn, x, w, b, w2)


def test_a_product_returned_and_read_by_pointwise_work_is_stored_by_that_kernel() -> None:
    # A training forward: the MLP's first product goes to the GELU (over (batch, seq, features))
    # and is returned for the backward (as (tokens, features)). Split, the GELU's kernel stores
    # the biased product as it computes: one kernel, no pass of its own for the add.
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.addmm(b, x.reshape(-1, x.shape[-1]), w.permute(1, 0))
        g = h.view(*x.shape[:-1], w.shape[0])
        return 0.5 * g * (1 + torch.erf(g * 0.7071067811865476)), h

    x, w, b = _rand(2, 7, 32), _rand(64, 32, seed=1), _rand(64, seed=2)
    compiled, _ = _compile(fn, x, w, b)
    assert _extern_calls(compiled) == ["mm"], compiled.wrapper_source
    assert compiled.kernel_count == 1, compiled.wrapper_source
    compare_with_eager(compiled, fn, x, w, b)


def test_the_cpp_backend_keeps_addmm_and_the_callers_graph_is_unchanged() -> None:
    x, w1, b1, w2, b2 = (t.cpu() for t in (_rand(2, 7, 32), _rand(64, 32, seed=1), _rand(64, seed=2), _rand(32, 64, seed=3), _rand(32, seed=4)))
    compiled, gm = _compile(_mlp, x, w1, b1, w2, b2, backend="cpp")
    assert _extern_calls(compiled) == ["addmm", "addmm"]
    compare_with_eager(compiled, _mlp, x, w1, b1, w2, b2)
    before = str(gm.graph)
    rewritten = unfuse_bias_adds(gm, config_from_env().replace(backend="triton"))
    assert rewritten is not gm and str(gm.graph) == before
    assert sum(n.target is aten.addmm.default for n in rewritten.graph.nodes) == 0
    assert rewritten.meta == gm.meta
