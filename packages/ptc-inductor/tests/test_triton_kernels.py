"""The Triton backend on hand-picked graphs: kernel styles, dtypes, reductions, random numbers.

Runs under ``TRITON_INTERPRET=1`` on CPU tensors (CI), or on CUDA when TRITON_INTERPRET=0 and a
GPU is present. Graphs run through ``compile_triton_graph`` (lower, schedule, Triton kernels,
a Python step runner) until the wrapper selects backends by device.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import ptc_spec  # noqa: E402
from ptc_inductor.codegen.triton import generate_triton_kernel  # noqa: E402
from ptc_inductor.config import config_from_env  # noqa: E402
from ptc_inductor.ir import ComputedNode, flexible_layout  # noqa: E402
from ptc_inductor.scheduler import Kernel  # noqa: E402
from ptc_inductor.triton_graph import TritonGraph, compile_triton_graph  # noqa: E402
from ptc_inductor.triton_runtime import load_launchers, triton_options  # noqa: E402
from ptc_inductor.virtualized import ops  # noqa: E402
from ptc_spec import TensorMeta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

aten = torch.ops.aten
DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available() else "cpu"


def compile_triton(gm: torch.fx.GraphModule, **config: Any) -> TritonGraph:
    """Compile a core/1 graph with the Triton backend on the test device."""
    return compile_triton_graph(gm, config_from_env(**config), torch.device(DEVICE))


def trace_core(fn: Callable[..., Any], *inputs: Any) -> torch.fx.GraphModule:
    """A core/1 graph of ``fn`` traced on ``inputs``' exact layouts."""
    metas = [TensorMeta.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    return ptc_spec.trace(fn, *metas, dialect="core/1")


def check_triton(fn: Callable[..., Any], *inputs: Any, rtol: float | None = None, atol: float | None = None, **config: Any) -> TritonGraph:
    """Compile ``fn`` with the Triton backend and compare it with eager on ``inputs``."""
    compiled = compile_triton(trace_core(fn, *inputs), **config)
    compare_with_eager(compiled, fn, *inputs, rtol=rtol, atol=atol)
    return compiled


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)


# -- pointwise ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_pointwise_chain_is_one_flat_kernel_and_matches_eager(dtype: torch.dtype) -> None:
    x, w, b = _rand(1000, dtype=dtype), _rand(1000, dtype=dtype, seed=1), _rand(1000, dtype=dtype, seed=2)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = aten.add.Tensor(aten.mul.Tensor(x, w), b)
        gelu = aten.mul.Tensor(aten.mul.Tensor(y, 0.5), aten.add.Tensor(aten.erf.default(aten.mul.Tensor(y, 0.7071067811865476)), 1.0))
        return aten.add.Tensor(aten.mul.Tensor(gelu, aten.sigmoid.default(x)), aten.tanh.default(b))

    low = dtype in (torch.bfloat16, torch.float16)
    compiled = check_triton(fn, x, w, b, **({"rtol": 4e-2, "atol": 4e-2} if low else {}))
    assert [k.style for k in compiled.kernels] == ["flat"]
    assert compiled.source.count("@triton.jit\ndef kernel") == 1


def test_flat_kernel_without_ragged_edge_has_no_mask() -> None:
    x = _rand(8192)
    compiled = check_triton(lambda x: aten.maximum.default(aten.mul.Tensor(x, 2.0), x), x)
    assert "xmask" not in compiled.kernels[0].source
    assert "tl.int32" not in compiled.kernels[0].source or "to(tl.int64)" not in compiled.kernels[0].source


