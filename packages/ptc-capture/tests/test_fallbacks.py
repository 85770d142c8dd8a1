"""Frames the tracer cannot resume run eagerly with eager's results; compiler bugs are reported or suppressed."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.config import set_config
from ptc_capture.errors import CaptureInternalError
from ptc_capture.interpreter import loop
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _break_inside_with(x):
    with torch.no_grad():
        y = x * 2
        print(end="")
        z = y * 3
    return y + 1 + z


def test_break_inside_no_grad_resumes_with_grad_mode():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_break_inside_with)
    x = torch.randn(3, requires_grad=True)
    out = compiled(x)
    assert not out.requires_grad, "both halves ran without grad, as in eager"
    assert torch.is_grad_enabled()
    compare_with_eager(compiled, _break_inside_with, x)
    assert backend.count == 2


def _break_with_cell(x):
    k = x * 2

    def inner():
        return k + 1

    print(end="")
    return inner()


def _try_except(x):
    try:
        y = x + 1
    except RuntimeError:
        y = x - 1
    return y


def _generator_with_break(x):
    def gen():
        yield x + 1
        print(end="")
        yield x + 2

    return sum(gen())


def _deep_break(x):
    return _level1(x) * 2


def _level1(x):
    return _level2(x + 1) - 1


def _level2(x):
    y = x.cos()
    print(end="")
    return y.sin()


@pytest.mark.parametrize(
    "fn", [_break_inside_with, _break_with_cell, _try_except, _generator_with_break, _deep_break],
    ids=["with", "cell", "try", "generator", "deep"],
)  # fmt: skip
def test_unresumable_or_deep_breaks_match_eager(fn):
    compiled = ptc_capture.optimize("eager")(fn)
    for _ in range(2):
        compare_with_eager(compiled, fn, torch.randn(3, 2))


def test_deep_break_still_compiles_each_level():
    report = ptc_capture.explain(_deep_break)(torch.randn(3))
    # caller up to the call, each callee frame on its own, and the code after each break
    assert report.graph_count >= 4, str(report)
    ops = [op for graph in report.ops_per_graph for op in graph]
    assert "Tensor.cos" in ops and "Tensor.sin" in ops


def _simple(x):
    return x.relu() + 1


def test_compiler_bug_names_function_and_instruction(monkeypatch):
    def broken(frame, inst):
        raise RuntimeError("simulated bug")

    monkeypatch.setitem(loop.HANDLERS, "BINARY_OP", broken)
    compiled = ptc_capture.optimize("eager")(_simple)
    with pytest.raises(CaptureInternalError, match=r"_simple .* BINARY_OP at offset \d+.*simulated bug"):
        compiled(torch.randn(3))


def test_suppress_errors_falls_back_to_eager(monkeypatch):
    def broken(frame, inst):
        raise RuntimeError("simulated bug")

    monkeypatch.setitem(loop.HANDLERS, "BINARY_OP", broken)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_simple)
    previous = set_config(suppress_errors=True)
    try:
        compare_with_eager(compiled, _simple, torch.randn(3))
    finally:
        set_config(previous)
    assert backend.count == 0


def test_explain_works_for_modules():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    report = ptc_capture.explain(model)(torch.randn(2, 3))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert "torch.nn.functional.linear" in report.ops_per_graph[0][0] or "linear" in report.ops_per_graph[0][0]
