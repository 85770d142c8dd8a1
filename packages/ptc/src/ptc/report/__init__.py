"""The compile report: ``PTC_REPORT=DIR`` (written at exit) or ``ptc.report.write(DIR)``.

Recording starts when ptc is imported with ``PTC_REPORT`` set, or on :func:`start`; until then
no component event has a listener and nothing is collected.
"""

from __future__ import annotations

import atexit
import logging
import os
import time

from .record import RECORDER

__all__ = ["start", "stop", "write"]

log = logging.getLogger("ptc.report")


def start() -> None:
    """Record every compile from now on (a no-op when already recording)."""
    RECORDER.start()


def stop() -> None:
    """Stop recording (what was recorded stays, for :func:`write`)."""
    RECORDER.stop()


def write(directory: str) -> str:
    """Write the report of what was recorded into ``directory``; returns the path of its index.html."""
    from .pages import Writer

    began = time.perf_counter()
    Writer(RECORDER, directory).index()
    path = os.path.join(directory, "index.html")
    log.info("wrote the compile report %s in %.2f s", path, time.perf_counter() - began)
    return path


def _write_at_exit(directory: str) -> None:
    try:
        write(directory)
    except Exception as exc:  # at exit nobody can catch it: say what failed, in one line
        log.error("could not write the compile report to %s: %s: %s", directory, type(exc).__name__, exc)


def configure_report(environ: dict[str, str] | None = None) -> None:
    """Start recording and write at exit when ``PTC_REPORT`` names a directory."""
    directory = (os.environ if environ is None else environ).get("PTC_REPORT", "").strip()
    if directory and not RECORDER.active:
        start()
        atexit.register(_write_at_exit, directory)