def test_a_large_flat_kernel_indexes_in_32_bits() -> None:
    # 2**20 points: a flat kernel's index never exceeds its points plus one block, so 32 bits
    # hold it (64-bit index arithmetic made large elementwise kernels, GPT-2's gelu among them,
    # run well below bandwidth).
    x = _rand(3, 1 << 18, 4)
    compiled = check_triton(lambda x: aten.mul.Tensor(aten.erf.default(x), 0.5), x)
    (kernel,) = compiled.kernels
    assert kernel.style == "flat" and kernel.index_dtype == "tl.int32" and "tl.int64" not in kernel.source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_contiguous_multi_dim_kernel_addresses_by_its_flat_index(dtype: torch.dtype) -> None:
    # GPT-2's [8, 1024, 3072] GELU loaded at 3145728*x0 + 3072*x1 + x2, each x its own division
    # and modulus of xindex: 40.7 us on an H200 against 38.9 us at xindex. A bias broadcast over
    # the leading dims reads through the run of the last dim alone.
    x, b = _rand(4, 6, 40, dtype=dtype), _rand(40, dtype=dtype)
    compiled = check_triton(lambda x, b: aten.mul.Tensor(aten.erf.default(aten.add.Tensor(x, b)), 0.5), x, b)
    (kernel,) = compiled.kernels
    assert kernel.style == "flat"
    loads = re.findall(r"tl\.load\((\w+) \+ ([^,)]+)", kernel.source)
    assert sorted(where for _, where in loads) == ["x2", "xr0_2"], kernel.source
    assert re.search(r"tl\.store\(\w+ \+ xr0_2\b", kernel.source), kernel.source


def test_fusion_never_leaves_a_large_pointwise_loop_to_a_few_dozen_programs() -> None:
    # Attention's query and key head transposes (the key's last two dims swapped): fused over
    # their common [8, 16] prefix, each of 128 programs would copy 2048 points in a loop.
    q, k = _rand(8, 64, 16, 32), _rand(8, 64, 16, 32, seed=1)

    def fn(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        heads_q = aten.clone.default(aten.permute.default(q, [0, 2, 1, 3]), memory_format=torch.contiguous_format)
        heads_k = aten.clone.default(aten.permute.default(k, [0, 2, 3, 1]), memory_format=torch.contiguous_format)
        return aten.mul.Tensor(heads_q, 0.125), aten.mul.Tensor(heads_k, 0.125)

    compiled = check_triton(fn, q, k, backend="triton")  # the GPU rule, on whatever device runs the test
    assert all(kernel.xnumel >= 1024 for kernel in compiled.kernels), [(k.style, k.xnumel) for k in compiled.kernels]


def test_transposed_and_broadcast_inputs_match_eager() -> None:
    a = _rand(33, 17).t()
    b = _rand(17, 1)
    check_triton(lambda a, b: aten.sub.Tensor(aten.exp.default(a), b), a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_transposing_copies_run_in_tiles_coalesced_both_ways(dtype: torch.dtype) -> None:
    # Attention's key transpose as BERT writes it (heads split, last two dims swapped, scaled,
    # cast to float32), a plain 2-D transpose with ragged edges, and one too thin to tile.
    keys, plain, thin = _rand(2, 40, 3, 32, dtype=dtype), _rand(33, 47, dtype=dtype, seed=1), _rand(8, 300, dtype=dtype, seed=2)

    def fn(keys: torch.Tensor, plain: torch.Tensor, thin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        k = aten.permute.default(keys, [0, 2, 3, 1])
        scaled = aten.clone.default(aten.mul.Tensor(aten._to_copy.default(k, dtype=torch.float32), 0.35), memory_format=torch.contiguous_format)
        return scaled, aten.clone.default(aten.permute.default(plain, [1, 0]), memory_format=torch.contiguous_format), aten.clone.default(
            aten.permute.default(thin, [1, 0]), memory_format=torch.contiguous_format
        )

    compiled = check_triton(fn, keys, plain, thin)
    styles = sorted(k.style for k in compiled.kernels)
    assert styles == ["flat", "looped", "looped"], styles
    for kernel in compiled.kernels:
        if kernel.style == "looped":
            assert kernel.strided  # tall tiles: the stores are contiguous along the rows


def test_a_value_stored_column_major_is_looped_in_memory_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # An LM head's weight, read transposed, padded to aligned rows for cuBLAS (the CUDA rule,
    # switched on here): it is stored column-major, and the padding kernel's loops run down its
    # columns, where both the weight and the padded copy are contiguous.
    from ptc_inductor.lowering import matmul

    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    x, w = _rand(1024, 64, dtype=torch.bfloat16), _rand(1031, 64, dtype=torch.bfloat16, seed=1)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return aten.mm.default(x, aten.permute.default(w, [1, 0]))

    compiled = check_triton(fn, x, w, rtol=2e-2, atol=2e-2)
    # The padding kernel's loops run over (padded columns, K), K fastest: both accesses are
    # contiguous along K. (In the logical order, (K, padded columns), each lane strode by 64.)
    (pad,) = [k for k in compiled.kernels if "flat kernel over [1032, 64]" in k.source]
    assert re.search(r"x1 = xindex % 64\n", pad.source), pad.source


def test_integer_and_bool_pointwise_match_eager() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-20, 20, (7, 9), generator=g).to(DEVICE)
    b = torch.randint(1, 6, (7, 9), generator=g).to(DEVICE)

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.remainder.Tensor(a, b),
            aten.div.Tensor_mode(a, b, rounding_mode="floor"),
            aten.div.Tensor_mode(a, b, rounding_mode="trunc"),
            aten.bitwise_xor.Tensor(a, b),
            aten.maximum.default(a, b),
            aten.logical_and.default(aten.gt.Scalar(a, 0), aten.lt.Scalar(b, 3)),
            aten.bitwise_left_shift.Tensor(a, b),
        )

    check_triton(fn, a, b)


# -- reductions ---------------------------------------------------------------------------------


def test_softmax_is_one_persistent_kernel_and_matches_eager() -> None:
    x = _rand(37, 129)

    def fn(x: torch.Tensor) -> torch.Tensor:
        m = aten.amax.default(x, [1], True)
        e = aten.exp.default(aten.sub.Tensor(x, m))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True))

    compiled = check_triton(fn, x)
    assert [k.style for k in compiled.kernels] == ["persistent"]
    assert compiled.source.count("@triton.jit\ndef kernel") == 1


