"""Python face of the PEP 523 frame hook (the ``_framehook`` C extension).

A thread sets a callback with :func:`set_callback` (or the :func:`callback_enabled` context
manager). While it is set, every fresh call of a plain Python function on that thread calls
``callback(state)`` with a :class:`FrameState` (``f_code``, ``f_globals``, ``f_builtins``,
``f_locals`` holding the arguments by name, ``closure``, ``function``). The callback returns
``None`` to run the frame normally, or a code object with the same signature and free
variables to run in its place (the frame's globals, arguments and closure cells are reused).

Never hooked: frames started while the callback runs, generators/coroutines, module and class
bodies, and code whose file is in the standard library, torch or ptc (decided once per code
object by :func:`default_skip` and cached on the code object; see :func:`set_code_skip`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import Any, Protocol

from ptc_capture.errors import FrameHookUnavailable

__all__ = [
    "FrameCallback",
    "FrameState",
    "available",
    "callback_enabled",
    "default_skip",
    "get_callback",
    "get_code_extra",
    "get_code_skip",
    "is_installed",
    "require",
    "set_callback",
    "set_code_extra",
    "set_code_skip",
    "set_skip_predicate",
    "skip_prefixes",
    "unavailable_reason",
]


class FrameState(Protocol):
    """What the callback receives for one fresh frame."""

    f_code: CodeType
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]
    f_locals: dict[str, Any]
    closure: tuple[Any, ...] | None
    function: Any


FrameCallback = Callable[[FrameState], CodeType | None]

_ext: Any = None
try:
    _ext = importlib.import_module("ptc_capture._framehook")
except ImportError as _exc:  # no compiler at install time, or an unsupported Python
    available = False
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        unavailable_reason = (
            f"the frame hook supports CPython 3.11 to 3.13, not {sys.implementation.name} "
            f"{sys.version_info.major}.{sys.version_info.minor}."
        )
    else:
        unavailable_reason = (
            f"the ptc_capture._framehook C extension is not built ({_exc}); "
            f"run `python -m ptc_capture.build_ext` or reinstall with a C compiler."
        )
else:
    available = True
    unavailable_reason = ""


def require() -> None:
    """Raise FrameHookUnavailable (with the one-sentence reason) if the hook cannot be used."""
    if not available:
        raise FrameHookUnavailable(f"ptc_capture cannot capture frames: {unavailable_reason}")


def set_callback(callback: FrameCallback | None) -> FrameCallback | None:
    """Set this thread's frame callback (None disables it); return the previous one."""
    require()
    previous: FrameCallback | None = _ext.set_callback(callback)
    return previous


def get_callback() -> FrameCallback | None:
    """Return this thread's frame callback, or None."""
    if not available:
        return None
    callback: FrameCallback | None = _ext.get_callback()
    return callback


def is_installed() -> bool:
    """Return True while the eval-frame function is installed (some thread has a callback)."""
    return bool(available and _ext.is_installed())


@contextmanager
def callback_enabled(callback: FrameCallback | None) -> Iterator[None]:
    """Set this thread's callback for the duration of the block, then restore the previous one."""
    previous = set_callback(callback)
    try:
        yield
    finally:
        _ext.set_callback(previous)


def get_code_extra(code: CodeType) -> Any:
    """Return the object stored on ``code`` by :func:`set_code_extra`, or None."""
    require()
    return _ext.get_code_extra(code)


def set_code_extra(code: CodeType, value: Any) -> None:
    """Store ``value`` on ``code`` (None clears it); released when the code object dies."""
    require()
    _ext.set_code_extra(code, value)


def get_code_skip(code: CodeType) -> bool | None:
    """Return the cached skip decision for ``code``: True, False, or None if not decided yet."""
    require()
    decision: bool | None = _ext.get_code_skip(code)
    return decision


def set_code_skip(code: CodeType, skip: bool | None) -> None:
    """Force frames of ``code`` to be skipped (True) or hooked (False); None re-decides."""
    require()
    _ext.set_code_skip(code, skip)


def set_skip_predicate(predicate: Callable[[CodeType], bool] | None) -> None:
    """Replace the predicate consulted once per code object (its result is cached on the code)."""
    require()
    _ext.set_skip_predicate(predicate)


def _package_dir(name: str) -> str | None:
    # find_spec on a top-level name locates the package without importing it (torch is heavy).
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


_PTC_PACKAGES = (
    "ptc",
    "ptc_spec",
    "ptc_capture",
    "ptc_aot",
    "ptc_decomp",
    "ptc_inductor",
    "ptc_cudagraphs",
)


def _compute_skip_prefixes() -> tuple[str, ...]:
    prefixes = set()
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        if paths.get(key):
            prefixes.add(os.path.realpath(paths[key]) + os.sep)
    for name in ("torch", *_PTC_PACKAGES):
        found = _package_dir(name)
        if found:
            prefixes.add(found + os.sep)
    prefixes.add(os.path.dirname(os.path.realpath(__file__)) + os.sep)
    return tuple(sorted(prefixes))


skip_prefixes: tuple[str, ...] = _compute_skip_prefixes()
"""Directories whose code is never hooked: the stdlib, torch and the ptc packages."""

_SITE_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def default_skip(code: CodeType) -> bool:
    """Return True for code from the standard library, torch, ptc, or frozen/builtin modules."""
    filename = code.co_filename
    if filename.startswith("<frozen "):
        return True
    if not os.path.isabs(filename):
        return False
    path = os.path.realpath(filename)
    for prefix in skip_prefixes:
        if path.startswith(prefix):
            # The stdlib prefix also covers its site-packages, which holds user libraries.
            rest = path[len(prefix) - 1 :]
            if any(rest.startswith(site) for site in _SITE_DIRS):
                continue
            return True
    return False


if available:
    _ext.set_skip_predicate(default_skip)
