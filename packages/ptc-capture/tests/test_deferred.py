"""Ops whose results meta tensors cannot describe (nonzero, masks, unique, item) run after the graph with eager's results."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.errors import GraphBreakError
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _returned(x: torch.Tensor) -> Any:
    i = x.nonzero()
    return i, i, torch.masked_select(x, x > 0), x * 2


def _unpacked(x: torch.Tensor) -> Any:
    values, counts = torch.unique(x.round(), return_counts=True)
    return counts, values, x.sin()


def _item(x: torch.Tensor) -> Any:
    return x.sum().item(), x.exp()


def _chained(x: torch.Tensor) -> Any:
    # Under fullgraph the consumers of a deferred value are deferred too.
    y = x[x > 0]
    return (y.sum() * 2 + 1, -y.abs()), x + 1


def _scaled_by_item(x: torch.Tensor) -> Any:
    return x * x.sum().item() + 1


class _StoresIndices(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.indices = torch.argwhere(x > 0)
        return x.cos()


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("fn", [_returned, _unpacked, _item], ids=lambda f: f.__name__)
def test_data_dependent_results_are_eagers_and_the_rest_is_one_graph(fn: Any, fullgraph: bool) -> None:
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=fullgraph)(fn)
    out = compare_with_eager(compiled, fn, torch.randn(6, 5))
    assert backend.count == 1
    if fn is _returned:
        assert out[0] is out[1], "one call, one object, as in eager"


@pytest.mark.parametrize("fn", [_chained, _scaled_by_item], ids=lambda f: f.__name__)
def test_under_fullgraph_torch_ops_on_deferred_values_are_deferred_too(fn: Any) -> None:
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    compare_with_eager(compiled, fn, torch.randn(6, 5))
    assert backend.count == 1


def test_without_fullgraph_ops_on_deferred_values_break_the_graph_and_resume_compiled() -> None:
    # The code after a data-dependent op is compiled by the resume function, with real sizes.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_chained)
    compare_with_eager(compiled, _chained, torch.randn(6, 5))
    assert backend.count == 2


def test_a_module_attribute_set_to_a_deferred_value_is_eagers() -> None:
    eager, model = _StoresIndices(), _StoresIndices()
    compiled = ptc_capture.optimize(CountingBackend(), fullgraph=True)(model)
    x = torch.randn(4, 3)
    compare_with_eager(compiled, eager, x)
    assert torch.equal(model.indices, eager.indices)


def _reads_shape(x: torch.Tensor) -> torch.Tensor:
    y = x[x > 0]
    return y * y.shape[0]


def _mutates_after(x: torch.Tensor) -> Any:
    i = x.nonzero()
    x.add_(1)
    return i, x


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_reads_shape, r"reading \.shape of the result of indexing, which runs after the graph"),
        (_mutates_after, r"Tensor\.add_ writes a tensor, which must not happen before Tensor\.nonzero"),
    ],
    ids=["shape", "mutation"],
)
def test_what_needs_a_deferred_value_now_is_a_graph_break_with_eagers_result(fn: Any, message: str) -> None:
    with pytest.raises(GraphBreakError, match=message):
        ptc_capture.optimize(CountingBackend(), fullgraph=True)(fn)(torch.randn(5, 4))
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    compare_with_eager(compiled, fn, torch.randn(5, 4))


def test_unpacking_a_deferred_result_of_the_wrong_length_raises_as_eager() -> None:
    def fn(x: torch.Tensor) -> Any:
        a, b, c = torch.unique(x, return_counts=True)
        return a

    compiled = ptc_capture.optimize(CountingBackend(), fullgraph=True)(fn)
    with pytest.raises(ValueError, match=r"not enough values to unpack \(expected 3, got 2\)"):
        compiled(torch.randn(4))