def test_long_rows_use_a_looped_reduction_and_match_eager() -> None:
    x = _rand(3, 9000)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = aten.amax.default(x, [1], True)
        e = aten.exp.default(aten.sub.Tensor(x, m))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True)), aten.argmin.default(x, 1), aten.sum.dim_IntList(x, None)

    compiled = check_triton(fn, x, rtol=1e-4, atol=1e-5)
    assert "looped" in {k.style for k in compiled.kernels}


def _softmax_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # A log-softmax as decompositions write it: the row max, and the sum of exp(x - max).
    m = aten.amax.default(x, [1], True)
    shifted = aten.sub.Tensor(x, m)
    total = aten.sum.dim_IntList(aten.exp.default(shifted), [1], True)
    return aten.sub.Tensor(shifted, aten.log.default(total)), total


def _special_rows(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = _rand(rows, cols, dtype=dtype) * 4
    x[1, ::3] = float("-inf")  # masked entries: they add nothing
    x[2, :] = float("-inf")  # a row with nothing unmasked: eager's sum is NaN
    x[3, cols // 2] = float("nan")
    x[4, cols - 1] = float("inf")
    x[5, :] = 7.0  # ties everywhere
    x[6, : cols - 1] = float("-inf")  # one value left, in the last tile
    return x


@pytest.mark.parametrize("cols", [129, 9000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_softmax_row_sum_shares_the_row_max_loop_and_matches_eager(cols: int, dtype: torch.dtype) -> None:
    # sum(exp(x - max(x))) is rewritten into one reduction over x (a running max rescales the
    # sum): looped, the row is read once instead of twice. Non-finite rows give eager's values.
    x = _special_rows(8, cols, dtype)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _softmax_pair(aten._to_copy.default(x, dtype=torch.float32))

    compiled = check_triton(fn, x, rtol=1e-5, atol=1e-5, backend="triton")
    source = "\n".join(k.source for k in compiled.kernels)
    assert "sumexp over" in source
    if cols > 4096:
        looped = [k.source for k in compiled.kernels if k.style == "looped"]
        assert len(looped) == 1 and looped[0].count("for roffset in range") == 1  # max and sum: one pass
    with torch.no_grad():
        fused, reference = compiled(x)[1], fn(x)[1]
    assert torch.equal(fused.isnan(), reference.isnan())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_value_returned_in_one_shape_and_read_in_another_is_one_kernel(dtype: torch.dtype) -> None:
    # Stored over (tokens, features), read over (batch, seq, features): the reader's leading
    # dims are merged so that both share one loop (flatten.py).
    x = _rand(14, 64, dtype=dtype)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = aten.add.Tensor(aten.mul.Tensor(x, 2.0), 1.0)
        return h, aten.sigmoid.default(aten.view.default(h, [2, 7, 64]))

    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    compiled = check_triton(fn, x, backend="triton", **tolerance)
    assert len(compiled.kernels) == 1, [k.source for k in compiled.kernels]


def test_a_sum_of_exp_over_other_values_than_the_max_is_left_alone() -> None:
    # exp(y - max(x)) with y != x is not a softmax's sum: it keeps reading the max.
    x, y = _rand(3, 9000), _rand(3, 9000, seed=1)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m = aten.amax.default(x, [1], True)
        return aten.sum.dim_IntList(aten.exp.default(aten.sub.Tensor(y, m)), [1], True)

    compiled = check_triton(fn, x, y, rtol=1e-5, atol=1e-5, backend="triton")
    source = "\n".join(k.source for k in compiled.kernels)
    assert "sumexp" not in source and source.count("for roffset in range") == 2, source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_with_nan_and_ties_match_eager(dtype: torch.dtype) -> None:
    x = _rand(6, 10, dtype=dtype)
    x[1, 3] = float("nan")
    x[2, :] = 1.0
    x[4, 2] = float("-inf")

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.amax.default(x, [1]),
            aten.amin.default(x, [0]),
            aten.argmax.default(x, 1),
            aten.argmin.default(x, 1),
            aten.argmax.default(x, 0),
            aten.any.dims(aten.gt.Scalar(x, 1.5), [1]),
            aten.all.dims(aten.gt.Scalar(x, -3.0), [0]),
            aten.prod.dim_int(aten.sigmoid.default(x), 1),
        )

    check_triton(fn, x, **({"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}))


def test_layer_norm_with_residual_matches_eager() -> None:
    x, r = _rand(16, 96, dtype=torch.bfloat16), _rand(16, 96, dtype=torch.bfloat16, seed=1)
    w, b = _rand(96, seed=2), _rand(96, seed=3)

    def fn(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = aten._to_copy.default(aten.add.Tensor(x, r), dtype=torch.float32)
        mean = aten.mul.Tensor(aten.sum.dim_IntList(h, [1], True), 1 / 96)
        d = aten.sub.Tensor(h, mean)
        var = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(d, d), [1], True), 1 / 96)
        y = aten.mul.Tensor(d, aten.rsqrt.default(aten.add.Tensor(var, 1e-5)))
        return aten._to_copy.default(aten.add.Tensor(aten.mul.Tensor(y, w), b), dtype=torch.bfloat16)

    check_triton(fn, x, r, w, b, rtol=2e-2, atol=2e-2)


def _welford_kernel(rows: int, cols: int) -> tuple[Kernel, dict[str, Any], dict[str, Any]]:
    """A hand-built welford node: mean and (population) variance of each row of ``inp``."""
    from ptc_inductor.analysis import analyze
    from ptc_inductor.ir import Buffer

    dev = torch.device(DEVICE)
    inp = Buffer("inp", flexible_layout(torch.float32, dev, (rows, cols)), "input")
    mean = Buffer("mean", flexible_layout(torch.float32, dev, (rows,)), "computed")
    var = Buffer("var", flexible_layout(torch.float32, dev, (rows,)), "computed")

    def body(xs: Any, rs: Any) -> None:
        m, m2, n = ops.reduction(torch.float32, torch.float32, "welford", ops.load("inp", xs[0] * cols + rs[0]))
        ops.store("mean", xs[0], m)
        ops.store("var", xs[0], ops.truediv(m2, n))

    node = ComputedNode("buf0", "reduction", (mean, var), (rows,), (cols,), body, ("var_mean",), "welford")
    buffers = {b.name: b for b in (inp, mean, var)}
    return Kernel("kernel0", (node,), (rows,)), buffers, {node.name: analyze(node)}


@pytest.mark.parametrize("cols", [100, 9000])
def test_welford_matches_eager_variance(cols: int) -> None:
    kernel, buffers, accesses = _welford_kernel(3, cols)
    cfg = config_from_env()
    tk = generate_triton_kernel(kernel, buffers, accesses, cfg)
    assert tk.style == ("persistent" if cols == 100 else "looped")
    launcher = load_launchers([tk], triton_options(cfg))[tk.name]
    x = _rand(3, cols) * 3 + 5
    mean, var = torch.empty(3, device=DEVICE), torch.empty(3, device=DEVICE)
    launcher(*[{"inp": x, "mean": mean, "var": var}[p] for p in tk.params])
    torch.testing.assert_close(mean, x.mean(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var, x.var(1, unbiased=False), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "shape,dims",
    [((4096, 6), [0]), ((8, 512, 12), [0, 1]), ((4096, 1, 5), [0]), ((4, 32, 64, 12), [1, 2]), ((32, 4, 64, 12), [0, 2]), ((8, 1, 256, 6), [0, 1, 2])],
)
def test_long_column_reductions_are_split_into_partials(shape: tuple[int, ...], dims: list[int]) -> None:
    # Few outputs over a long column: one program per tile of outputs would leave a GPU idle,
    # so partial sums over chunks of the column come first, then a sum of the partials.
    def fn(g: torch.Tensor, x: torch.Tensor) -> Any:
        return aten.sum.dim_IntList(aten.mul.Tensor(g, x), dims), aten.amax.default(x, dims, True)

    compiled = check_triton(fn, _rand(*shape), _rand(*shape, seed=1), rtol=1e-5, atol=1e-4, backend="triton")
    assert compiled.kernel_count == 2


def test_row_reductions_and_short_columns_are_not_split() -> None:
    def softmax_fn(x: torch.Tensor) -> Any:
        e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True))

    softmax = check_triton(softmax_fn, _rand(4, 3000), backend="triton")
    short = check_triton(lambda x: aten.sum.dim_IntList(x, [0]), _rand(1000, 6), backend="triton")
    assert (softmax.kernel_count, short.kernel_count) == (1, 1)


def _layer_norm_backward(g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n, last = x.shape[-1], x.ndim - 1
    xhat = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
    gw = aten.mul.Tensor(g, w)
    c1 = aten.mul.Tensor(aten.sum.dim_IntList(gw, [last], True), 1.0 / n)
    c2 = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(gw, xhat), [last], True), 1.0 / n)
    dx = aten.mul.Tensor(aten.sub.Tensor(aten.sub.Tensor(gw, c1), aten.mul.Tensor(xhat, c2)), rstd)
    rows = list(range(last))
    return dx, aten.sum.dim_IntList(aten.mul.Tensor(g, xhat), rows), aten.sum.dim_IntList(g, rows)


@pytest.mark.parametrize("rows,cols", [(2048, 64), (2048, 100)])
def test_column_partials_ride_along_the_row_kernel_that_reads_the_same_rows(rows: int, cols: int) -> None:
    # Layer norm backward: the weight and bias gradients (column sums) read the rows that the
    # input gradient's kernel reads; one row-loop kernel reads them once, then the partials' sum.
    x = _rand(rows, cols, seed=1)
    mean, rstd = x.mean(1, keepdim=True), torch.rsqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5)
    inputs = (_rand(rows, cols), x, mean, rstd, _rand(cols, seed=2))
    compiled = check_triton(_layer_norm_backward, *inputs, rtol=1e-4, atol=1e-4, backend="triton")
    assert [k.style for k in compiled.kernels] == ["rowloop", "persistent"]
    assert len(re.findall(r"tl\.load\(arg0 ", compiled.kernels[0].source)) == 1, "the row of g is loaded once per row"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_column_partials_over_batch_and_sequence_ride_along_the_merged_row_kernel(dtype: torch.dtype) -> None:
    # A transformer's layer norm backward over (batch, seq) rows: the weight gradients are
    # split into chunks of tokens across both dims, and the row kernel runs over tokens, so
    # the partials ride along it; 8 chunks (one per batch row) would leave a GPU idle.
    x = _rand(8, 256, 100, seed=1).to(dtype)
    mean = x.float().mean(2, keepdim=True)
    rstd = torch.rsqrt(x.float().var(2, unbiased=False, keepdim=True) + 1e-5)
    inputs = (_rand(8, 256, 100).to(dtype), x, mean, rstd, _rand(100, seed=2).to(dtype))
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    compiled = check_triton(_layer_norm_backward, *inputs, backend="triton", **tolerance)
    assert [k.style for k in compiled.kernels] == ["rowloop", "persistent"]
    assert "in 64 chunks of 32 rows" in compiled.kernels[0].source
    assert len(re.findall(r"tl\.load\(arg0 ", compiled.kernels[0].source)) == 1, "the row of g is loaded once per row"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_loop_over_short_rows_takes_several_rows_per_step(dtype: torch.dtype) -> None:
    # 48 columns: a tile of one row would be 64 lanes; the loop takes 32 rows per step and
    # combines them per column after the loop, with NaN and inf still reaching the max and sum.
    g = _rand(4, 512, 48).to(dtype)
    g[1, 7, 5], g[3, 100, 40], g[2, 0, 0] = float("nan"), float("inf"), -float("inf")

    def fn(g: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = aten.mul.Tensor(g, w)
        return aten.sub.Tensor(h, aten.amax.default(h, [2], True)), aten.sum.dim_IntList(h, [0, 1]), aten.amax.default(h, [0, 1])

    tolerance = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-1}
    compiled = check_triton(fn, g, _rand(48, seed=3).to(dtype), backend="triton", **tolerance)
    assert [k.style for k in compiled.kernels] == ["rowloop", "persistent"]
    assert "tl.arange(0, 32)[:, None]" in compiled.kernels[0].source and compiled.kernels[0].rows == 32


def test_partials_read_what_the_row_kernel_wrote_at_the_same_element() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = aten.mul.Tensor(a, b)
        return h, aten.sum.dim_IntList(h, [1], True), aten.amax.default(h, [0], False)

    compiled = check_triton(fn, _rand(2048, 48), _rand(2048, 48, seed=1), backend="triton")
    assert [k.style for k in compiled.kernels] == ["rowloop", "persistent"]


def test_column_partials_over_other_rows_keep_their_own_kernel() -> None:
    # Nothing to share: the column sum of y would only lengthen the softmax kernel's programs.
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True)), aten.sum.dim_IntList(y, [0])

    compiled = check_triton(fn, _rand(2048, 32), _rand(2048, 32, seed=1), backend="triton")
    assert "rowloop" not in [k.style for k in compiled.kernels]
    assert compiled.kernel_count == 3


