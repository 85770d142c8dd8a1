"""CPU benchmarks: eager, torch.compile and ptc-inductor side by side, steady state and cold compile.

Run: ``PYTHONPATH=packages/ptc-spec/src:packages/ptc-inductor/src python -m pytest
packages/ptc-inductor/benchmarks/bench_cpu.py --benchmark-columns=median,iqr,rounds``.
Cold compile seconds are in each result's ``extra_info`` (``--benchmark-json`` keeps them).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Both compilers start cold: fresh cache directories for this run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="bench_torchinductor_"))

import pytest  # noqa: E402
import torch  # noqa: E402

import ptc_inductor  # noqa: E402
import ptc_spec  # noqa: E402
from ptc_spec import TensorMeta  # noqa: E402

aten = torch.ops.aten

# The layers are the fixture generator's, which lives in the repository's tools/.
_spec = importlib.util.spec_from_file_location("make_fixtures", Path(__file__).resolve().parents[3] / "tools" / "make_inductor_fixtures.py")
assert _spec is not None and _spec.loader is not None
layers = importlib.util.module_from_spec(_spec)
sys.modules["make_fixtures"] = layers
_spec.loader.exec_module(layers)


def pointwise_chain(x: Any, w: Any, b: Any) -> Any:
    g = layers.gelu_tanh(aten.add.Tensor(aten.mul.Tensor(x, w), b))
    return aten.add.Tensor(aten.mul.Tensor(g, aten.sigmoid.default(x)), aten.tanh.default(b))


def layer_norm_residual(x: Any, r: Any, w: Any, b: Any) -> Any:
    h = aten.add.Tensor(x, r)
    return h, layers.layer_norm(h, w, b)[0]


def gpt_block(x: Any, wqkv: Any, bqkv: Any, wo: Any, bo: Any, lw: Any, lb: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    h = layers.attention_block(x, wqkv, bqkv, wo, bo, lw, lb)
    bsz, s, d = h.shape
    flat = aten.view.default(h, [bsz * s, d])
    return aten.add.Tensor(h, aten.view.default(layers.mlp(flat, w1, b1, w2, b2), [bsz, s, d]))


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape) / math.sqrt(shape[-1])


N = 4 * 1024 * 1024
WORKLOADS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "pointwise_chain_4M": (pointwise_chain, lambda: (torch.randn(N), torch.randn(N), torch.randn(N))),
    "softmax_2048x2048": (layers.softmax, lambda: (torch.randn(2048, 2048),)),
    "layer_norm_residual_4096x1024": (layer_norm_residual, lambda: (torch.randn(4096, 1024), torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024))),
    "mlp_block_512x1024x4096": (layers.mlp, lambda: (torch.randn(512, 1024), _r(4096, 1024), torch.randn(4096), _r(1024, 4096), torch.randn(1024))),
    "gpt_block_s256_d256": (gpt_block, lambda: (torch.randn(1, 256, 256), _r(768, 256), torch.randn(768), _r(256, 256), torch.randn(256),
                                                torch.ones(256), torch.zeros(256), _r(1024, 256), torch.randn(1024), _r(256, 1024), torch.randn(256))),
}


def _build(impl: str, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> tuple[Callable[..., Any], float]:
    if impl == "eager":
        return fn, 0.0
    start = time.perf_counter()
    if impl == "torch_compile":
        compiled: Callable[..., Any] = torch.compile(fn)
        compiled(*inputs)
    else:
        gm = ptc_spec.trace(fn, *[TensorMeta.from_tensor(t) for t in inputs], dialect="core/1")
        config = ptc_inductor.config_from_env(cache_dir=tempfile.mkdtemp(prefix="bench_ptc_"))
        compiled = ptc_inductor.compile(gm, config=config)
        compiled(*inputs)
    return compiled, time.perf_counter() - start


@pytest.mark.parametrize("impl", ["eager", "torch_compile", "ptc"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_cpu(benchmark: Any, workload: str, impl: str) -> None:
    fn, make = WORKLOADS[workload]
    inputs = make()
    compiled, cold = _build(impl, fn, inputs)
    benchmark.group = workload
    benchmark.extra_info["cold_compile_s"] = round(cold, 3)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-3, atol=1e-3)
    benchmark.pedantic(compiled, args=inputs, rounds=15, warmup_rounds=3)
