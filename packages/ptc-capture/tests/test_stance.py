"""set_stance and the recompiles log: what runs, what compiles, and the sentence a failed guard gets."""

from __future__ import annotations

import logging

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture import events
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _double(x):
    return x * 2 + 1


@pytest.fixture(autouse=True)
def _default_stance():
    yield
    ptc_capture.set_stance("default")


def test_recompile_log_names_frame_and_size_change(backend: CountingBackend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ptc.capture.recompiles")
    compiled = ptc_capture.optimize(backend, dynamic=False)(_double)
    compiled(torch.randn(8))
    compiled(torch.randn(16))
    [record] = [r for r in caplog.records if r.name == "ptc.capture.recompiles"]
    assert record.levelno == logging.INFO
    code = _double.__code__
    assert (
        record.getMessage()
        == f"recompiling _double ({code.co_filename}:{code.co_firstlineno}): size of x dim 0 changed 8 -> 16"
    )


def test_force_eager_runs_eagerly_without_capture(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend)(_double)
    with ptc_capture.set_stance("force_eager"):
        compare_with_eager(compiled, _double, torch.randn(4))
        assert backend.count == 0
    compare_with_eager(compiled, _double, torch.randn(4))
    assert backend.count == 1
    with ptc_capture.set_stance("force_eager"):
        calls = backend.count
        compare_with_eager(compiled, _double, torch.randn(4))
        assert backend.count == calls


def test_eager_on_recompile_uses_cached_graphs_and_never_recompiles(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend, dynamic=False)(_double)
    compare_with_eager(compiled, _double, torch.randn(4))
    assert backend.count == 1
    with ptc_capture.set_stance("eager_on_recompile"):
        compare_with_eager(compiled, _double, torch.randn(5))
        compare_with_eager(compiled, _double, torch.randn(6, 2))
        compare_with_eager(compiled, _double, torch.randn(4))
    assert backend.count == 1


def test_fail_on_recompile_raises_naming_frame_and_guard(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend, dynamic=False)(_double)
    with ptc_capture.set_stance("fail_on_recompile"):
        compare_with_eager(compiled, _double, torch.randn(8))  # the first compile is allowed
        compare_with_eager(compiled, _double, torch.randn(8))
        with pytest.raises(
            ptc_capture.RecompileError,
            match=r"_double \(.*test_stance.py:\d+\) would recompile .* because size of x dim 0 changed 8 -> 16",
        ):
            compiled(torch.randn(16))
    assert backend.count == 1
    compare_with_eager(compiled, _double, torch.randn(16))
    assert backend.count == 2


def test_set_stance_as_call_context_manager_and_decorator() -> None:
    assert ptc_capture.current_stance() == "default"
    ptc_capture.set_stance("force_eager")
    assert ptc_capture.current_stance() == "force_eager"
    with ptc_capture.set_stance("fail_on_recompile"):
        assert ptc_capture.current_stance() == "fail_on_recompile"
    assert ptc_capture.current_stance() == "force_eager"
    ptc_capture.set_stance("default")

    @ptc_capture.set_stance("eager_on_recompile")
    def inside() -> str:
        return ptc_capture.current_stance()

    assert ptc_capture.current_stance() == "default"
    assert inside() == "eager_on_recompile"
    assert ptc_capture.current_stance() == "default"
    with pytest.raises(ValueError, match="unknown stance 'bogus': valid stances are default, force_eager"):
        ptc_capture.set_stance("bogus")


def test_compile_events_carry_the_recompile_reason(backend: CountingBackend) -> None:
    seen: list[events.CompileEvent] = []
    unsubscribe = events.COMPILES.subscribe(seen.append)
    try:
        compiled = ptc_capture.optimize(backend, dynamic=False)(_double)
        compiled(torch.randn(3))
        compiled(torch.randn(3, 2))
    finally:
        unsubscribe()
    assert [(e.qualname, e.index, e.reason) for e in seen] == [
        ("_double", 0, None),
        ("_double", 1, "x has 2 dims, expected 1"),
    ]
    assert not events.COMPILES.wanted()


def _plus_if_same(a, b):
    return a + 1 if a is b else a - 1


def test_recompile_reason_names_inputs_that_became_one_tensor(backend: CountingBackend) -> None:
    seen: list[events.CompileEvent] = []
    unsubscribe = events.COMPILES.subscribe(seen.append)
    try:
        compiled = ptc_capture.optimize(backend)(_plus_if_same)
        x = torch.randn(3)
        compiled(x, torch.randn(3))
        torch.testing.assert_close(compiled(x, x), x + 1)
    finally:
        unsubscribe()
    assert [e.reason for e in seen] == [None, "a and b are one tensor; the entry was traced with distinct ones"]
