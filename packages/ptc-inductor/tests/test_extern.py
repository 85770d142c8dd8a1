"""Extern kernels (matmul, convolution, attention, scans, scatters) and seeded random ops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from conftest import assert_meta_strides, check, trace_core

import ptc_inductor
from ptc_inductor.config import config_from_env
from ptc_inductor.ir import ExternNode
from ptc_inductor.lowering import extern, matmul
from ptc_spec.testing import compare_with_eager

aten = torch.ops.aten


def test_matmuls_with_fused_epilogues_match_eager() -> None:
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(8, 16, generator=g), torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    q, k = torch.randn(2, 5, 4, generator=g), torch.randn(2, 4, 6, generator=g)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))
        r = aten.maximum.default(h, aten.full.default([], 0.0, dtype=torch.float32, device=torch.device("cpu")))
        o = aten.mm.default(r, w)
        s = aten.bmm.default(aten.mul.Tensor(q, 0.5), k)
        return aten.tanh.default(o), aten.exp.default(s)

    compiled = check(fn, x, w, b, q, k)
    externs = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert [e.op for e in externs] == [aten.addmm.default, aten.mm.default, aten.bmm.default]


def test_convolution_attention_scans_and_scatters_match_eager() -> None:
    g = torch.Generator().manual_seed(1)
    img, wt = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    x = torch.randn(4, 7, generator=g)
    idx = torch.randint(0, 4, (2, 7), generator=g)

    def fn(img: torch.Tensor, wt: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        conv = aten.convolution.default(img, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        att = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[0]
        values, indices = aten.sort.default(x, 1)
        top = aten.topk.default(x, 3, 1)[0]
        return (
            aten.mul.Tensor(conv, 2.0),
            aten.add.Tensor(att, 1.0),
            aten.cumsum.default(x, 1),
            values,
            indices,
            top,
            aten.scatter_add.default(x, 0, idx, aten.slice.Tensor(x, 0, 0, 2)),
            aten.index_put.default(x, [aten.select.int(idx, 0, 0)], aten.full.default([7], 1.0, dtype=torch.float32, device=torch.device("cpu")), True),
        )

    check(fn, img, wt, q, k, v, x, idx)


# (input, weight, stride, padding, groups, transposed, whether the result is also read by a
# pointwise op or only returned)
BIASED_CONVS = {
    "conv2d_then_relu": ((2, 4, 7, 7), (6, 4, 3, 3), 1, 1, 1, False, True),
    "conv2d_returned": ((2, 4, 7, 7), (6, 4, 3, 3), 2, 0, 1, False, False),
    "depthwise": ((2, 6, 8, 8), (6, 1, 7, 7), 1, 3, 6, False, True),
    "transposed": ((2, 4, 5, 5), (4, 3, 3, 3), 2, 1, 1, True, True),
    "conv1d": ((2, 4, 9), (5, 4, 3), 1, 1, 1, False, True),
    "conv3d": ((1, 2, 4, 5, 5), (3, 2, 3, 3, 3), 1, 1, 1, False, True),
}


def _biased_conv_case(case: str, dtype: torch.dtype, device: str) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    xs, ws, stride, pad, groups, transposed, read = BIASED_CONVS[case]
    nd = len(ws) - 2
    g = torch.Generator().manual_seed(4)
    channels = ws[1] * groups if transposed else ws[0]
    x, w, b = (torch.randn(s, generator=g).to(device, dtype) for s in (xs, ws, (channels,)))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        y = aten.convolution.default(x, w, b, [stride] * nd, [pad] * nd, [1] * nd, transposed, [0] * nd, groups)
        return (y, aten.clamp.default(aten.mul.Tensor(y, 2.0), 0.0)) if read else y

    return fn, (x, w, b)


@pytest.mark.parametrize("layout", ["off", "on"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("case", list(BIASED_CONVS))
def test_convolution_bias_added_by_ptc_kernels_matches_eager(case: str, dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The split is for CUDA (cuDNN adds the bias in a pass of its own); here it is switched on
    # for the CPU so that its values are checked against eager in CI.
    monkeypatch.setattr(extern, "_BIAS_APART_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    fn, inputs = _biased_conv_case(case, dtype, "cpu")
    gm = trace_core(fn, *inputs)
    compiled = ptc_inductor.compile(gm, config=config_from_env(layout_opt=layout))
    actual = compare_with_eager(compiled, fn, *inputs, **({"rtol": 2e-2, "atol": 2e-2} if dtype != torch.float32 else {}))
    assert_meta_strides(gm, actual)
    (conv,) = [s for s in compiled.schedule.steps if isinstance(s, ExternNode)]
    assert conv.args[2] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", ["conv2d_then_relu", "conv2d_returned", "depthwise", "transposed"])
def test_convolution_bias_on_cuda_is_left_to_ptc_kernels(case: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    fn, inputs = _biased_conv_case(case, dtype, "cuda")
    gm = trace_core(fn, *inputs)
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend="triton"))
    actual = compare_with_eager(compiled, fn, *inputs, **({"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}))
    assert_meta_strides(gm, actual)
    (conv,) = [s for s in compiled.schedule.steps if isinstance(s, ExternNode)]
    assert conv.args[2] is None


def test_seeded_random_ops_are_deterministic_in_seed_and_offset() -> None:
    def fn(seed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u = torch.ops.ptc.rand.default(seed, 0, [200, 300], dtype=torch.float32, device=torch.device("cpu"))
        n = torch.ops.ptc.randn.default(seed, 60000, [200, 300], dtype=torch.float32, device=torch.device("cpu"))
        u2 = torch.ops.ptc.rand.default(seed, 0, [200, 300], dtype=torch.bfloat16, device=torch.device("cpu"))
        return u, n, u2

    seed = torch.tensor(1234, dtype=torch.int64)
    compiled = ptc_inductor.compile(trace_core(fn, seed))
    u, n, u2 = compiled(seed)
    again = compiled(seed)
    assert torch.equal(u, again[0]) and torch.equal(n, again[1])
    assert u.dtype == torch.float32 and u2.dtype == torch.bfloat16 and u.shape == (200, 300)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.01 and abs(float(n.mean())) < 0.02 and abs(float(n.std()) - 1.0) < 0.02
    assert not torch.equal(compiled(torch.tensor(99))[0], u)
    torch.testing.assert_close(u2, u.to(torch.bfloat16))


def test_seed_op_draws_from_torch_generator_at_run_time() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        seed = torch.ops.ptc.seed.default(torch.device("cpu"))
        return aten.add.Tensor(x, torch.ops.ptc.rand.default(seed, 0, [4, 4], dtype=torch.float32, device=torch.device("cpu")))

    compiled = ptc_inductor.compile(trace_core(fn, torch.zeros(4, 4)))
    torch.manual_seed(0)
    a = compiled(torch.zeros(4, 4))
    torch.manual_seed(0)
    b = compiled(torch.zeros(4, 4))
    c = compiled(torch.zeros(4, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.fixture
def set_tf32() -> Iterator[Callable[[bool], None]]:
    """Sets torch.backends.cuda.matmul.allow_tf32 for one test and restores it after."""
    before = torch.backends.cuda.matmul.allow_tf32

    def set_to(allowed: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = allowed

    yield set_to
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_products_with_unaligned_rows_run_in_padded_rows_and_match_eager(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch, set_tf32: Callable[[bool], None]
) -> None:
    # The CUDA rule (an LM head over a 50257-token vocabulary), exercised on the CPU here; a
    # float32 product is padded where TF32 runs it on the matrix units.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    set_tf32(True)
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((1024, 64), (1031, 64), (1031,)))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))
        plain = aten.mm.default(x, aten.permute.default(w, [1, 0]))
        return logits, aten.amax.default(plain, [1], True)

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check(fn, x, w, b, check_stride=False, **tolerance)
    per_row = 16 // dtype.itemsize
    padded = -(-1031 // per_row) * per_row
    # The logits are returned as a view of the padded rows (eager's dim order, longer rows), not
    # copied out; the reduction over them is stored in eager's exact layout.
    logits, top = compiled(x, w, b)
    assert logits.stride() == (padded, 1) and logits.storage_offset() == 0
    assert top.stride() == (1, 1)
    externs = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert [e.op for e in externs] == [aten.addmm.default, aten.mm.default]
    assert all(e.outputs[0].layout.size == (1024, padded) for e in externs)
    # The transposed weight is padded in its own (column-major) order: no transposing copy.
    weights = [e.args[2] if e.op is aten.addmm.default else e.args[1] for e in externs]
    assert all(a.size == (64, padded) and a.stride == (1, 64) for a in weights), weights


def test_views_of_padded_rows_are_returned_when_they_keep_eager_dim_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # An LM head's logits viewed as (batch, seq, vocab), or transposed: returned as views of
    # the padded rows, as torch.compile returns them, each in eager's dim order.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((1024, 64), (1031, 64)))

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = aten.mm.default(x, aten.permute.default(w, [1, 0]))
        return aten.view.default(logits, [4, 256, 1031]), aten.permute.default(logits, [1, 0])

    compiled = check(fn, x, w, check_stride=False, rtol=2e-2, atol=2e-2)
    by_seq, transposed = compiled(x, w)
    assert by_seq.stride() == (256 * 1032, 1032, 1) and transposed.stride() == (1, 1032)
    assert by_seq.untyped_storage().data_ptr() == transposed.untyped_storage().data_ptr()


@pytest.mark.parametrize("tf32", [False, True])
def test_small_aligned_or_full_precision_float32_products_are_not_padded(
    tf32: bool, monkeypatch: pytest.MonkeyPatch, set_tf32: Callable[[bool], None]
) -> None:
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    set_tf32(tf32)
    g = torch.Generator().manual_seed(0)
    for rows, cols in ((1024, 1032), (8, 1031), *([] if tf32 else [(1024, 1031)])):
        x, w = torch.randn(rows, 64, generator=g), torch.randn(cols, 64, generator=g)

        def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return aten.mm.default(x, aten.permute.default(w, [1, 0]))

        compiled = check(fn, x, w)
        (extern,) = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
        assert extern.outputs[0].layout.size == (rows, cols)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_operands_with_unaligned_rows_are_stored_in_aligned_rows_and_match_eager(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # An LM head's backward: the (M, vocab) gradient times the weight, and its transpose times
    # the activations. cuBLAS needs each operand's leading dimension aligned to 16 bytes.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    g = torch.Generator().manual_seed(0)
    grad, w, x = (torch.randn(*s, generator=g).to(dtype) for s in ((1024, 1031), (1031, 64), (1024, 64)))

    def fn(grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten.mm.default(grad, w), aten.mm.default(aten.permute.default(grad, [1, 0]), x)

    compiled = check(fn, grad, w, x)
    per_row = 16 // dtype.itemsize
    externs = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    # Each first operand's leading dimension (its row stride, or its column stride when it is
    # read transposed) is aligned, and both read one copy of the gradient: its rows padded.
    leading = [a.stride[0] if a.stride[1] == 1 else a.stride[1] for a in (e.args[0] for e in externs)]
    assert all(s % per_row == 0 for s in leading), leading
    assert len({e.args[0].buffer for e in externs}) == 1
    # The weight and the activations were aligned already: passed as they are.
    assert [e.args[1].buffer for e in externs] == ["arg1", "arg2"]


def _gradient(grad: torch.Tensor, computed: bool) -> torch.Tensor:
    """The LM head's output gradient as (M, vocab): computed by a kernel, or a graph input (a
    backward graph's tangent)."""
    return aten.view.default(aten.mul.Tensor(grad, 2.0) if computed else grad, [1024, 1031])


