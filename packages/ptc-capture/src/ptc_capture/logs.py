"""Logging channels of ptc_capture, switched on by PTC_LOGS or :func:`set_logs`."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ptc_capture.config import get_config

__all__ = ["CHANNELS", "channel", "set_logs"]

CHANNELS = ("graph_breaks", "recompiles", "dynamic", "guards", "graph_code", "bytecode")
"""Every channel; the logger of channel ``c`` is ``ptc.capture.<c>``."""

_handler: logging.Handler | None = None


def channel(name: str) -> logging.Logger:
    """Return the logger of one channel."""
    return logging.getLogger(f"ptc.capture.{name}")


def set_logs(channels: Iterable[str]) -> None:
    """Log the given channels at DEBUG to stderr and silence the others."""
    global _handler
    wanted = set(channels)
    unknown = wanted - set(CHANNELS)
    if unknown:
        raise ValueError(f"unknown ptc_capture log channels {sorted(unknown)}; choose from {list(CHANNELS)}")
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        # Marks a stderr handler of ptc's log switch: ptc's own PTC_LOGS handling sets the
        # same mark, so whichever comes second adds none (each line printed once).
        _handler._ptc_logs = True  # type: ignore[attr-defined]
    for name in CHANNELS:
        logger = channel(name)
        if name in wanted:
            logger.setLevel(logging.DEBUG)
            if not any(getattr(h, "_ptc_logs", False) for h in logger.handlers):
                logger.addHandler(_handler)
        else:
            logger.setLevel(logging.WARNING)
            if _handler in logger.handlers:
                logger.removeHandler(_handler)


def _from_config() -> None:
    wanted = [c for c in get_config().logs if c in CHANNELS]
    if wanted:
        set_logs(wanted)


_from_config()
