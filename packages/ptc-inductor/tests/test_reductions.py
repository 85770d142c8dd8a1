"""Reductions over dims, keepdim, whole tensors and layouts, compared with eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import check

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_reductions_match_eager(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 9, 5, generator=g).to(dtype)
    t = torch.randn(9, 6, generator=g).to(dtype).t()
    one = torch.randn(1, 7, generator=g).to(dtype)

    def fn(a: torch.Tensor, t: torch.Tensor, one: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for x in (a, t, one):
            nd = x.dim()
            for dims in ([-1], [0], list(range(nd)), [0, nd - 1]):
                outs.append(aten.sum.dim_IntList(x, dims))
                outs.append(aten.sum.dim_IntList(x, dims, True))
                outs.append(aten.amax.default(x, dims))
                outs.append(aten.amin.default(x, dims, True))
                outs.append(aten.any.dims(x, dims))
                outs.append(aten.all.dims(aten.gt.Scalar(x, -2.0), dims, True))
            outs.append(aten.argmax.default(x, -1))
            outs.append(aten.argmin.default(x, 0, True))
            outs.append(aten.argmax.default(x))
            outs.append(aten.prod.dim_int(aten.add.Tensor(aten.sigmoid.default(x), 0.5), 0))
            outs.append(aten.prod.default(aten.add.Tensor(aten.sigmoid.default(x), 0.5)))
            outs.append(aten.sum.dim_IntList(x, None))
        return tuple(outs)

    tol: dict[str, Any] = {"rtol": 3e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {}
    check(fn, a, t, one, **tol)


def test_integer_and_bool_reductions_match_eager() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-5, 5, (7, 4), generator=g)
    b = torch.randint(0, 2, (7, 4), generator=g).bool()

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.sum.dim_IntList(a, [0]),
            aten.sum.dim_IntList(b, [1]),
            aten.sum.dim_IntList(b, None),
            aten.amax.default(a, [1]),
            aten.amin.default(a, []),
            aten.argmax.default(a, 1),
            aten.prod.dim_int(a, 1),
            aten.any.dims(b, [0]),
            aten.all.dims(b, None),
            aten.sum.dim_IntList(aten._to_copy.default(a, dtype=torch.int32), [1]),
        )

    check(fn, a, b)


def test_large_whole_tensor_reduction_uses_parallel_partials() -> None:
    x = torch.randn(300_000, dtype=torch.float64)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (aten.sum.dim_IntList(x, None), aten.amax.default(x, []), aten.argmin.default(x), aten.any.dims(aten.gt.Scalar(x, 4.0), None))

    compiled = check(fn, x)
    assert "omp critical" in compiled.cpp_source