# -- indexing, masks, random --------------------------------------------------------------------


def test_cat_pad_and_gather_use_masked_and_indirect_loads() -> None:
    a, b = _rand(4, 5), _rand(4, 3, seed=1)
    idx = torch.tensor([[0, 2, 1], [4, 4, 0], [1, 1, 1], [3, 0, 2]], device=DEVICE)

    def fn(a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.cat.default([a, b], 1),
            aten.constant_pad_nd.default(a, [1, 2, 0, 1], 0.5),
            aten.gather.default(a, 1, idx),
            aten.index_select.default(a, 1, aten.select.int(idx, 0, 1)),
        )

    check_triton(fn, a, b, idx)


def test_every_cat_input_is_loaded_only_inside_its_own_range() -> None:
    # An unmasked load of a later input at an index before it reads before that buffer: the
    # selects discard the value, but on the GPU the read itself faulted (gpt-mini's backward,
    # which concatenates the q, k and v gradients).
    a, b, c = _rand(4, 5), _rand(4, 3, seed=1), _rand(4, 2, seed=2)

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (aten.mul.Tensor(aten.cat.default([a, b, c], 1), 2.0),)

    compiled = check_triton(fn, a, b, c)
    loads = [line for line in compiled.source.splitlines() if "tl.load(" in line]
    assert len(loads) == 3
    assert all(re.search(r"tl\.load\(.*, xmask & tmp\d+, other=", line) for line in loads), "\n".join(loads)


