"""A progress line for long compiles, on a terminal only.

A compile that is still running after ``PTC_PROGRESS_AFTER`` seconds (default 2) shows one line
on stderr, rewritten in place while it runs: the time so far, the stage it last finished and the
graphs and kernels compiled so far; the line is cleared when the compile ends. Nothing is
printed when stderr is not a terminal (logs, CI, notebooks writing to files) or with
``PTC_PROGRESS=0``, and then nothing is watched either.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["compiling"]

_REFRESH_S = 0.2


class _Line:
    """The state one running compile shows; written by the compile, read by the painter thread."""

    def __init__(self, what: str, stream: TextIO, counts: Callable[[], tuple[int, int]]) -> None:
        self.what = what
        self.stream = stream
        self.counts = counts
        self.stage = "starting"
        self.start = time.perf_counter()
        self.done = threading.Event()
        self.painted = False

    def text(self) -> str:
        graphs, kernels = self.counts()
        elapsed = time.perf_counter() - self.start
        return f"ptc: compiling {self.what}: {elapsed:.0f} s, last step {self.stage}; {graphs} graph(s), {kernels} kernel(s) done"

    def paint(self, after: float) -> None:
        if self.done.wait(after):
            return
        while not self.done.is_set():
            self.stream.write("\r\x1b[K" + self.text())
            self.stream.flush()
            self.painted = True
            self.done.wait(_REFRESH_S)

    def clear(self) -> None:
        """Erase the line (after the painter stopped)."""
        if self.painted:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _enabled(stream: TextIO) -> bool:
    if os.environ.get("PTC_PROGRESS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _after() -> float:
    try:
        return float(os.environ.get("PTC_PROGRESS_AFTER", "2"))
    except ValueError:
        return 2.0


def _watch(line: _Line) -> list[Callable[[], None]]:
    """Subscribe to the components' stage events (only while a line may show)."""
    import ptc_aot.events
    import ptc_inductor.events

    def on_step(step: Any) -> None:
        if step.kind == "stage":
            line.stage = step.name

    return [ptc_aot.events.STAGES.subscribe(on_step), ptc_inductor.events.STEPS.subscribe(on_step)]


@contextmanager
def compiling(what: str, counts: Callable[[], tuple[int, int]], stream: TextIO | None = None) -> Iterator[None]:
    """Show a progress line for the compile of ``what`` while the block runs, if it runs long on a terminal.

    ``counts`` gives (graphs, kernels) compiled so far. Compiles nested in a shown one add no line."""
    out = sys.stderr if stream is None else stream
    if _ACTIVE or not _enabled(out):
        yield
        return
    line = _Line(what, out, counts)
    unsubscribe = _watch(line)
    _ACTIVE.append(line)
    painter = threading.Thread(target=line.paint, args=(_after(),), name="ptc-progress", daemon=True)
    painter.start()
    try:
        yield
    finally:
        _ACTIVE.remove(line)
        line.done.set()
        painter.join()
        line.clear()
        for undo in unsubscribe:
            undo()


_ACTIVE: list[_Line] = []
