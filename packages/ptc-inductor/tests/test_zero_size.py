"""Zero-size and size-1 tensors through every kernel kind, on C++ and Triton, compared with eager.

A kernel that writes no element is never launched (on a GPU its one program would write out of
bounds and poison the CUDA context); a reduction over an empty range still runs and writes
eager's identity. The Triton cases run under ``TRITON_INTERPRET=1`` on CPU tensors; the
``gpu`` cases run the same graphs on CUDA (with ``TRITON_INTERPRET=0``) and then check the
process can still use the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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
Fn = Callable[..., Any]


def _pointwise(x: torch.Tensor) -> torch.Tensor:
    return aten.mul.Tensor(aten.exp.default(x), aten.sigmoid.default(x))


def _row_sum(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # sum, prod, any and all over the last dim: over an empty dim eager gives 0, 1, False, True.
    ne = aten.ne.Scalar(x, 0.0)
    return (
        aten.sum.dim_IntList(x, [-1], False),
        aten.prod.dim_int(x, -1, False),
        aten.any.dims(ne, [-1], False),
        aten.all.dims(ne, [-1], False),
    )


def _whole_sum(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return aten.sum.dim_IntList(x, None, False), aten.prod.default(x)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))


def _col_sum(x: torch.Tensor) -> torch.Tensor:
    # Thousands of rows and few columns: split into partial column sums on the Triton backend.
    return aten.sum.dim_IntList(aten.mul.Tensor(x, 2.0), [0], False)


def _row_loop(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # A row reduction and a split column sum over the same rows: one Triton row-loop kernel.
    y = aten.sub.Tensor(x, aten.sum.dim_IntList(x, [1], True))
    return y, aten.sum.dim_IntList(x, [0], False)


def _argmax(x: torch.Tensor) -> torch.Tensor:
    return aten.argmax.default(x, -1, False)


def _scan(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return aten.cumsum.default(aten.add.Tensor(x, 1.0), -1), aten.sort.default(x, -1)[0]


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # k == 0 gives zeros; m == 0 or n == 0 an empty result that the epilogue kernel skips.
    return aten.add.Tensor(aten.mm.default(x, w), 1.0)


def _fallback_graph(x: torch.Tensor) -> torch.fx.GraphModule:
    b = GraphBuilder("core/2")
    t = b.input("x", TensorMeta.from_tensor(x))
    flipped = b.fallback(aten.flip.default, b.call(aten.exp.default, t), [0])
    b.output(b.call(aten.add.Tensor, flipped, 1.0))
    return b.build()


# (id, fn, input shapes): every kernel kind with an empty and a size-1 case.
CASES: list[tuple[str, Fn, tuple[tuple[int, ...], ...]]] = [
    ("pointwise-empty", _pointwise, ((0, 5),)),
    ("pointwise-ones", _pointwise, ((1, 1, 3),)),
    ("reduce-empty-rows", _row_sum, ((0, 5),)),
    ("reduce-over-empty", _row_sum, ((3, 0),)),
    ("reduce-size1", _row_sum, ((4, 1),)),
    ("reduce-all-empty", _whole_sum, ((0, 4),)),
    ("reduce-all-size1", _whole_sum, ((1, 1),)),
    ("persistent-empty", _softmax, ((0, 7),)),
    ("persistent-size1", _softmax, ((5, 1),)),
    ("looped-empty", _softmax, ((0, 9000),)),
    ("looped-over-empty", _row_sum, ((2, 0, 9000),)),
    ("split-empty", _col_sum, ((4096, 0),)),
    ("split-size1", _col_sum, ((4096, 1),)),
    ("rowloop-empty-cols", _row_loop, ((2048, 0),)),
    ("rowloop-size1", _row_loop, ((2048, 1),)),
    ("argmax-size1", _argmax, ((3, 1),)),
    ("argmax-empty", _argmax, ((0, 4),)),
    ("scan-empty", _scan, ((3, 0),)),
    ("scan-size1", _scan, ((1, 1),)),
    ("extern-k0", _mm, ((3, 0), (0, 4))),
    ("extern-empty", _mm, ((0, 5), (5, 4))),
]


def _inputs(shapes: tuple[tuple[int, ...], ...], device: str) -> list[torch.Tensor]:
    return [TensorMeta.of(s).example(seed=i, device=device) for i, s in enumerate(shapes)]


def _check(fn: Fn, shapes: tuple[tuple[int, ...], ...], device: str, backend: str) -> tuple[ptc_inductor.CompiledGraph, Any]:
    """Compile ``fn`` for inputs of ``shapes``, compare it with eager; return it and its outputs."""
    args = _inputs(shapes, device)
    gm = ptc_spec.trace(fn, *[TensorMeta.from_tensor(a) for a in args], dialect="core/1")
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend=backend))
    return compiled, compare_with_eager(compiled, fn, *args)


def _backends() -> list[Any]:
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    return ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not interpret, reason="Triton on CPU tensors needs TRITON_INTERPRET=1"))]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize(("name", "fn", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_zero_size_and_size_one_kernels_match_eager(name: str, fn: Fn, shapes: Any, backend: str) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
    compiled, outputs = _check(fn, shapes, "cpu", backend)
    empty = [k.name for k in compiled.schedule.kernels if k.is_empty]
    for k in empty:
        assert f"# {k} is not launched" in compiled.wrapper_source
        assert f"{k}(" not in compiled.wrapper_source.replace(f"# {k} is not launched", "")
    if name == "pointwise-empty":
        assert empty == ["kernel0"] and compiled.kernel_count == 1
    if name == "reduce-over-empty":
        assert not empty  # it writes eager's identity values


def test_a_reduction_over_an_empty_dim_runs_and_writes_the_identity() -> None:
    x = torch.zeros(3, 0)
    compiled, _ = _check(_row_sum, ((3, 0),), "cpu", "cpp")
    assert compiled.kernel_count >= 1 and not any(k.is_empty for k in compiled.schedule.kernels)
    total, prod, any_, all_ = compiled(x)
    assert total.tolist() == [0.0] * 3 and prod.tolist() == [1.0] * 3
    assert any_.tolist() == [False] * 3 and all_.tolist() == [True] * 3


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("shape", [(0, 3), (1, 1)], ids=["empty", "size1"])
def test_zero_size_and_size_one_fallbacks_match_eager(shape: tuple[int, ...], backend: str) -> None:
    x = TensorMeta.of(shape).example()
    gm = _fallback_graph(x)
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend=backend))
    compare_with_eager(compiled, gm, x)


def test_a_triton_launcher_over_no_points_launches_nothing() -> None:
    pytest.importorskip("triton")
    from ptc_inductor.triton_kernel import TritonKernel
    from ptc_inductor.triton_runtime import TritonLauncher, TritonOptions

    kernel = TritonKernel("kernel0", "", ("buf0",), (torch.float32,), "flat", 0, 0, 0, "tl.int32")
    # No function and no module: a launch attempt would fail loudly.
    launcher = TritonLauncher(kernel, TritonOptions(cache_dir="/nonexistent"), None, "/nonexistent.py")
    launcher(torch.empty(0))
    assert launcher.config is None


# -- on a GPU: the same graphs, then the CUDA context must still be healthy -------------------------

_ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


def _assert_cuda_healthy() -> None:
    torch.cuda.synchronize()
    y = torch.arange(4, device="cuda", dtype=torch.float32) * 2
    assert y.sum().item() == 12.0


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
@pytest.mark.parametrize(("name", "fn", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_zero_size_and_size_one_kernels_on_cuda_leave_the_gpu_healthy(name: str, fn: Fn, shapes: Any) -> None:
    _check(fn, shapes, "cuda", "auto")
    _assert_cuda_healthy()


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
@pytest.mark.parametrize("shape", [(0, 3), (1, 1)], ids=["empty", "size1"])
def test_zero_size_fallbacks_on_cuda_leave_the_gpu_healthy(shape: tuple[int, ...]) -> None:
    x = TensorMeta.of(shape, device="cuda").example()
    gm = _fallback_graph(x)
    compiled = ptc_inductor.compile(gm)
    compare_with_eager(compiled, gm, x)
    _assert_cuda_healthy()


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
def test_an_empty_window_like_bartlett_zero_leaves_the_gpu_healthy() -> None:
    # The reproducer: a window of length 0 is an arange over no points, then pointwise.
    def window(x: torch.Tensor) -> torch.Tensor:
        n = aten.arange.start_step(0, 0, 1, dtype=torch.float32, device=torch.device("cuda"))
        return aten.add.Tensor(aten.mul.Tensor(aten.abs.default(aten.sub.Tensor(n, 1.0)), -2.0), x)

    _check(window, ((0,),), "cuda", "auto")
    _assert_cuda_healthy()
