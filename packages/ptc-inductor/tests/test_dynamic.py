"""Graphs with symbolic sizes: compiled once, correct at every size their guards admit.

Each graph is traced with some dims symbolic (their example sizes are the hints), compiled
once for the C++ backend and once for Triton (under the interpreter in CI), then run at the
hints, at other and odd sizes, and at 2 (the bottom of a dynamic size's range).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from dynamic_harness import BACKENDS, D, compile_dynamic, sizes_of, tolerance

import ptc_inductor

aten = torch.ops.aten
f32, bf16, i64 = torch.float32, torch.bfloat16, torch.int64
DTYPES = [f32, bf16]


def gelu_tanh(h: Any) -> Any:
    inner = aten.mul.Tensor(aten.add.Tensor(h, aten.mul.Tensor(aten.pow.Tensor_Scalar(h, 3), 0.044715)), math.sqrt(2 / math.pi))
    return aten.mul.Tensor(aten.mul.Tensor(h, 0.5), aten.add.Tensor(aten.tanh.default(inner), 1.0))


def softmax(x: Any, dim: int = -1) -> Any:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [dim], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [dim], True))


def layer_norm(x: Any, w: Any, b: Any) -> Any:
    n = x.shape[-1]
    mean = aten.div.Tensor(aten.sum.dim_IntList(x, [-1], True), n)
    d = aten.sub.Tensor(x, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(d, d), [-1], True), n)
    return aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(d, aten.rsqrt.default(aten.add.Tensor(var, 1e-5))), w), b)


# -- pointwise and reductions -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pointwise_chain_with_broadcasting_is_one_kernel_at_every_size(backend: str, dtype: torch.dtype) -> None:
    def fn(x: Any, w: Any, b: Any) -> Any:
        h = gelu_tanh(aten.add.Tensor(aten.mul.Tensor(x, w), b))
        # A size reaching an op as a scalar: computed from the inputs' sizes at run time.
        return aten.add.Tensor(aten.mul.Tensor(h, aten.sigmoid.default(x)), aten.mul.Tensor(w, x.shape[0]))

    dyn = compile_dynamic(fn, D((6, 8), (0, 1), dtype), D((8,), (0,), dtype), D((6, 1), (0,), dtype), backend=backend)
    assert dyn.compiled.kernel_count == 1
    dyn.run_all(sizes_of(s0=[6, 9, 2, 33], s1=[8, 5, 2, 2], s2=[8, 5, 2, 2], s3=[6, 9, 2, 33]), **tolerance(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_row_column_and_full_reductions_run_at_every_size(backend: str) -> None:
    def fn(x: Any) -> Any:
        rows = aten.sum.dim_IntList(x, [1])
        cols = aten.amax.default(x, [0])
        full = aten.sum.dim_IntList(x, [])
        mean = aten.div.Tensor(aten.sum.dim_IntList(x, [1], True), x.shape[1])
        return rows, cols, full, aten.argmax.default(x, 1), aten.sub.Tensor(x, mean), aten.prod.dim_int(x, 0)

    dyn = compile_dynamic(fn, D((6, 7), (0, 1)), backend=backend)
    dyn.run_all(sizes_of(s0=[6, 2, 13, 40], s1=[7, 2, 31, 3]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_over_a_symbolic_row_is_one_kernel(backend: str, dtype: torch.dtype) -> None:
    dyn = compile_dynamic(softmax, D((6, 10), (0, 1), dtype), backend=backend)
    assert dyn.compiled.kernel_count == 1
    dyn.run_all(sizes_of(s0=[6, 3, 2, 17], s1=[10, 37, 2, 5]), **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_with_symbolic_batch_and_sequence(backend: str, dtype: torch.dtype) -> None:
    dyn = compile_dynamic(layer_norm, D((3, 5, 16), (0, 1), dtype), D((16,), (), dtype), D((16,), (), dtype), backend=backend)
    assert dyn.compiled.kernel_count == 1
    dyn.run_all(sizes_of(s0=[3, 2, 7], s1=[5, 9, 2]), **tolerance(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_symbolic_feature_dim_reduces_in_its_own_range(backend: str) -> None:
    # The normalized dim itself is symbolic: the reduction loops to a run-time bound.
    dyn = compile_dynamic(layer_norm, D((4, 12), (0, 1)), D((12,), (0,)), D((12,), (0,)), backend=backend)
    dyn.run_all(sizes_of(s0=[4, 2, 5], s1=[12, 3, 2], s2=[12, 3, 2], s3=[12, 3, 2]))


# -- externs: matmul, attention ------------------------------------------------------------------


def _linear(x: Any, w: Any, b: Any) -> Any:
    return aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_mlp_with_a_symbolic_batch_calls_matmuls_at_the_run_time_size(backend: str, dtype: torch.dtype) -> None:
    def fn(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return _linear(gelu_tanh(_linear(x, w1, b1)), w2, b2)

    specs = (D((6, 8), (0,), dtype), D((16, 8), (), dtype), D((16,), (), dtype), D((8, 16), (), dtype), D((8,), (), dtype))
    dyn = compile_dynamic(fn, *specs, backend=backend)
    assert "aten.addmm" in dyn.compiled.wrapper_source or "_op" in dyn.compiled.wrapper_source
    dyn.run_all(sizes_of(s0=[6, 2, 11, 64]), **tolerance(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_attention_block_with_a_symbolic_sequence(backend: str) -> None:
    def fn(q: Any, k: Any, v: Any) -> Any:
        s = q.shape[1]
        scores = aten.mul.Tensor(aten.bmm.default(q, aten.permute.default(k, [0, 2, 1])), 0.5)
        causal = aten.ge.Tensor(
            aten.unsqueeze.default(aten.arange.start_step(0, s, 1, dtype=i64, device=torch.device("cpu")), 1),
            aten.arange.start_step(0, s, 1, dtype=i64, device=torch.device("cpu")),
        )
        scores = aten.where.self(causal, scores, aten.full.default([], -1e9, dtype=f32, device=torch.device("cpu")))
        manual = aten.bmm.default(softmax(scores), v)
        heads = [aten.unsqueeze.default(t, 0) for t in (q, k, v)]
        fused = aten._scaled_dot_product_flash_attention_for_cpu.default(*heads, 0.0, True)[0]
        return aten.add.Tensor(manual, aten.squeeze.dims(fused, [0]))

    dyn = compile_dynamic(fn, D((2, 6, 4), (1,)), D((2, 6, 4), (1,)), D((2, 6, 4), (1,)), backend=backend, dialect="core/2")
    dyn.run_all(sizes_of(s0=[6, 2, 13], s1=[6, 2, 13], s2=[6, 2, 13]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_strided_convolution_over_symbolic_batch_and_image_sizes(backend: str) -> None:
    def fn(x: Any, w: Any, b: Any) -> Any:
        y = aten.convolution.default(x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
        shifted = aten.add.Tensor(y, aten.view.default(b, [1, -1, 1, 1]))
        return aten.maximum.default(shifted, aten.full.default([], 0.0, dtype=f32, device=torch.device("cpu")))

    dyn = compile_dynamic(fn, D((2, 3, 9, 8), (0, 2, 3)), D((4, 3, 3, 3)), D((4,)), backend=backend)
    # The trace guarded that each image dim keeps output rows past the first (s >= 3).
    dyn.run_all(sizes_of(s0=[2, 3, 2], s1=[9, 3, 16], s2=[8, 5, 3]))


# -- views, slices, cat, padding -----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_reshapes_and_permutes_with_symbolic_sizes(backend: str) -> None:
    def fn(x: Any) -> Any:
        a, b = x.shape
        flat = aten.view.default(aten.mul.Tensor(x, 2.0), [a * b])
        split = aten.view.default(flat, [a, 2, b // 2])
        moved = aten.clone.default(aten.permute.default(split, [2, 0, 1]), memory_format=torch.contiguous_format)
        transposed = aten.view.default(aten.clone.default(aten.permute.default(x, [1, 0]), memory_format=torch.contiguous_format), [-1])
        grown = aten.expand.default(aten.unsqueeze.default(aten.sum.dim_IntList(x, [1]), 0), [3, a])
        return aten.add.Tensor(moved, 1.0), transposed, grown, aten.squeeze.dims(aten.unsqueeze.default(flat, 1), [1])

    dyn = compile_dynamic(fn, D((6, 8), (0, 1)), backend=backend)
    # The trace guarded that s1 is even (it split it in two halves).
    dyn.run_all(sizes_of(s0=[6, 3, 2, 11], s1=[8, 4, 6, 14]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanding_to_another_inputs_size(backend: str) -> None:
    def fn(a: Any, b: Any) -> Any:
        return aten.add.Tensor(aten.expand.default(a, [b.shape[0], -1]), b)

    dyn = compile_dynamic(fn, D((1, 5), (1,)), D((6, 5), (0, 1)), backend=backend)
    dyn.run_all(sizes_of(s0=[5, 2, 8], s1=[6, 9, 2], s2=[5, 2, 8]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_slices_with_symbolic_bounds_and_selects_from_the_end(backend: str) -> None:
    def fn(x: Any) -> Any:
        inner = aten.slice.Tensor(x, 0, 1, x.shape[0] - 1)
        half = aten.slice.Tensor(x, 1, 0, x.shape[1] // 2)
        strided = aten.slice.Tensor(x, 1, 1, None, 2)
        return aten.mul.Tensor(inner, 2.0), aten.exp.default(half), aten.select.int(x, 1, -1), aten.neg.default(strided)

    dyn = compile_dynamic(fn, D((7, 9), (0, 1)), backend=backend)
    dyn.run_all(sizes_of(s0=[7, 4, 12], s1=[9, 4, 16]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_split_and_pad_along_symbolic_dims(backend: str) -> None:
    def fn(a: Any, b: Any) -> Any:
        joined = aten.cat.default([a, aten.mul.Tensor(b, 3.0), a], 0)
        first = aten.slice.Tensor(joined, 1, 0, 2)
        rest = aten.slice.Tensor(joined, 1, 2, None)
        padded = aten.constant_pad_nd.default(aten.exp.default(a), [1, 2, 0, 3], 0.5)
        return aten.add.Tensor(first, 1.0), rest, padded

    dyn = compile_dynamic(fn, D((5, 4), (0,)), D((3, 4), (0,)), backend=backend)
    dyn.run_all(sizes_of(s0=[5, 2, 9], s1=[3, 8, 2]))


# -- layouts: independent dims, size-1 dims ------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_independent_dynamic_dims_broadcast_and_reduce(backend: str) -> None:
    def fn(col: Any, row: Any) -> Any:
        outer = aten.mul.Tensor(col, row)
        return aten.sum.dim_IntList(outer, [0]), aten.sum.dim_IntList(outer, [1]), aten.exp.default(outer)

    dyn = compile_dynamic(fn, D((6, 1), (0,)), D((1, 5), (1,)), backend=backend)
    dyn.run_all(sizes_of(s0=[6, 2, 19, 3], s1=[5, 23, 2, 3]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dynamic_dim_next_to_a_size_one_dim(backend: str) -> None:
    def fn(x: Any, y: Any) -> Any:
        z = aten.add.Tensor(x, aten.unsqueeze.default(y, 1))
        return aten.sum.dim_IntList(z, [1]), aten.squeeze.dims(z, [1]), aten.amax.default(z, [0, 2], True)

    dyn = compile_dynamic(fn, D((4, 1, 6), (0, 2)), D((4, 6), (0, 1)), backend=backend)
    dyn.run_all(sizes_of(s0=[4, 2, 7], s1=[6, 9, 2], s2=[4, 2, 7], s3=[6, 9, 2]))


# -- indexing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_index_select_and_embedding_with_symbolic_sizes(backend: str) -> None:
    def fn(table: Any, ids: Any, picks: Any) -> Any:
        rows = aten.index_select.default(table, 0, ids)
        chosen = aten.gather.default(table, 1, picks)
        looked_up = aten.index.Tensor(table, [ids])
        return aten.mul.Tensor(rows, 2.0), chosen, aten.sum.dim_IntList(looked_up, [1])

    specs = (D((10, 4), (0,)), D((5,), (0,), i64), D((10, 3), (0,), i64))
    dyn = compile_dynamic(fn, *specs, backend=backend)

    def make(i: int, meta: Any, hints: dict[Any, int]) -> torch.Tensor | None:
        shape = meta.concrete_shape(hints)
        vocab = list(hints.values())[0]
        if i == 1:
            return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(1))
        if i == 2:
            return torch.randint(0, 4, shape, generator=torch.Generator().manual_seed(2))
        return None

    dyn.run_all(sizes_of(s0=[10, 2, 17], s1=[5, 9, 2], s2=[10, 2, 17]), make=make)


# -- fallbacks, scalars ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fallback_over_symbolic_sizes_runs_the_eager_kernel(backend: str) -> None:
    from ptc_spec import GraphBuilder

    def build(env: Any, metas: Any) -> torch.fx.GraphModule:
        b = GraphBuilder("core/2", shape_env=env)
        x = b.input("x", metas[0])
        e = b.call(aten.mul.Tensor, b.call(aten.exp.default, x), 0.5)
        values, indices = b.fallback(aten.kthvalue.default, e, 2, -1)
        diag = b.fallback(aten.diagonal.default, e, 0, 1, 2)
        b.output(b.call(aten.add.Tensor, values, 1.0), indices, b.call(aten.mul.Tensor, diag, 2.0))
        return b.build()

    dyn = compile_dynamic(None, D((3, 5, 6), (0, 1, 2)), backend=backend, builder=build)  # type: ignore[arg-type]
    assert dyn.compiled.fallbacks == ("aten.kthvalue.default", "aten.diagonal.default")
    dyn.run_all(sizes_of(s0=[3, 2, 4], s1=[5, 2, 7], s2=[6, 3, 2]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_size_results_and_size_scalars_are_computed_from_the_inputs(backend: str) -> None:
    def fn(x: Any) -> Any:
        scaled = aten.mul.Tensor(x, x.shape[1] / 2)
        return scaled, x.shape[0] * x.shape[1] + 1, x.shape[1] / 2, aten.add.Tensor(x, x.shape[0])

    dyn = compile_dynamic(fn, D((6, 5), (0, 1)), backend=backend)
    for values in sizes_of(s0=[6, 2, 9], s1=[5, 3, 2]):
        out = dyn.run(values)
        assert out[1] == values["s0"] * values["s1"] + 1 and isinstance(out[1], int)
        assert out[2] == values["s1"] / 2 and isinstance(out[2], float)


def test_one_compile_serves_every_size() -> None:
    before = ptc_inductor.build_stats.compiles
    dyn = compile_dynamic(softmax, D((6, 10), (0, 1)), backend="cpp")
    assert ptc_inductor.build_stats.compiles - before <= 1 and dyn.compiled.library_path is not None
    names = [k.name for k in dyn.compiled.schedule.kernels]
    dyn.run_all(sizes_of(s0=[6, 2, 100, 3], s1=[10, 1000, 2, 7]))
    assert [k.name for k in dyn.compiled.schedule.kernels] == names
    assert [s.name for s in dyn.compiled.symbols] == ["s0", "s1"]
