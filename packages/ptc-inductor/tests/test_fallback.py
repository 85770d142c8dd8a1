"""Fallback nodes (core/2) run as their eager kernels, on C++ and under the Triton interpreter.

Graphs are hand-built with ``GraphBuilder("core/2").fallback``; each is compared with the
GraphModule itself run eagerly. The ``gpu`` cases run on CUDA (with ``TRITON_INTERPRET=0``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import ptc_inductor  # noqa: E402
import ptc_spec  # noqa: E402
from ptc_inductor.config import config_from_env  # noqa: E402
from ptc_spec import GraphBuilder, TensorMeta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

aten = torch.ops.aten
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1"))]


def _compile(gm: torch.fx.GraphModule, backend: str) -> ptc_inductor.CompiledGraph:
    if backend == "triton":
        pytest.importorskip("triton")
    return ptc_inductor.compile(gm, config=config_from_env(backend=backend))


def _check(gm: torch.fx.GraphModule, backend: str, *args: Any) -> ptc_inductor.CompiledGraph:
    compiled = _compile(gm, backend)
    compare_with_eager(compiled, gm, *args)
    return compiled


def _det_kthvalue() -> torch.fx.GraphModule:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((3, 5, 5)))
    # The fallbacks read a lazy value (realized for them) and feed fused kernels.
    e = b.call(aten.mul.Tensor, b.call(aten.exp.default, x), 0.5)
    det = b.fallback(aten.linalg_det.default, e)
    values, indices = b.fallback(aten.kthvalue.default, e, 2, -1)
    b.output(b.call(aten.add.Tensor, det, 1.0), b.call(aten.mul.Tensor, values, 2.0), indices)
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_output_fallbacks_read_fused_values_and_feed_fused_kernels(backend: str) -> None:
    gm = _det_kthvalue()
    compiled = _check(gm, backend, TensorMeta.of((3, 5, 5)).example())
    assert compiled.fallbacks == ("aten.linalg_det.default", "aten.kthvalue.default")
    assert "# fallback aten.linalg_det.default" in compiled.wrapper_source
    assert "# fallback aten.kthvalue.default" in compiled.wrapper_source


def _split_and_views() -> torch.fx.GraphModule:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((6, 6)))
    a = b.call(aten.exp.default, x)
    first, rest = b.fallback(aten.split_with_sizes.default, a, [2, 4])
    d = b.fallback(aten.diagonal.default, a)
    windows = b.fallback(aten.unfold.default, b.call(aten.mul.Tensor, x, 3.0), 1, 3, 1)
    # Read after later kernels that could take the storage of ``a`` if it were freed.
    s = b.call(aten.sum.dim_IntList, first, [1], False)
    b.output(rest, b.call(aten.add.Tensor, d, 1.0), b.call(aten.sum.dim_IntList, windows, [-1], False), s)
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_list_and_view_results_alias_their_input(backend: str) -> None:
    gm = _split_and_views()
    compiled = _check(gm, backend, TensorMeta.of((6, 6)).example())
    aliased = {view: base for s in compiled.schedule.steps if hasattr(s, "aliases") for view, base in s.aliases}
    assert len(aliased) == 4  # both split pieces, the diagonal and the windows
    assert compiled.fallbacks == ("aten.split_with_sizes.default", "aten.diagonal.default", "aten.unfold.default")


def _view_outlives_reuse() -> torch.fx.GraphModule:
    """A view (diagonal) of a buffer, read only after a same-size buffer is made in between."""
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((8, 8)))
    a = b.call(aten.exp.default, x)
    d = b.fallback(aten.diagonal.default, a)
    total = b.call(aten.sum.dim_IntList, d, None, False)
    # Same shape as ``a``, computed after the diagonal's call: the reuse pool would hand it the
    # storage of ``a`` if the diagonal did not keep it alive.
    other = b.call(aten.mul.Tensor, x, total)
    trace = b.fallback(aten.trace.default, other)
    b.output(b.call(aten.add.Tensor, d, trace))
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_keeps_its_input_buffer_out_of_reuse_while_it_is_read(backend: str) -> None:
    gm = _view_outlives_reuse()
    compiled = _check(gm, backend, TensorMeta.of((8, 8)).example())
    (diag,) = [s for s in compiled.schedule.steps if getattr(s, "aliases", ())]
    (view, base) = diag.aliases[0]
    storage = compiled.memory_plan.storage
    assert all(storage[name] != storage[base] for name in storage if name != base)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_fallbacks_run(backend: str) -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((64, 32)))
    mask = b.fallback(aten.bernoulli.p, b.call(aten.exp.default, x), 0.5)
    noise = b.fallback(aten.normal.Tensor_float, x, 2.0)
    perm = b.fallback(aten.randperm.default, 50, dtype=torch.int64, device=torch.device("cpu"))
    b.output(b.call(aten.mul.Tensor, mask, 2.0), noise, perm)
    compiled = _compile(b.build(), backend)
    mask_out, noise_out, perm_out = compiled(torch.randn(64, 32))
    assert set(mask_out.unique().tolist()) <= {0.0, 2.0} and mask_out.shape == (64, 32)
    assert noise_out.shape == (64, 32) and float(noise_out.std()) > 1.0
    assert sorted(perm_out.tolist()) == list(range(50))


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_results_pass_between_fallbacks_and_a_real_view_feeds_a_kernel(backend: str) -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((4, 16)))
    spectrum = b.fallback(aten._fft_r2c.default, b.call(aten.mul.Tensor, x, 2.0), [1], 0, True)
    parts = b.fallback(aten.view_as_real.default, spectrum)
    back = b.fallback(aten._fft_c2r.default, spectrum, [1], 0, 16)
    b.output(spectrum, b.call(aten.mul.Tensor, parts, 0.5), b.call(aten.sub.Tensor, back, x))
    _check(b.build(), backend, TensorMeta.of((4, 16)).example())


def _complex_core_ops() -> torch.fx.GraphModule:
    """Core ops over complex values, none of them marked: a complex input, a complex constant,
    real-to-complex and complex-to-real calls, views of complex buffers, fused real ops around."""
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((4, 6)))
    z = b.input("z", TensorMeta.of((6, 4), dtype=torch.complex64))
    c = b.constant(torch.tensor([1 + 2j, -1j, 3.0, 0.5 - 1j, 2.0, 1j, 4.0], dtype=torch.complex64))
    made = b.call(aten._to_copy.default, b.call(aten.exp.default, x), dtype=torch.complex64)
    zt = b.call(aten.permute.default, z, [1, 0])
    prod = b.call(aten.mul.Tensor, b.call(aten.add.Tensor, made, zt), b.call(aten.slice.Tensor, c, 0, 1, 7))
    shifted = b.call(aten.add.Tensor, prod, 2j)
    parts = b.fallback(aten.view_as_real.default, shifted)
    real = b.call(aten.sum.dim_IntList, b.call(aten.mul.Tensor, parts, parts), [-1], False)
    b.output(shifted, b.call(aten.add.Tensor, real, x), b.call(aten.view.default, z, [3, 8]))
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_core_ops_over_complex_values_run_as_eager_kernels(backend: str) -> None:
    gm = _complex_core_ops()
    g = torch.Generator().manual_seed(0)
    compiled = _check(gm, backend, torch.randn(4, 6, generator=g), torch.randn(6, 4, dtype=torch.complex64, generator=g))
    # No kernel computes on complex numbers (the loop IR has no complex type): exp before the
    # cast is one kernel, the real square, sum and add after view_as_real another.
    assert set(compiled.fallbacks) == {
        "aten._to_copy.default", "aten.permute.default", "aten.add.Tensor", "aten.slice.Tensor",
        "aten.mul.Tensor", "aten.view_as_real.default", "aten.view.default",
    }
    assert compiled.kernel_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_view_inputs_reach_the_fallback_with_their_strides(backend: str) -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((5, 6)))
    t = b.call(aten.permute.default, x, [1, 0])
    values, indices = b.fallback(aten.kthvalue.default, t, 3, 1)
    b.output(values, indices, b.fallback(aten.linalg_det.default, b.call(aten.slice.Tensor, t, 0, 0, 5)))
    _check(b.build(), backend, TensorMeta.of((5, 6)).example())


def test_core2_attention_kernels_are_extern_calls() -> None:
    report = ptc_inductor.coverage("core/2")
    assert not report.missing
    for name in ("_efficient_attention_forward", "_flash_attention_backward", "_scaled_dot_product_cudnn_attention"):
        assert f"aten.{name}.default" in report.extern


def test_an_attention_extern_makes_a_buffer_per_tensor_result() -> None:
    # No CPU kernel exists for it: check the lowering and the wrapper, not a run.
    b = GraphBuilder("core/2")
    q = b.input("q", TensorMeta.of((1, 2, 6, 8)))
    out = b.call(aten._scaled_dot_product_fused_attention_overrideable.default, q, q, q)
    b.output(b.call(aten.mul.Tensor, out[0], 2.0), out[1], out[6], out[7], out[8])
    compiled = ptc_inductor.compile(b.build())
    (call,) = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    shapes = [None if o is None else o.layout.size for o in call.outputs]
    # Undefined results (cum_seq_q/k, the debug mask when not asked for) and SymInts are no buffers.
    assert shapes == [(1, 2, 6, 8), (1, 2, 6), None, None, None, None, (), (), None]
    assert compiled.wrapper_source.rstrip().endswith("None, )")
    assert compiled.fallbacks == ()


def test_an_unmarked_op_outside_the_set_still_fails_clearly() -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((3, 3)))
    b.output(b.fallback(aten.linalg_det.default, x))
    gm = b.build()
    for node in gm.graph.nodes:
        node.meta.pop(ptc_spec.FALLBACK_KEY, None)
    ptc_spec.set_dialect(gm, "core/2")
    with pytest.raises(ptc_inductor.UnsupportedOpError, match=r"aten\.linalg_det\.default.*not marked as a fallback"):
        ptc_inductor.compile(gm)


def test_a_fallback_graph_survives_the_graph_file() -> None:
    gm = ptc_spec.loads(ptc_spec.dumps(_det_kthvalue()))
    compiled = ptc_inductor.compile(gm)
    compare_with_eager(compiled, gm, TensorMeta.of((3, 5, 5)).example())
    assert compiled.fallbacks == ("aten.linalg_det.default", "aten.kthvalue.default")


# -- on a GPU --------------------------------------------------------------------------------------

_ON_GPU = torch.cuda.is_available() and not _INTERPRET


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
def test_fallbacks_run_on_cuda_with_triton_kernels_around_them() -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((3, 5, 5), device="cuda"))
    e = b.call(aten.exp.default, x)
    values, indices = b.fallback(aten.kthvalue.default, e, 2, -1)
    d = b.fallback(aten.diagonal.default, e, 0, 1, 2)
    b.output(b.call(aten.mul.Tensor, values, 2.0), indices, b.call(aten.add.Tensor, d, 1.0))
    gm = b.build()
    compiled = ptc_inductor.compile(gm)
    assert "@triton.jit" in compiled.cpp_source
    compare_with_eager(compiled, gm, TensorMeta.of((3, 5, 5), device="cuda").example())
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
def test_efficient_attention_forward_runs_as_an_extern_on_cuda() -> None:
    b = GraphBuilder("core/2")
    q = b.input("q", TensorMeta.of((1, 64, 2, 32), device="cuda"))
    out = b.call(aten._efficient_attention_forward.default, q, q, q, None, None, None, None, None, 0.0, 0, True)
    b.output(b.call(aten.mul.Tensor, out[0], 2.0), out[1])
    gm = b.build()
    compiled = ptc_inductor.compile(gm)
    compare_with_eager(compiled, gm, TensorMeta.of((1, 64, 2, 32), device="cuda").example(), rtol=1e-3, atol=1e-3)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
def test_cudnn_attention_without_grad_runs_though_its_logsumexp_is_undefined() -> None:
    # Without compute_log_sumexp the kernel returns None where the meta kernel says a tensor
    # (bf16 SDPA inference on Hopper picks this kernel): unread results are never touched.
    shape = (2, 4, 64, 32)
    b = GraphBuilder("core/2")
    q = b.input("q", TensorMeta.of(shape, dtype=torch.bfloat16, device="cuda"))
    out = b.call(aten._scaled_dot_product_cudnn_attention.default, q, q, q, None, False, 0.0, True)
    b.output(b.call(aten.mul.Tensor, out[0], 2.0))
    gm = b.build()
    compiled = ptc_inductor.compile(gm)
    compare_with_eager(compiled, gm, TensorMeta.of(shape, dtype=torch.bfloat16, device="cuda").example(), rtol=2e-2, atol=2e-2)
    torch.cuda.synchronize()


def test_an_expanded_attention_bias_is_stored_once_and_passed_with_zero_strides() -> None:
    # A causal mask computed once and expanded over the heads in every layer: memory-efficient
    # attention reads it through a stride-0 view of one aligned buffer, not a stored copy of
    # (batch, heads, seq, seq) per layer (12 copies of 384 MB in GPT-2 at b8x1024, all live).
    batch, heads, seq, dim, layers = 2, 4, 32, 16, 3
    b = GraphBuilder("core/2")
    q = b.input("q", TensorMeta.of((batch, heads, seq, dim)))
    mask = b.input("mask", TensorMeta.of((batch, 1, seq, seq)))
    bias = b.call(aten.mul.Tensor, mask, -1e4)
    x = q
    for _ in range(layers):
        full = b.call(aten.expand.default, bias, [batch, heads, seq, seq])
        out = b.call(aten._scaled_dot_product_efficient_attention.default, x, q, q, full, False)
        x = b.call(aten.add.Tensor, out[0], q)
    b.output(x)
    compiled = ptc_inductor.compile(b.build())
    calls = [s for s in compiled.schedule.steps if not hasattr(s, "nodes")]
    assert len(calls) == layers
    biases = {call.args[3] for call in calls}
    assert len(biases) == 1  # one stored bias, read by every layer
    (arg,) = biases
    assert arg.size == (batch, heads, seq, seq) and arg.stride[1] == 0
    assert all(s % 16 == 0 for s in (*arg.stride[:-1], arg.offset)) and arg.stride[-1] == 1
    stored = [b for k in compiled.schedule.kernels for n in k.nodes for b in n.outputs]
    assert max(math.prod(b.layout.size) for b in stored) < batch * heads * seq * seq
