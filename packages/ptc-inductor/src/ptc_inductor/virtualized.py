"""The virtual ``ops`` handler: loop bodies call ``ops.<name>``, the installed handler answers.

Each backend and each analysis is one handler class; the handler in force is the only
mutable state here, kept in a stack so handlers can nest (a masked body inside a kernel).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _HandlerStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []


_STATE = _HandlerStack()


@contextmanager
def set_ops_handler(handler: Any) -> Iterator[Any]:
    """Install ``handler`` as the target of ``ops.*`` for the duration of the block."""
    _STATE.stack.append(handler)
    try:
        yield handler
    finally:
        _STATE.stack.pop()


def current_handler() -> Any:
    """Return the handler in force; raise when none is installed."""
    if not _STATE.stack:
        raise RuntimeError("ops.* was called outside set_ops_handler(): no handler is installed")
    return _STATE.stack[-1]


class _OpsProxy:
    """Forwards ``ops.name(...)`` to the handler in force."""

    def __getattr__(self, name: str) -> Any:
        return getattr(current_handler(), name)


ops: Any = _OpsProxy()
