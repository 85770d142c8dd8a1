"""Checks on tensor values (torch._assert_async, torch._check_tensor_all) run after the graph and raise as eager does."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _asserts(x):
    torch._assert_async((x > -100).all())
    return x + 1


def _checks_all(x, lengths):
    # As transformers' torch_compilable_check while compiling.
    torch._check_tensor_all((lengths * 2).sum() == x.shape[0], lambda: "lengths do not add up")
    return x * 2


def test_assert_async_runs_after_the_one_graph_and_raises_as_eager():
    # It used to be folded away as a call without a tensor result: the compiled code never raised.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_asserts)
    compare_with_eager(compiled, _asserts, torch.randn(3))
    with pytest.raises(RuntimeError):
        _asserts(torch.full((3,), -1000.0))
    with pytest.raises(RuntimeError):
        compiled(torch.full((3,), -1000.0))
    assert backend.count == 1


def test_check_tensor_all_runs_after_the_one_graph_and_raises_eagers_error():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_checks_all)
    compare_with_eager(compiled, _checks_all, torch.randn(4), torch.tensor([1, 1]))
    with pytest.raises(RuntimeError, match="lengths do not add up"):
        _checks_all(torch.randn(4), torch.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="lengths do not add up"):
        compiled(torch.randn(4), torch.tensor([1, 2]))
    assert backend.count == 1


def _checks_then_writes(x, lengths):
    torch._check_tensor_all(lengths.sum() == 2)
    x.add_(1)  # eager never writes x when the check fails
    return x * 2


def test_a_write_after_a_deferred_check_waits_for_the_check():
    compiled = ptc_capture.optimize(CountingBackend())(_checks_then_writes)
    compare_with_eager(compiled, _checks_then_writes, torch.zeros(2), torch.tensor([1, 1]))
    x = torch.zeros(2)
    with pytest.raises(RuntimeError):
        compiled(x, torch.tensor([1, 2]))
    assert x.eq(0).all()