@pytest.mark.parametrize("computed", [True, False], ids=["computed", "input"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_views_of_an_unaligned_gradient_share_one_copy_in_aligned_rows(dtype: torch.dtype, computed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # An LM head's backward as the loss leaves it: the (batch, seq, vocab) gradient, computed
    # by a kernel or handed in, viewed as (M, vocab) for the input's gradient and transposed
    # for the weight's. Both products read one copy of it in aligned rows; the transposed view
    # was handed to cuBLAS with a leading dimension of 1031 (a pre-Hopper kernel, 4.8 ms of
    # GPT-2's bf16 training step on an H200), and then copied transposed (599 us).
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    g = torch.Generator().manual_seed(0)
    grad, w, x = (torch.randn(*s, generator=g).to(dtype) for s in ((4, 256, 1031), (1031, 64), (1024, 64)))

    def fn(grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = _gradient(grad, computed)
        return aten.mm.default(aten.permute.default(flat, [1, 0]), x), aten.mm.default(flat, w)

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check(fn, grad, w, x, **tolerance)
    externs = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    first = [e.args[0] for e in externs]
    assert len({a.buffer for a in first}) == 1, first  # one copy, read by both products
    assert [a.stride for a in first] == [(1, 1032), (1032, 1)], first


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reshapes_of_an_aligned_gradient_are_read_where_it_is_stored(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cross-entropy's gradient over a vocabulary padded to a multiple of 64 (nanoGPT's 50304):
    # computed as (M, vocab), reshaped to (batch, seq, vocab) by the loss's flatten and back to
    # (M, vocab) by the head's backward, for the input's gradient first, then the weight's.
    # Both products read the one stored gradient; each reshape was stored again, a copy of the
    # whole gradient (0.74 ms of GPT-2's 155 ms float32 step on an H200).
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    g = torch.Generator().manual_seed(0)
    grad, w, x = (torch.randn(*s, generator=g).to(dtype) for s in ((1024, 1032), (1032, 64), (1024, 64)))

    def fn(grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        by_seq = aten.view.default(aten.mul.Tensor(grad, 2.0), [4, 256, 1032])
        flat = aten.view.default(by_seq, [1024, 1032])
        return aten.mm.default(flat, w), aten.mm.default(aten.permute.default(flat, [1, 0]), x)

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check(fn, grad, w, x, **tolerance)
    kernels = [s for s in compiled.schedule.steps if hasattr(s, "nodes")]
    externs = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert len(kernels) == 1 and len(kernels[0].nodes) == 1, compiled.schedule.steps
    stored = kernels[0].nodes[0].outputs[0].name
    assert [e.args[0].buffer for e in externs] == [stored, stored]


@pytest.mark.parametrize("computed", [True, False], ids=["computed", "input"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_products_over_an_unaligned_contraction_run_over_it_padded_with_zeros(
    dtype: torch.dtype, computed: bool, monkeypatch: pytest.MonkeyPatch, set_tf32: Callable[[bool], None]
) -> None:
    # The LM head's input gradient, (M, vocab) by (vocab, hidden): K = 1031 is padded with zeros
    # in both operands (the CUDA rule, for products this large; any size here). The padded
    # gradient is the same copy the weight's gradient reads transposed.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    monkeypatch.setattr(matmul, "_PAD_K_MIN_WORK", 0)
    set_tf32(True)
    g = torch.Generator().manual_seed(0)
    grad, w, x, b = (torch.randn(*s, generator=g).to(dtype) for s in ((4, 256, 1031), (1031, 64), (1024, 64), (64,)))

    def fn(grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = _gradient(grad, computed)
        return aten.mm.default(aten.permute.default(flat, [1, 0]), x), aten.addmm.default(b, flat, w)

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check(fn, grad, w, x, b, **tolerance)
    transposed, padded = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert padded.op is aten.addmm.default
    assert padded.args[1].size == (1024, 1032) and padded.args[2].size == (1032, 64)
    assert transposed.args[0].buffer == padded.args[1].buffer
    assert transposed.args[0].stride == (1, 1032)


def test_a_padded_product_of_a_row_major_second_operand_matches_eager(monkeypatch: pytest.MonkeyPatch, set_tf32: Callable[[bool], None]) -> None:
    # Both rules at once: the output's rows and the second operand's rows are unaligned.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1024, 1031, generator=g), torch.randn(1031, 1031, generator=g)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return aten.mm.default(x, w)

    set_tf32(True)
    compiled = check(fn, x, w, check_stride=False)
    (extern,) = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert extern.outputs[0].layout.size == (1024, 1032)
    assert compiled(x, w).stride() == (1032, 1)  # the padded rows, returned as they are
    assert all(a.stride[0] % 4 == 0 for a in extern.args)


def test_matmuls_are_called_through_torch_bindings_and_match_eager() -> None:
    # The same kernels as the overloads, without their boxed call: the wrapper's host time per
    # matmul is what a host-bound model (Llama at batch 8) waits for.
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g), torch.randn(4, generator=g)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        three = aten.view.default(x, [2, 4, 16])
        return aten.mm.default(x, w), aten.addmm.default(b, x, w), aten.bmm.default(three, aten.expand.default(w, [2, 16, 4]))

    _assert_called_directly(check(fn, x, w, b), torch.mm, torch.addmm, torch.bmm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_products_with_a_transposed_row_major_matrix_are_called_as_linear_and_match_eager_exactly(dtype: torch.dtype) -> None:
    # A linear layer's x @ w.t() (+ b): at::linear runs the same mm/addmm, so the results are
    # eager's bit for bit, and the wrapper makes no view of the weight in Python.
    g = torch.Generator().manual_seed(0)
    x, w, b, v = (torch.randn(*s, generator=g).to(dtype) for s in ((8, 16), (12, 16), (12,), (16, 12)))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))
        computed = aten.mul.Tensor(w, 0.5)  # a weight the graph computes, in a buffer of its own
        o = aten.mm.default(x, aten.permute.default(computed, [1, 0]))
        # Not a row-major matrix's transpose: v.t() is column-major, so this stays a view.
        s = aten.mm.default(x, aten.permute.default(aten.permute.default(v, [1, 0]), [1, 0]))
        return h, o, s

    compiled = check(fn, x, w, b, v, rtol=0, atol=0)
    source = compiled.wrapper_source
    assert source.count(" = _op") == 3 and sum("linear" in repr(f) for f in compiled.namespace.values()) == 1
    linear = next(k for k, f in compiled.namespace.items() if f is torch.nn.functional.linear)
    assert source.count(f"{linear}(") == 2, source
    assert source.count("_as_strided(") == 0, source


def _assert_called_directly(compiled: ptc_inductor.CompiledGraph, *bindings: Any) -> None:
    """The wrapper holds each of ``bindings`` and no overload object (whose boxed call it avoids)."""
    assert compiled.namespace is not None
    held = list(compiled.namespace.values())
    for binding in bindings:
        assert any(h is binding for h in held), binding
    assert not any(isinstance(h, torch._ops.OpOverload) for h in held)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convolutions_are_called_through_torch_bindings_and_match_eager(dtype: torch.dtype) -> None:
    # ResNet-50 (bf16, H200) took 3.707 ms a step with its 53 convolutions called through the
    # binding, 4.684 ms through the overload.
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((2, 3, 9, 7), (4, 3, 3, 3), (4,)))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        strided = aten.convolution.default(x, w, b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1)
        return strided, aten.maximum.default(aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), aten.full.default([], 0.0, dtype=dtype, device=torch.device("cpu")))

    _assert_called_directly(check(fn, x, w, b), torch.convolution)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_is_called_through_its_torch_binding_and_matches_eager(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g).to(dtype) for _ in range(3))

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True, scale=0.25)
        return out, lse

    _assert_called_directly(check(fn, q, k, v), torch._scaled_dot_product_flash_attention_for_cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_inputs_are_stored_in_eager_layout_so_its_output_needs_no_copy(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    # Llama's query is a pointwise result (rotary embedding) of a heads-transposed projection:
    # eager keeps it (batch, seq, heads, dim) in memory and the attention output follows it.
    # Stored row-major instead, the output came back in another layout and was copied.
    import ptc_inductor.codegen.wrapper as wrapper

    copies: list[tuple[int, ...]] = []
    real = wrapper._restride

    def counting(t: torch.Tensor, size: Any, stride: Any) -> torch.Tensor:
        copies.append(tuple(t.stride()))
        return real(t, size, stride)

    monkeypatch.setattr(wrapper, "_restride", counting)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 6, 32, generator=g).to(dtype), torch.randn(32, 96, generator=g).to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        qkv = aten.view.default(aten.mm.default(aten.view.default(x, [12, 32]), w), [2, 6, 3, 4, 8])
        q, k, v = (aten.permute.default(aten.select.int(qkv, 2, i), [0, 2, 1, 3]) for i in range(3))
        q = aten.mul.Tensor(q, 0.5)
        out = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[0]
        return aten.add.Tensor(out, 1.0)

    check(fn, x, w)
    assert copies == []


def test_each_input_is_layout_checked_just_before_its_first_use() -> None:
    """The first matmul starts before the later layers' weights are looked at; a weight passed in
    another layout is still copied before the matmul that reads it, and an unread input is never checked."""
    g = torch.Generator().manual_seed(3)
    x, w1, w2, unused = (torch.randn(6, 6, generator=g) for _ in range(4))

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
        h = aten.exp.default(aten.mm.default(x, w1))
        return aten.mm.default(h, w2)

    gm = trace_core(fn, x, w1, w2, unused)
    compiled = ptc_inductor.compile(gm, config=config_from_env())
    body = compiled.wrapper_source.splitlines()
    first_mm = next(i for i, ln in enumerate(body) if "# mm_default" in ln and "mm_default_1" not in ln)
    checks = {ln.split("if not ", 1)[1].split(".is_contiguous", 1)[0]: i for i, ln in enumerate(body) if ".is_contiguous()" in ln}
    unpack = next(ln for ln in body if ln.strip().endswith("= args"))
    placeholders = [p.strip() for p in unpack.split("=")[0].split(",") if p.strip()]  # the wrapper's names of x, w1, w2, unused
    assert placeholders[3] not in checks
    assert f"del {placeholders[3]}" in [ln.strip() for ln in body]  # released before anything runs
    assert checks[placeholders[0]] < first_mm and checks[placeholders[1]] < first_mm
    assert checks[placeholders[2]] > first_mm
    w2_t = w2.t().contiguous().t()  # the same values, column-major
    torch.testing.assert_close(compiled(x, w1, w2_t, unused), fn(x, w1, w2, unused))


@pytest.mark.parametrize("computed", [True, False], ids=["computed", "input"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_weight_gradient_over_a_zero_padded_gradient_runs_over_its_padded_rows(
    dtype: torch.dtype, computed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An LM head's weight gradient, (vocab x M) by (M x hidden), read from the gradient's rows
    # padded with zeros: a 16-bit product runs over 1032 result rows (the zeros give zero rows)
    # and the extra rows are sliced off; cuBLAS ran 50257 rows with a pre-Hopper kernel.
    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    monkeypatch.setattr(matmul, "_PAD_K_MIN_WORK", 0)
    g = torch.Generator().manual_seed(0)
    grad, w, x = (torch.randn(*s, generator=g).to(dtype) for s in ((1024, 1031), (1031, 64), (1024, 64)))

    def fn(grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = aten.mul.Tensor(grad, 2.0) if computed else grad
        return aten.mm.default(aten.permute.default(flat, [1, 0]), x), aten.mm.default(flat, w)

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check(fn, grad, w, x, **tolerance)
    weight_grad = next(s for s in compiled.schedule.steps if not hasattr(s, "nodes"))
    rows = 1031 if dtype == torch.float32 else 1032
    assert weight_grad.args[0].size == (rows, 1024) and weight_grad.outputs[0].layout.size == (rows, 64)
    got = compiled(grad, w, x)[0]
    assert got.shape == (1031, 64) and got.stride() == (64, 1)
