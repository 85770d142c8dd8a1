"""The loop IR directly: a hand-built welford reduction, and view stride computation."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ptc_inductor.compiler import compile_lowered
from ptc_inductor.config import config_from_env
from ptc_inductor.ir import Layout
from ptc_inductor.lowering.context import LoweringContext
from ptc_inductor.lowering.graph import GraphOutput, LoweredGraph
from ptc_inductor.lowering.views import view_strides
from ptc_inductor.virtualized import ops


def _welford_graph(rows: int, cols: int, dim: int) -> LoweredGraph:
    ctx = LoweringContext()
    layout = Layout(torch.float32, torch.device("cpu"), (rows, cols), (cols, 1), 0, False)
    x = ctx.value_of_buffer(ctx.add_buffer("arg0", layout, "input"))
    out_size = (cols,) if dim == 0 else (rows,)
    kept = [1 - dim]

    def variance(acc: Any) -> Any:
        mean, m2, n = acc
        return ops.truediv(m2, n)

    def mean(acc: Any) -> Any:
        return acc[0]

    outs = []
    for finalize in (variance, mean):
        v = ctx.add_reduction(
            x.size, kept, [dim], x.loader, "welford", torch.float32, torch.float32, x.device, out_size, torch.float32, finalize
        )
        assert v.view is not None
        outs.append(GraphOutput(v.view))
    return LoweredGraph(tuple(ctx.nodes), dict(ctx.buffers), ("arg0",), {}, tuple(outs), True, {})


def test_welford_reduction_gives_mean_and_biased_variance() -> None:
    x = torch.randn(37, 300, dtype=torch.float32) * 3 + 1
    for dim in (0, 1):
        compiled = compile_lowered(_welford_graph(37, 300, dim), config_from_env())
        var, mean = compiled(x)
        torch.testing.assert_close(var, x.var(dim, correction=0), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(mean, x.mean(dim), rtol=1e-5, atol=1e-5)
        assert compiled.kernel_count == 1


def test_whole_tensor_welford_merges_thread_partials() -> None:
    x = torch.randn(1, 200_000, dtype=torch.float32)
    compiled = compile_lowered(_welford_graph(1, 200_000, 1), config_from_env())
    var, mean = compiled(x)
    torch.testing.assert_close(var, x.var(1, correction=0), rtol=1e-4, atol=1e-4)
    assert "ptc_welford_merge" in compiled.cpp_source


def test_view_strides_alias_when_possible_and_refuse_otherwise() -> None:
    assert view_strides((4, 6), (6, 1), (24,)) == [1]
    assert view_strides((4, 6), (6, 1), (2, 2, 3, 2)) == [12, 6, 2, 1]
    assert view_strides((6, 4), (1, 6), (24,)) is None
    assert view_strides((2, 3, 4), (12, 1, 3), (2, 12)) is None
    assert view_strides((2, 3, 4), (12, 4, 1), (6, 4)) == [4, 1]


@pytest.mark.parametrize(
    ("size", "permute", "new"),
    [
        ((2, 0, 3), (0, 1, 2), (0, 3, 2)),  # zero elements: eager's row-major strides, 0 counted as 1
        ((2, 0, 3), (2, 0, 1), (3, 2, 0)),  # zero elements, same shape: the old strides
        ((0, 3), (1, 0), (3, 1, 0)),
        ((2, 1, 3), (1, 0, 2), (1, 6)),  # size-1 dims get the stride of their place in eager's layout
        ((1, 1, 3), (2, 1, 0), (3, 1, 1)),
        ((4, 3), (1, 0), (3, 1, 4, 1)),
        ((3, 1), (1, 0), (1, 1, 3)),
        ((1, 1), (1, 0), (1, 1, 1)),
        ((), (), (1, 1)),
    ],
)
def test_view_strides_are_eagers_for_empty_and_size_one_dims(size: tuple[int, ...], permute: tuple[int, ...], new: tuple[int, ...]) -> None:
    base = torch.empty(size).permute(permute)
    assert view_strides(tuple(base.shape), base.stride(), new) == list(base.view(new).stride())
