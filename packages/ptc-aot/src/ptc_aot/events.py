"""Compile events for tools that watch ptc-aot (ptc's report).

``STAGES`` gets one ``ptc_spec.TimedStep`` per stage of a program compile (``cache lookup``
when a program cache is given, ``trace``, ``functionalize``, ``partition``); steps are built
only while someone is subscribed.
"""

from __future__ import annotations

from ptc_spec import EventChannel, TimedStep

__all__ = ["STAGES"]

STAGES: EventChannel[TimedStep] = EventChannel("ptc_aot.stages")
"""Subscribe with ``STAGES.subscribe(listener)`` (returns an unsubscribe function)."""
