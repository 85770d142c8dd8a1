"""The thread's autocast state: reading it, guarding on it and switching it (the run-time half).

``torch.autocast`` keeps, per device type, an enabled flag and a low-precision dtype, plus one
weight-cast cache flag and a nesting counter (the cache is cleared when the outermost region
exits); see https://pytorch.org/docs/stable/amp.html. A captured region switches that state
with the same public calls eager's ``torch.autocast.__enter__``/``__exit__`` make, so graphs,
runners and resumed with-blocks all move between states through :func:`transition`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

__all__ = [
    "DEVICE_TYPES", "AutocastExit", "AutocastRegion", "AutocastState", "AutocastSwitch", "DeviceAutocast", "apply_transition", "applied",
    "guard_holds", "nesting", "nesting_is", "restore", "transition",
]  # fmt: skip

DEVICE_TYPES = ("cpu", "cuda")
"""The device types whose autocast state captures track, guard and switch."""


@dataclass(frozen=True, slots=True)
class DeviceAutocast:
    """Autocast of one device type: on or off, and the dtype it casts down to."""

    device_type: str
    enabled: bool
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class AutocastState:
    """The autocast state of every tracked device type and the cast-cache flag."""

    devices: tuple[DeviceAutocast, ...]
    cache_enabled: bool

    @staticmethod
    def current() -> AutocastState:
        """The calling thread's state now."""
        devices = tuple(DeviceAutocast(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in DEVICE_TYPES)
        return AutocastState(devices, torch.is_autocast_cache_enabled())

    @property
    def any_enabled(self) -> bool:
        """Whether some device type casts."""
        return any(d.enabled for d in self.devices)

    def device(self, device_type: str) -> DeviceAutocast:
        """The state of ``device_type`` (one of DEVICE_TYPES)."""
        return self.devices[DEVICE_TYPES.index(device_type)]

    def with_device(self, mode: DeviceAutocast, cache_enabled: bool) -> AutocastState:
        """This state with ``mode`` replacing its device type's entry, and ``cache_enabled``."""
        devices = tuple(mode if d.device_type == mode.device_type else d for d in self.devices)
        return replace(self, devices=devices, cache_enabled=cache_enabled)

    def guard_key(self) -> tuple[tuple[str, bool, torch.dtype | None], ...]:
        """What the guard compares: enabled per device type, and the dtype where enabled."""
        return tuple((d.device_type, d.enabled, d.dtype if d.enabled else None) for d in self.devices)


@dataclass(frozen=True, slots=True)
class AutocastRegion:
    """A ``torch.autocast`` context manager as a trace sees it: the device state it enters."""

    mode: DeviceAutocast
    cache_enabled: bool
    manager_type: type
    """The class of the real context manager (torch.autocast or a deprecated per-device subclass)."""

    @staticmethod
    def of(manager: torch.amp.autocast) -> AutocastRegion | None:
        """The region a real ``torch.autocast`` object enters (None for an untracked device type)."""
        if manager.device not in DEVICE_TYPES:
            return None
        mode = DeviceAutocast(manager.device, bool(manager._enabled), manager.fast_dtype)
        return AutocastRegion(mode, bool(manager._cache_enabled), type(manager))


@dataclass(frozen=True, slots=True)
class AutocastExit:
    """A captured region's ``__exit__``: it restores its device's state and the cache flag from before the region.

    It also stands on the stack of a with-block resumed after a graph break, where calling it
    does what eager's ``torch.autocast.__exit__`` does.
    """

    before: DeviceAutocast
    cache_before: bool

    def __call__(self, *exc_info: Any) -> None:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(self.before.device_type, self.before.enabled)
        torch.set_autocast_dtype(self.before.device_type, self.before.dtype)
        torch.set_autocast_cache_enabled(self.cache_before)


@dataclass(frozen=True, slots=True)
class AutocastSwitch:
    """What a runner does about autocast when its graph switches it.

    The graph begins and ends in ``entry``; after it the runner moves the thread to ``final``
    with ``open_regions`` regions entered (negative: regions open at entry that the trace left).
    """

    entry: AutocastState
    final: AutocastState
    open_regions: int

    @property
    def changes_state(self) -> bool:
        """Whether the thread is in another state after the frame's trace than before it."""
        return self.entry != self.final or self.open_regions != 0


Call = tuple[Callable[..., Any], tuple[Any, ...]]


def transition(before: AutocastState, after: AutocastState, nesting: int, clear: bool = False) -> list[Call]:
    """The torch calls that move the thread from ``before`` to ``after``, entering (``nesting`` > 0) or leaving regions.

    ``clear`` empties the weight-cast cache after leaving, as eager's exit of the outermost
    region does (an open region must keep it: its casts are shared by every use of a weight,
    which decides how gradients accumulate).
    """
    calls: list[Call] = []
    for _ in range(-nesting):
        calls.append((torch.autocast_decrement_nesting, ()))
    if clear:
        calls.append((torch.clear_autocast_cache, ()))
    for old, new in zip(before.devices, after.devices):
        if old.enabled != new.enabled:
            calls.append((torch.set_autocast_enabled, (new.device_type, new.enabled)))
        if old.dtype != new.dtype:
            calls.append((torch.set_autocast_dtype, (new.device_type, new.dtype)))
    for _ in range(nesting):
        calls.append((torch.autocast_increment_nesting, ()))
    if before.cache_enabled != after.cache_enabled:
        calls.append((torch.set_autocast_cache_enabled, (after.cache_enabled,)))
    return calls


def apply_transition(before: AutocastState, after: AutocastState, nesting: int) -> None:
    """Run :func:`transition`, clearing the cache when the nesting count drops to zero (as eager's exit does)."""
    for fn, args in transition(before, after, nesting):
        if fn(*args) == 0 and fn is torch.autocast_decrement_nesting:
            torch.clear_autocast_cache()


def nesting() -> int:
    """The thread's autocast nesting count (how many torch.autocast regions are open)."""
    torch.autocast_increment_nesting()
    return int(torch.autocast_decrement_nesting())


def restore(state: AutocastState, depth: int) -> None:
    """Put back ``state`` and nesting count ``depth`` (a runner does this when its graph raised inside a region)."""
    apply_transition(AutocastState.current(), state, depth - nesting())


def nesting_is(count: int, expected: bool) -> bool:
    """Whether ``(nesting() == count) is expected`` (the guard of a trace that leaves regions opened before it)."""
    return (nesting() == count) is expected


@contextlib.contextmanager
def applied(state: AutocastState) -> Iterator[None]:
    """Put ``state`` in force for a moment at trace time, and restore the thread's own after."""
    saved = AutocastState.current()
    apply_transition(saved, state, 0)
    try:
        yield
    finally:
        apply_transition(state, saved, 0)


def guard_holds(expected: tuple[tuple[str, bool, torch.dtype | None], ...]) -> bool:
    """Whether the thread's autocast state now matches a guard key (see AutocastState.guard_key)."""
    for device_type, enabled, dtype in expected:
        if torch.is_autocast_enabled(device_type) is not enabled:
            return False
        if enabled and torch.get_autocast_dtype(device_type) != dtype:
            return False
    return True
