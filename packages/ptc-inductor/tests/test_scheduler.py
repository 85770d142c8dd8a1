"""Fusion facts: kernel counts for known patterns, and no fusion that breaks dependencies."""

from __future__ import annotations

import pytest
import torch
from conftest import check

import ptc_inductor

aten = torch.ops.aten


def softmax(x: torch.Tensor) -> torch.Tensor:
    m = aten.amax.default(x, [-1], True)
    e = aten.exp.default(aten.sub.Tensor(x, m))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    mean = aten.div.Tensor(aten.sum.dim_IntList(x, [-1], True), n)
    d = aten.sub.Tensor(x, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(d, d), [-1], True), n)
    rstd = aten.rsqrt.default(aten.add.Tensor(var, 1e-5))
    return aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(d, rstd), w), b)


def test_softmax_fuses_into_one_kernel() -> None:
    compiled = check(softmax, torch.randn(64, 257))
    assert compiled.kernel_count == 1
    # The row max and row sum live in C++ locals: only the output is allocated.
    assert len(compiled.memory_plan.local) == 2 and list(compiled.memory_plan.storage) == ["buf2"]


def test_layer_norm_forward_fuses_into_one_kernel() -> None:
    g = torch.Generator().manual_seed(0)
    compiled = check(layer_norm, torch.randn(64, 96, generator=g), torch.randn(96, generator=g), torch.randn(96, generator=g))
    assert compiled.kernel_count == 1


