"""events.STAGES: a program compile's trace, functionalize and partition times reach a listener."""

from __future__ import annotations

import torch

from ptc_aot import aot, events
from ptc_spec import TimedStep


def _fn(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum()


def test_a_training_compile_reports_trace_functionalize_and_partition() -> None:
    seen: list[TimedStep] = []
    unsubscribe = events.STAGES.subscribe(seen.append)
    try:
        aot(_fn, [torch.randn(4, requires_grad=True)])
    finally:
        unsubscribe()
    assert [s.name for s in seen] == ["trace", "functionalize", "partition"]
    assert not events.STAGES.wanted()
