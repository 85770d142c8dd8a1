"""The per-code-object cache of capture results (mutable; stored in the code object's extra slot).

Entries are checked in order; a miss captures again until the recompile limit, after which the
code runs eagerly for good (with a one-line warning).
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ptc_capture import framehook

__all__ = ["CacheEntry", "CodeCache", "all_caches", "cache_of"]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One capture: its guard check and what runs instead (None: run the frame eagerly)."""

    check: Callable[..., bool]
    code: types.CodeType | Callable[..., Any] | None
    owner: Any
    capture: Any


@dataclass(slots=True, eq=False, weakref_slot=True)
class CodeCache:
    """The entries of one code object (and whether it gave up after too many recompiles)."""

    entries: list[CacheEntry] = field(default_factory=list)
    exhausted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    code: Any = None
    frame_sizes: dict[Any, tuple[int | None, ...]] = field(default_factory=dict)
    """The input sizes its captures saw, per source (None: a dim seen to change); see ptc_capture.dynamic."""

    def count(self, owner: Any) -> int:
        """How many entries ``owner`` has."""
        return sum(1 for e in self.entries if e.owner is owner)


_all: weakref.WeakSet[CodeCache] = weakref.WeakSet()
_create_lock = threading.Lock()


def cache_of(code: types.CodeType) -> CodeCache:
    """The CodeCache stored on ``code`` (created on first use)."""
    found: CodeCache | None = framehook.get_code_extra(code)
    if found is not None:
        return found
    with _create_lock:
        found = framehook.get_code_extra(code)
        if found is None:
            found = CodeCache(code=weakref.ref(code))
            framehook.set_code_extra(code, found)
            _all.add(found)
    return found


def all_caches() -> list[CodeCache]:
    """Every live CodeCache."""
    return list(_all)