def test_residual_add_then_layer_norm_fuses_into_one_kernel() -> None:
    g = torch.Generator().manual_seed(1)

    def fn(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = aten.add.Tensor(x, r)
        return h, layer_norm(h, w, b)

    compiled = check(fn, *(torch.randn(128, 64, generator=g) for _ in range(2)), torch.randn(64, generator=g), torch.randn(64, generator=g))
    assert compiled.kernel_count == 1


def test_ten_op_pointwise_chain_fuses_into_one_kernel() -> None:
    def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = aten.mul.Tensor(x, y)
        z = aten.add.Tensor(z, 1.0)
        z = aten.tanh.default(z)
        z = aten.sub.Tensor(z, y)
        z = aten.exp.default(z)
        z = aten.mul.Tensor(z, 0.5)
        z = aten.sigmoid.default(z)
        z = aten.maximum.default(z, x)
        z = aten.div.Tensor(z, 3.0)
        return aten.neg.default(z)

    g = torch.Generator().manual_seed(2)
    compiled = check(chain, torch.randn(33, 17, generator=g), torch.randn(17, generator=g))
    assert compiled.kernel_count == 1
    assert compiled.schedule.kernels[0].nodes[0].kind == "pointwise"
    assert len(compiled.memory_plan.storage) == 1


def test_reduction_epilogue_and_independent_outputs_fuse() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = aten.sum.dim_IntList(x, [1])
        return aten.add.Tensor(aten.mul.Tensor(s, 2.0), 1.0), aten.amax.default(x, [1]), aten.exp.default(x)

    compiled = check(fn, torch.randn(100, 30))
    assert compiled.kernel_count == 1


def test_column_reduction_consumer_is_not_fused_across_rows() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        s = aten.sum.dim_IntList(x, [0], True)
        return aten.div.Tensor(x, s)

    compiled = check(fn, torch.rand(70, 90) + 0.5)
    assert compiled.kernel_count == 2


def test_transposed_consumer_of_an_intermediate_is_not_fused() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        m = aten.amax.default(x, [1], True)
        y = aten.exp.default(aten.sub.Tensor(x, m))
        s = aten.sum.dim_IntList(y, [1], True)
        z = aten.div.Tensor(y, s)
        return aten.add.Tensor(aten.sum.dim_IntList(z, [0]), aten.select.int(aten.permute.default(z, [1, 0]), 1, 3))

    compiled = check(fn, torch.randn(80, 80))
    assert compiled.kernel_count >= 2


def test_a_reduction_nobody_reads_is_not_computed() -> None:
    # max_pool2d_with_indices in inference: the decomposition makes the argmax, the graph
    # returns only the max. The argmax must not run inside the max's kernel.
    def pool_values(x: torch.Tensor) -> torch.Tensor:
        values = aten.amax.default(x, [-1])
        aten.argmax.default(x, -1)
        return aten.add.Tensor(values, 1.0)

    compiled = check(pool_values, torch.randn(32, 9))
    reductions = [n.reduction_type for k in compiled.schedule.kernels for n in k.nodes if n.is_reduction]
    assert reductions == ["max"]


def _before_and_after_matmul(a: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t = aten.add.Tensor(a, 1.0)
    m = aten.mm.default(t, w)
    # Reads only the input `a`: free to join t's kernel, before the matmul.
    u = aten.mul.Tensor(a, 3.0)
    return m, u, aten.add.Tensor(u, aten.sum.dim_IntList(m, [1], True))


def _kernel_positions(compiled: ptc_inductor.CompiledGraph) -> tuple[int, list[int]]:
    steps = compiled.schedule.steps
    extern = next(i for i, s in enumerate(steps) if not hasattr(s, "nodes"))
    return extern, [i for i, s in enumerate(steps) if hasattr(s, "nodes")]


def test_a_big_independent_value_is_not_computed_before_an_extern_call() -> None:
    # u is 4 MiB: computed in t's kernel it would live across the matmul for nothing.
    g = torch.Generator().manual_seed(2)
    compiled = check(_before_and_after_matmul, torch.randn(1024, 1024, generator=g), torch.randn(1024, 8, generator=g))
    extern, kernels = _kernel_positions(compiled)
    mul_step = next(i for i, s in enumerate(compiled.schedule.steps) if hasattr(s, "nodes") and any("mul" in o for n in s.nodes for o in n.origins))
    assert mul_step > extern, (extern, kernels)


def test_a_small_independent_value_still_joins_the_earlier_kernel() -> None:
    # Below the threshold a launch saved is worth more than a few KiB held a little longer.
    g = torch.Generator().manual_seed(3)
    compiled = check(_before_and_after_matmul, torch.randn(32, 32, generator=g), torch.randn(32, 8, generator=g))
    extern, kernels = _kernel_positions(compiled)
    mul_step = next(i for i, s in enumerate(compiled.schedule.steps) if hasattr(s, "nodes") and any("mul" in o for n in s.nodes for o in n.origins))
    assert mul_step < extern


def _gelu_backward_with_recompute(h: torch.Tensor, grad: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # An MLP's backward with its activation recomputed: one product makes the activation's
    # gradient, another reads the recomputed activation, and both elementwise parts read h.
    dact = aten.mm.default(grad, w)
    sig = aten.sigmoid.default(aten.mul.Tensor(h, 1.702))
    act = aten.mul.Tensor(h, sig)
    dw = aten.mm.default(aten.permute.default(grad, [1, 0]), act)
    # Like GELU's backward, the slope is made from h again, not from the activation.
    slope = aten.add.Tensor(aten.mul.Tensor(aten.exp.default(aten.neg.default(aten.mul.Tensor(h, h))), 0.4), 0.5)
    return dw, aten.mul.Tensor(dact, slope)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_recomputed_activation_joins_its_gradient_kernel_across_the_product_reading_it(dtype: torch.dtype) -> None:
    # Apart, both kernels read h (4 MiB in float32, 2 in bf16). Fused, they read it once, before
    # the product that reads the activation: the gradient is made earlier, but dact, which only
    # it reads, dies as early, so the memory held does not grow.
    g = torch.Generator().manual_seed(6)
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-1}
    compiled = check(_gelu_backward_with_recompute, torch.randn(512, 2048, generator=g).to(dtype),
                     torch.randn(512, 64, generator=g).to(dtype), torch.randn(64, 2048, generator=g).to(dtype), **tolerance)
    steps = compiled.schedule.steps
    kinds = ["kernel" if hasattr(s, "nodes") else "extern" for s in steps]
    assert kinds == ["extern", "kernel", "extern"], kinds


def _two_unrelated_values(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Nothing shared: a GELU-like chain over one input, a zero-padded copy of another.
    g = aten.mul.Tensor(a, aten.add.Tensor(aten.tanh.default(aten.mul.Tensor(a, 0.79)), 1.0))
    return g, aten.constant_pad_nd.default(b, [0, 7], 0.0)


def test_large_unrelated_values_get_kernels_of_their_own() -> None:
    # Joined, they share only a launch, and the kernel takes one loop nest for both: GPT-2's
    # recomputed GELUs and its padded logits became one row loop, slower than the two apart.
    g = torch.Generator().manual_seed(4)
    compiled = check(_two_unrelated_values, torch.randn(256, 4096, generator=g), torch.randn(256, 4089, generator=g))
    assert compiled.kernel_count == 2


def test_small_unrelated_values_still_share_a_kernel() -> None:
    g = torch.Generator().manual_seed(5)
    compiled = check(_two_unrelated_values, torch.randn(16, 64, generator=g), torch.randn(16, 57, generator=g))
    assert compiled.kernel_count == 1
