"""A snapshot of one small generated kernel: loop structure, pragmas, locals and hoisting."""

from __future__ import annotations

import torch
from conftest import check

aten = torch.ops.aten

EXPECTED = """extern "C" void kernel0(const float* __restrict__ arg0, const float* __restrict__ arg1, float* __restrict__ buf1)
{
    for (int64_t x0 = 0; x0 < 4; ++x0)
    {
        float buf0_v;
        // buf0: sum over [4] x [8], from graph node(s) mul_tensor, sum_dim_int_list
        {
            float acc3 = static_cast<float>(0.0);
            #pragma omp simd reduction(+:acc3)
            for (int64_t r0 = 0; r0 < 8; ++r0)
            {
                auto tmp0 = arg0[(r0 + (8*x0))];
                auto tmp1 = arg1[r0];
                auto tmp2 = (tmp0 * tmp1);
                acc3 += tmp2;
            }
            buf0_v = static_cast<float>(acc3);
        }
        // buf1: pointwise over [4, 8], from graph node(s) div_tensor
        {
            #pragma omp simd
            for (int64_t x1 = 0; x1 < 8; ++x1)
            {
                auto tmp4 = arg0[((8*x0) + x1)];
                auto tmp5 = (tmp4 / buf0_v);
                buf1[((8*x0) + x1)] = static_cast<float>(tmp5);
            }
        }
    }
}
"""


def test_row_reduction_with_epilogue_generates_this_kernel() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return aten.div.Tensor(x, aten.sum.dim_IntList(aten.mul.Tensor(x, y), [1], True))

    compiled = check(fn, torch.randn(4, 8), torch.randn(8))
    assert compiled.cpp_source[compiled.cpp_source.index('extern "C"') :] == EXPECTED


def test_large_pointwise_kernel_is_parallel_and_vectorized() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return aten.mul.Tensor(aten.tanh.default(x), 2.0)

    compiled = check(fn, torch.randn(64, 1024))
    assert "#pragma omp parallel for" in compiled.cpp_source and "#pragma omp simd" in compiled.cpp_source


def test_softmax_computes_exp_once_per_element() -> None:
    # The sum's input exp(x - max) is kept in a row buffer that the normalizing loop reads.
    def fn(x: torch.Tensor) -> torch.Tensor:
        e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))

    x = torch.randn(64, 512)
    x[:, 100:] = float("-inf")
    compiled = check(fn, x)
    kernel = compiled.cpp_source[compiled.cpp_source.index('extern "C"') :]
    assert kernel.count("ptc_exp(") == 1 and "row0[" in kernel