def test_seeded_random_numbers_have_the_right_distribution() -> None:
    n = 1 << 14

    def fn(seed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u = torch.ops.ptc.rand.default(seed, 0, [n], dtype=torch.float32, device=torch.device(DEVICE))
        z = torch.ops.ptc.randn.default(seed, n, [n], dtype=torch.float32, device=torch.device(DEVICE))
        return u, z

    seed = torch.tensor(1234, device=DEVICE)
    compiled = compile_triton(trace_core(fn, seed))
    u, z = compiled(seed)
    u2, _ = compiled(seed)
    u3, _ = compiled(torch.tensor(99, device=DEVICE))
    assert torch.equal(u, u2) and not torch.equal(u, u3)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.02 and abs(float(u.var()) - 1 / 12) < 0.01
    assert abs(float(z.mean())) < 0.05 and abs(float(z.std()) - 1.0) < 0.05


def test_index_arithmetic_prints_floor_division_and_modulus() -> None:
    from ptc_inductor.codegen.triton_index import texpr
    from ptc_inductor.indexing import floordiv, mod, xvar

    e = floordiv(xvar(0), 7) * 3 + mod(xvar(0), 7) + sympy.Integer(2)
    assert texpr(sympy.expand(e)).count("//") == 1 and "% 7" in texpr(sympy.expand(e))


def test_column_reduction_loops_over_tall_tiles_and_matches_eager() -> None:
    x = _rand(300, 40)
    compiled = check_triton(lambda x: (aten.sum.dim_IntList(x, [0]), aten.argmax.default(x, 0)), x, rtol=1e-4, atol=1e-4)
    assert [(k.style, k.strided) for k in compiled.kernels] == [("looped", True)]


def test_a_single_element_read_under_a_block_mask_matches_eager() -> None:
    # torch.linalg.vander: cat([ones, cumprod(x)]) with x of one element, so the second
    # operand's load has a constant index but the cat's block mask.
    def fn(x: torch.Tensor) -> torch.Tensor:
        ones = aten.full.default([1, 1], 1.0, dtype=torch.float32, device=x.device)
        return aten.cat.default([ones, aten.exp.default(x), aten.mul.Tensor(x, 2.0)], 1)

    check_triton(fn, torch.randn(1, 1, device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_independent_reductions_over_one_range_share_one_loop(dtype: torch.dtype, channels_last: bool) -> None:
    # A batch norm's backward: four sums over (N, H, W) of products of the same two tensors,
    # none reading another's result. Each used to loop over its inputs on its own.
    grad, x = _rand(4, 8, 48, 48, dtype=dtype), _rand(4, 8, 48, 48, dtype=dtype, seed=1)
    if channels_last:
        grad, x = grad.contiguous(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    mean, invstd = _rand(1, 8, 1, 1, seed=2), _rand(1, 8, 1, 1, seed=3).abs()

    def fn(grad: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g = aten._to_copy.default(grad, dtype=torch.float32)
        xhat = aten.mul.Tensor(aten.sub.Tensor(aten._to_copy.default(x, dtype=torch.float32), mean), invstd)
        dims = [0, 2, 3]
        return (
            aten.sum.dim_IntList(g, dims),
            aten.sum.dim_IntList(aten.mul.Tensor(g, xhat), dims),
            aten.sum.dim_IntList(aten.mul.Tensor(aten.mul.Tensor(g, g), xhat), dims),
            aten.amax.default(aten.mul.Tensor(g, 2.0), dims),
        )

    compiled = check_triton(fn, grad, x, mean, invstd, rtol=1e-4, atol=1e-3)
    looped = [k for k in compiled.kernels if k.style == "looped"]
    assert looped, [k.style for k in compiled.kernels]
    for kernel in looped:
        loops = kernel.source.count("for roffset in range")
        assert loops == 1, kernel.source


def test_a_reduction_reading_another_reductions_result_keeps_its_own_loop() -> None:
    # A variance over the mean this kernel computed: the second sum needs the first's stored
    # result, so it cannot run in the same pass.
    x = _rand(3, 20000)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = aten.div.Tensor(aten.sum.dim_IntList(x, [1], True), 20000.0)
        centered = aten.sub.Tensor(x, mean)
        return mean, aten.sum.dim_IntList(aten.mul.Tensor(centered, centered), [1])

    compiled = check_triton(fn, x, rtol=1e-4, atol=1e-3)
    sources = [k.source for k in compiled.kernels if k.style == "looped"]
    assert sum(s.count("for roffset in range") for s in sources) == 2, sources


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_widened_value_worth_storing_is_stored_narrow(dtype: torch.dtype) -> None:
    # A ReLU's gradient in bf16, read as float32 by a batch norm's backward sums and its
    # pointwise tail: often enough to be stored once. Storing the float32 copy doubled every
    # reader's bytes; the narrow value is stored and each reader converts it as it loads.
    grad, x, y = _rand(4, 8, 48, 48, dtype=dtype), _rand(4, 8, 48, 48, dtype=dtype, seed=1), _rand(4, 8, 48, 48, dtype=dtype, seed=4)
    mean, invstd = _rand(1, 8, 1, 1, seed=2), _rand(1, 8, 1, 1, seed=3).abs()

    def fn(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor) -> tuple[torch.Tensor, ...]:
        relu_grad = aten.where.self(aten.le.Scalar(y, 0.0), aten.scalar_tensor.default(0.0, dtype=dtype), grad)
        g = aten._to_copy.default(relu_grad, dtype=torch.float32)
        xhat = aten.mul.Tensor(aten.sub.Tensor(aten._to_copy.default(x, dtype=torch.float32), mean), invstd)
        dims = [0, 2, 3]
        s1 = aten.sum.dim_IntList(g, dims, True)
        s2 = aten.sum.dim_IntList(aten.mul.Tensor(g, xhat), dims, True)
        s3 = aten.sum.dim_IntList(aten.mul.Tensor(aten.mul.Tensor(g, g), xhat), dims, True)
        s4 = aten.amax.default(aten.mul.Tensor(g, 2.0), dims, True)
        scale = aten.add.Tensor(aten.add.Tensor(s2, s3), s4)
        out = aten.sub.Tensor(aten.mul.Tensor(g, 3.0), aten.mul.Tensor(xhat, aten.mul.Tensor(s1, scale)))
        return aten._to_copy.default(out, dtype=dtype), s1

    compiled = check_triton(fn, grad, x, y, mean, invstd, rtol=2e-2, atol=2e-2)
    stored = {
        name: dt for k in compiled.kernels if k.style == "flat"
        for name, dt in zip(k.params, k.param_dtypes) if f"tl.store({name} " in k.source
    }  # fmt: skip
    assert len(stored) == 2 and set(stored.values()) == {dtype}, stored
