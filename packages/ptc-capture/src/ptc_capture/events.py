"""Compile events for tools that watch capture (ptc's report).

``COMPILES`` gets one :class:`CompileEvent` per capture of a frame, first compile or recompile;
the frame callback builds it only while someone is subscribed (``COMPILES.wanted()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptc_spec import EventChannel

__all__ = ["COMPILES", "CompileEvent"]


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """One capture of a frame: the first compile or a recompile (``reason`` says why the cached entries missed)."""

    qualname: str
    filename: str
    firstlineno: int
    index: int
    """0 for the first capture of this code by this optimized callable, then 1, 2, ... per recompile."""
    reason: str | None
    """The guard that failed for each cached entry (None on a first compile)."""
    capture: Any
    """The ptc_capture.capture.Capture: graph, guards, breaks, eager_reason."""
    start: float
    seconds: float
    """Wall time of the capture (time.perf_counter), including the backend call nested in it."""


COMPILES: EventChannel[CompileEvent] = EventChannel("ptc_capture.compiles")
"""Subscribe with ``COMPILES.subscribe(listener)`` (returns an unsubscribe function)."""
