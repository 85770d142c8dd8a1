"""The one frozen Config of ptc_capture and the function that maps environment variables onto it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Config", "config_from_env", "get_config", "set_config"]


@dataclass(frozen=True, slots=True)
class Config:
    """Options of ptc_capture; every field is documented in the package README."""

    recompile_limit: int = 8
    """Cache entries per code object; on the next guard miss the code runs eagerly for good."""
    suppress_errors: bool = False
    """A compiler bug falls back to running the frame eagerly instead of raising."""
    inline_depth: int = 32
    """Deepest chain of inlined user calls before the call is run natively (a graph break)."""
    max_instructions: int = 200_000
    """Instructions interpreted for one frame before capture gives up (unrolled loops add up)."""
    logs: frozenset[str] = frozenset()
    """Logging channels switched on (see ptc_capture.logs.CHANNELS)."""


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Return a Config built from PTC_CAPTURE_* variables and PTC_LOGS (unset ones keep defaults)."""
    env = os.environ if environ is None else environ
    changes: dict[str, object] = {}
    if "PTC_CAPTURE_RECOMPILE_LIMIT" in env:
        changes["recompile_limit"] = int(env["PTC_CAPTURE_RECOMPILE_LIMIT"])
    if "PTC_CAPTURE_SUPPRESS_ERRORS" in env:
        changes["suppress_errors"] = _flag(env["PTC_CAPTURE_SUPPRESS_ERRORS"])
    if "PTC_CAPTURE_INLINE_DEPTH" in env:
        changes["inline_depth"] = int(env["PTC_CAPTURE_INLINE_DEPTH"])
    if "PTC_CAPTURE_MAX_INSTRUCTIONS" in env:
        changes["max_instructions"] = int(env["PTC_CAPTURE_MAX_INSTRUCTIONS"])
    if "PTC_LOGS" in env:
        changes["logs"] = frozenset(c.strip() for c in env["PTC_LOGS"].split(",") if c.strip())
    return dataclasses.replace(Config(), **changes)  # type: ignore[arg-type]


_current: Config = config_from_env()


def get_config() -> Config:
    """Return the Config in effect."""
    return _current


def set_config(config: Config | None = None, **changes: object) -> Config:
    """Replace the Config in effect (fields given by keyword change the current one); return the old one."""
    global _current
    previous = _current
    base = config if config is not None else _current
    _current = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    return previous
