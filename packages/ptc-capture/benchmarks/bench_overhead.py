"""Cached-call overhead of a function of 4 tensor inputs: eager vs ptc_capture vs torch.compile.

The dynamic cases hit an entry whose 4 inputs have symbolic sizes (2 distinct dims, 8 symbols
tied by equality guards): the guard function reads each size and checks the SymbolEnv's guards.

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


@pytest.fixture(scope="module")
def matrices():
    return [torch.randn(6, 10) for _ in range(4)]


def test_ptc_capture_dynamic_two_dims(benchmark, matrices):
    compiled = ptc_capture.optimize("eager", dynamic=True)(four_inputs)
    compiled(*[torch.randn(4, 8) for _ in range(4)])
    compiled(*matrices)
    benchmark(compiled, *matrices)


def test_ptc_capture_automatic_dynamic_two_dims(benchmark, matrices):
    # The second entry (dynamic) is found after the first (static) one's guards fail.
    compiled = ptc_capture.optimize("eager")(four_inputs)
    compiled(*[torch.randn(4, 8) for _ in range(4)])
    compiled(*matrices)
    benchmark(compiled, *matrices)


def test_torch_compile_dynamic_two_dims(benchmark, matrices):
    compiled = torch.compile(four_inputs, backend="eager", dynamic=True)
    compiled(*[torch.randn(4, 8) for _ in range(4)])
    compiled(*matrices)
    benchmark(compiled, *matrices)
