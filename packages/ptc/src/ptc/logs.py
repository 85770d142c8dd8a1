"""One switch for every log channel of every ptc package: ``PTC_LOGS=graph_breaks,output_code``."""

from __future__ import annotations

import logging
import os

CHANNELS: dict[str, tuple[str, ...]] = {
    "graph_breaks": ("ptc.capture.graph_breaks",),
    "recompiles": ("ptc.capture.recompiles",),
    "dynamic": ("ptc.capture.dynamic",),
    "guards": ("ptc.capture.guards",),
    "graphs": ("ptc.capture.graph_code", "ptc.aot.graphs", "ptc.fallbacks"),
    "fallbacks": ("ptc.fallbacks",),
    "output_code": ("ptc.inductor.output_code",),
    "perf": ("ptc.perf", "ptc.inductor.perf", "ptc.aot.perf"),
    "cudagraphs": ("ptc.cudagraphs",),
}
"""Each user-facing channel and the package loggers it switches on."""


def enable(channels: list[str]) -> None:
    """Send the given channels (``all`` for every one) to stderr at INFO level."""
    names = list(CHANNELS) if "all" in channels else channels
    unknown = [c for c in names if c not in CHANNELS]
    if unknown:
        raise ValueError(f"unknown log channel {', '.join(unknown)}: valid channels are all, {', '.join(CHANNELS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    # The mark ptc-capture's own PTC_LOGS handler carries too: one handler per logger.
    handler._ptc_logs = True  # type: ignore[attr-defined]
    for channel in names:
        for logger_name in CHANNELS[channel]:
            logger = logging.getLogger(logger_name)
            logger.setLevel(logging.INFO)
            if not any(getattr(h, "_ptc_logs", False) for h in logger.handlers):
                logger.addHandler(handler)


def configure_logs(environ: dict[str, str] | None = None) -> None:
    """Enable the channels named by ``PTC_LOGS``."""
    value = (os.environ if environ is None else environ).get("PTC_LOGS", "")
    channels = [c.strip() for c in value.split(",") if c.strip()]
    if channels:
        enable(channels)
