"""``set_stance``: what the frame hook does with compiled frames for a while (as torch.compile's).

- ``default``: run cached graphs whose guards pass, capture and compile on a miss.
- ``force_eager``: run every hooked frame eagerly; nothing is captured and no cache is read.
- ``eager_on_recompile``: run cached graphs whose guards pass; a miss of a frame that already
  has entries runs that call eagerly instead of recompiling. A frame never captured before is
  captured on its first call (that is a compile, not a recompile), as torch.compile does.
- ``fail_on_recompile``: as default, but a miss of a frame that already has entries raises
  :class:`~ptc_capture.errors.RecompileError` naming the frame and the guard that failed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["STANCES", "StanceScope", "current_stance", "set_stance"]

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")
"""Every stance set_stance accepts."""

F = TypeVar("F", bound=Callable[..., Any])


class _Stance:
    """The process-wide stance (the one piece of mutable state here); the frame callback reads ``name``."""

    __slots__ = ("name",)

    def __init__(self) -> None:
        self.name = "default"


STATE = _Stance()


def current_stance() -> str:
    """The stance in force now."""
    return STATE.name


def _check(stance: str) -> None:
    if stance not in STANCES:
        raise ValueError(f"unknown stance {stance!r}: valid stances are {', '.join(STANCES)}")


class StanceScope:
    """What set_stance returns: the stance is already set; leaving a ``with`` block restores the one before.

    Used as a decorator it undoes the set and instead sets the stance around each call of the
    decorated function only.
    """

    def __init__(self, stance: str, previous: str) -> None:
        self.stance = stance
        self.previous = previous

    def __enter__(self) -> StanceScope:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        STATE.name = self.previous

    def __call__(self, fn: F) -> F:
        STATE.name = self.previous
        stance = self.stance

        @functools.wraps(fn)
        def with_stance(*args: Any, **kwargs: Any) -> Any:
            before = STATE.name
            STATE.name = stance
            try:
                return fn(*args, **kwargs)
            finally:
                STATE.name = before

        return with_stance  # type: ignore[return-value]


def set_stance(stance: str = "default") -> StanceScope:
    """Set the stance now; the result restores the previous one as a context manager, or scopes it as a decorator."""
    _check(stance)
    previous = STATE.name
    STATE.name = stance
    return StanceScope(stance, previous)
