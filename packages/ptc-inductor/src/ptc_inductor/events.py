"""Compile events for tools that watch ptc-inductor (ptc's report).

``STEPS`` gets one ``ptc_spec.TimedStep`` per timed step of a graph compile: kind ``stage``
(lower, schedule, plan memory, codegen and build, wrapper) or ``build`` (one C++ library,
``name`` its path, ``detail`` one of ``built``, ``disk hit``, ``memory hit``). Steps are built
only while someone is subscribed; the compiled code's per-call path never emits any.
"""

from __future__ import annotations

from ptc_spec import EventChannel, TimedStep

__all__ = ["STEPS"]

STEPS: EventChannel[TimedStep] = EventChannel("ptc_inductor.steps")
"""Subscribe with ``STEPS.subscribe(listener)`` (returns an unsubscribe function)."""
