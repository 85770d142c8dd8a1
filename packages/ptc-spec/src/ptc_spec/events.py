"""EventChannel: the listener list a package exposes for tools that watch its compiles (ptc's report).

A package declares one channel per kind of event and emits only when :meth:`EventChannel.wanted`
says someone listens, so nothing is built while no tool is subscribed. Compile-time only: no
per-call path emits events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["EventChannel", "TimedStep"]

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class TimedStep:
    """One timed step of a compile (``start`` and ``seconds`` from time.perf_counter).

    ``kind`` groups steps (``stage``, ``build``); ``detail`` is a short note (``disk hit``).
    """

    name: str
    start: float
    seconds: float
    kind: str = "stage"
    detail: str = ""


class EventChannel(Generic[E]):
    """A named list of listeners of one event type (the mutable state is that list)."""

    __slots__ = ("_listeners", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[[E], None]] = []

    def subscribe(self, listener: Callable[[E], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns a function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def wanted(self) -> bool:
        """True when some listener is subscribed (emitters build no event otherwise)."""
        return bool(self._listeners)

    def emit(self, event: E) -> None:
        """Hand ``event`` to every listener, in the order they subscribed."""
        for listener in list(self._listeners):
            listener(event)

    def __repr__(self) -> str:
        return f"EventChannel({self.name!r}, {len(self._listeners)} listener(s))"
