"""What the report records while a process compiles: frames, compiles, graphs, kernels, timed spans.

The Recorder subscribes to the event channels each component exposes (ptc_capture.events,
ptc_aot.events, ptc_inductor.events) and is told about stage handoffs by ptc's own pipeline.
While it is not started nothing subscribes, and the pipeline's ``RECORDER.active`` check is the
only cost left. Records hold the graphs and compiled objects themselves; text is made only when
the report is written.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Span:
    """One timed piece of compile work (``lane``: the stage it belongs to)."""

    lane: str
    name: str
    start: float
    seconds: float
    detail: str = ""

    @property
    def end(self) -> float:
        """When the piece finished (time.perf_counter)."""
        return self.start + self.seconds


@dataclass(slots=True)
class GraphRecord:
    """One aten graph a stage compiler received (forward, backward or inference) and what became of it."""

    id: int
    kind: str
    aten: Any
    core: Any = None
    compiled: Any = None
    fallbacks: tuple[str, ...] = ()
    graph_cache: str | None = None
    """``hit`` when ptc's graph cache gave the compiled graph, ``miss`` when it was compiled, None when the cache was off."""
    spans: list[Span] = field(default_factory=list)


@dataclass(slots=True)
class ProgramRecord:
    """One ptc-aot program (made by the backend during a capture; compiled when first run)."""

    graphs: list[GraphRecord] = field(default_factory=list)


@dataclass(slots=True)
class CompileRecord:
    """One capture of a frame (first compile or recompile)."""

    id: int
    index: int
    reason: str | None
    capture: Any
    span: Span
    programs: list[ProgramRecord] = field(default_factory=list)

    @property
    def graphs(self) -> list[GraphRecord]:
        """Every stage graph compiled for this capture, in order."""
        return [g for p in self.programs for g in p.graphs]


@dataclass(slots=True)
class FrameRecord:
    """One code object that was captured, and each of its compiles."""

    id: int
    qualname: str
    filename: str
    firstlineno: int
    compiles: list[CompileRecord] = field(default_factory=list)


@dataclass(slots=True)
class Recorder:
    """The report's one piece of mutable state: everything recorded since ``start``."""

    active: bool = False
    started_at: float = 0.0
    frames: dict[tuple[str, int, str], FrameRecord] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)
    graph_count: int = 0
    compile_count: int = 0
    pending: list[ProgramRecord] = field(default_factory=list)
    current: GraphRecord | None = None
    _unsubscribe: list[Callable[[], None]] = field(default_factory=list)

    def start(self) -> None:
        """Subscribe to every installed component's events (idempotent)."""
        if self.active:
            return
        self.active = True
        self.started_at = time.perf_counter()
        for module, channel, listener in (
            ("ptc_capture.events", "COMPILES", self._on_compile),
            ("ptc_aot.events", "STAGES", self._on_aot),
            ("ptc_inductor.events", "STEPS", self._on_inductor),
        ):
            if importlib.util.find_spec(module.split(".")[0]) is None:
                continue
            events = importlib.import_module(module)
            self._unsubscribe.append(getattr(events, channel).subscribe(listener))

    def stop(self) -> None:
        """Unsubscribe; what was recorded stays."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        self.active = False

    def clear(self) -> None:
        """Forget what was recorded."""
        self.frames.clear()
        self.spans.clear()
        self.pending.clear()
        self.graph_count = self.compile_count = 0
        self.current = None

    # -- events from the components --------------------------------------------------------

    def _on_compile(self, event: Any) -> None:
        key = (event.filename, event.firstlineno, event.qualname)
        frame = self.frames.get(key)
        if frame is None:
            frame = self.frames[key] = FrameRecord(len(self.frames), event.qualname, event.filename, event.firstlineno)
        span = Span("capture", event.qualname, event.start, event.seconds)
        self.spans.append(span)
        record = CompileRecord(self.compile_count, event.index, event.reason, event.capture, span, list(self.pending))
        self.compile_count += 1
        self.pending.clear()
        frame.compiles.append(record)

    def _on_aot(self, event: Any) -> None:
        self.spans.append(Span("aot", event.name, event.start, event.seconds))

    def _on_inductor(self, event: Any) -> None:
        lane = "inductor build" if event.kind == "build" else "inductor"
        span = Span(lane, event.name, event.start, event.seconds, event.detail)
        self.spans.append(span)
        if self.current is not None:
            self.current.spans.append(span)

    # -- calls from ptc's pipeline ---------------------------------------------------------

    def new_program(self) -> ProgramRecord:
        """A ptc-aot program being made by a backend; the next capture event claims it."""
        program = ProgramRecord()
        self.pending.append(program)
        return program

    def begin_graph(self, program: ProgramRecord | None, kind: str, aten: Any) -> GraphRecord:
        """An aten graph handed to a stage compiler; kernels and stage times attach to it until the next."""
        graph = GraphRecord(self.graph_count, kind, aten)
        self.graph_count += 1
        if program is None:
            program = self.new_program()
        program.graphs.append(graph)
        self.current = graph
        return graph

    def graph_compiled(
        self, compiled: Any, core: Any, fallbacks: list[str], graph_cache: str | None, start: float
    ) -> None:
        """The current graph's compiled form (``core`` is None when it came from the graph cache)."""
        graph = self.current
        if graph is None:
            return
        graph.compiled, graph.core, graph.fallbacks, graph.graph_cache = compiled, core, tuple(fallbacks), graph_cache
        if graph_cache == "hit":
            self.span("graph cache", "load", start, graph)

    def span(self, lane: str, name: str, start: float, graph: GraphRecord | None = None) -> None:
        """Record a piece of work from ``start`` until now."""
        span = Span(lane, name, start, time.perf_counter() - start)
        self.spans.append(span)
        if graph is not None:
            graph.spans.append(span)


RECORDER = Recorder()
"""The process's recorder (started by ``PTC_REPORT`` or ``ptc.report.start()``)."""
