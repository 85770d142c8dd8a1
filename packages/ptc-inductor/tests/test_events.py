"""events.STEPS: the timed steps of a compile reach a listener, and nothing is emitted without one."""

from __future__ import annotations

import torch
from conftest import trace_core

import ptc_inductor
from ptc_inductor import events
from ptc_spec import TimedStep

aten = torch.ops.aten


def _fn(x: torch.Tensor) -> torch.Tensor:
    return aten.exp.default(aten.mul.Tensor(x, x))


def test_a_listener_gets_each_stage_and_the_build_in_order() -> None:
    seen: list[TimedStep] = []
    unsubscribe = events.STEPS.subscribe(seen.append)
    try:
        ptc_inductor.compile(trace_core(_fn, torch.randn(3, 7)))
    finally:
        unsubscribe()
    stages = [s.name for s in seen if s.kind == "stage"]
    assert stages == ["lower", "schedule", "plan memory", "codegen and build", "wrapper"]
    [build] = [s for s in seen if s.kind == "build"]
    assert build.detail in ("built", "disk hit", "memory hit") and build.name.endswith(".so")
    assert all(s.seconds >= 0 for s in seen)
    assert not events.STEPS.wanted()
