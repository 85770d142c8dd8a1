"""Cached-call overhead of a function of 4 tensor inputs: eager vs ptc_capture vs torch.compile.

Run: PYTHONPATH=packages/ptc-spec/src:packages/ptc-capture/src python -m pytest
packages/ptc-capture/benchmarks/bench_overhead.py --benchmark-only -p no:cacheprovider
(target: ptc_capture adds <= 5 us over eager).
"""

from __future__ import annotations

import pytest
import torch

import ptc_capture


def four_inputs(a, b, c, d):
    return a + b * c - d


@pytest.fixture(scope="module")
def inputs():
    return [torch.randn(4) for _ in range(4)]


def test_eager(benchmark, inputs):
    benchmark(four_inputs, *inputs)


def test_ptc_capture_eager_backend(benchmark, inputs):
    compiled = ptc_capture.optimize("eager")(four_inputs)
    compiled(*inputs)
    benchmark(compiled, *inputs)


def test_torch_compile_eager_backend(benchmark, inputs):
    compiled = torch.compile(four_inputs, backend="eager")
    compiled(*inputs)
    compiled(*inputs)
    benchmark(compiled, *inputs)
