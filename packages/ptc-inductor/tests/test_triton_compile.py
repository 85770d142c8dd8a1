"""ptc_inductor.compile choosing the Triton backend: forced on CPU tensors under
TRITON_INTERPRET=1 (CI), chosen automatically for CUDA tensors on a GPU (marked gpu)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import ptc_inductor  # noqa: E402
import ptc_spec  # noqa: E402
from ptc_inductor.config import Config, config_from_env  # noqa: E402
from ptc_spec import TensorMeta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

pytest.importorskip("triton")
aten = torch.ops.aten


def softmax(x: torch.Tensor) -> torch.Tensor:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True))


def mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return aten.tanh.default(aten.addmm.default(b, x, w))


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return aten.mul.Tensor(aten.sigmoid.default(aten.add.Tensor(x, y)), aten.exp.default(aten.neg.default(y)))


CASES: list[tuple[str, Callable[..., Any], tuple[tuple[int, ...], ...], int]] = [
    ("softmax", softmax, ((8, 33),), 1),
    ("mm_epilogue", mlp, ((4, 8), (8, 16), (16,)), 1),
    ("pointwise_chain", chain, ((5, 7), (5, 7)), 1),
]


def _compile(fn: Callable[..., Any], shapes: tuple[tuple[int, ...], ...], device: str, config: Config) -> tuple[Any, list[torch.Tensor]]:
    metas = [TensorMeta.of(s, device=device) for s in shapes]
    gm = ptc_spec.trace(fn, *metas, dialect="core/1")
    return ptc_inductor.compile(gm, config=config), [m.example(seed=i) for i, m in enumerate(metas)]


@pytest.mark.parametrize(("name", "fn", "shapes", "kernels"), CASES, ids=[c[0] for c in CASES])
def test_forced_triton_backend_matches_eager_on_cpu_under_the_interpreter(name: str, fn: Any, shapes: Any, kernels: int) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("forcing Triton for CPU tensors needs TRITON_INTERPRET=1")
    compiled, args = _compile(fn, shapes, "cpu", config_from_env(backend="triton"))
    assert compiled.kernel_count == kernels
    assert "@triton.jit" in compiled.cpp_source
    compare_with_eager(compiled, fn, *args)


def test_auto_backend_keeps_cpu_graphs_on_cpp() -> None:
    compiled, args = _compile(softmax, ((4, 9),), "cpu", config_from_env(backend="auto"))
    assert "@triton.jit" not in compiled.cpp_source
    compare_with_eager(compiled, softmax, *args)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend 'metal' is not one of auto, cpp, triton"):
        config_from_env(backend="metal")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", reason="needs CUDA and TRITON_INTERPRET=0")
@pytest.mark.parametrize(("name", "fn", "shapes", "kernels"), CASES, ids=[c[0] for c in CASES])
def test_auto_backend_uses_triton_for_cuda_tensors(name: str, fn: Any, shapes: Any, kernels: int) -> None:
    compiled, args = _compile(fn, shapes, "cuda", config_from_env(backend="auto"))
    assert compiled.kernel_count == kernels and "@triton.jit" in compiled.cpp_source
    compare_with_eager(compiled, fn, *args)


def test_every_libdevice_function_the_codegen_names_exists_on_cuda() -> None:
    # The interpreter's libdevice (CI) is numpy and has more functions than CUDA's: a name only
    # it has passes every CPU test and fails to compile on the GPU (fmax, fmin did).
    import inspect
    import re

    from triton.language.extra.cuda import libdevice

    from ptc_inductor.codegen import triton, triton_math, triton_reduction

    named: set[str] = set()
    for module in (triton, triton_math, triton_reduction):
        named |= set(re.findall(r"libdevice\.(\w+)\(", inspect.getsource(module)))
    assert named, "the codegen names no libdevice function: the pattern is out of date"
    assert sorted(n for n in named if not hasattr(libdevice, n)) == []
