"""The report's static pages: index.html (overview), one page per frame, one per compiled graph.

Every page is plain HTML with its CSS inline: no script, no server, nothing fetched. Long code is
collapsed (``<details>``); a block larger than ``INLINE_LIMIT`` characters gets a page of its own
under ``files/``, linked, so no page grows to megabytes.
"""

from __future__ import annotations

import inspect
import linecache
import os
from collections import Counter
from html import escape
from typing import Any

from . import text, timeline
from .record import CompileRecord, FrameRecord, GraphRecord, Recorder

INLINE_LIMIT = 40_000
"""Characters of code a page shows inline; longer blocks are written to files/ and linked."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f8f8f8;border:1px solid #e4e4e4;padding:8px;overflow-x:auto;font:12px/1.4 ui-monospace,monospace}
.src{counter-reset:none}.src .ln{color:#999;display:inline-block;width:4em;text-align:right;margin-right:1em;user-select:none}
.src .brk{background:#ffe2e0;display:block}.note{color:#b00020;display:block;margin-left:5em;white-space:pre-wrap}
.fb{background:#fff3c4;display:block}.tag{font-size:11px;border-radius:3px;padding:0 4px;margin-left:4px;color:#fff;background:#b00020}
.ok{background:#2e7d32}.muted{color:#777}.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:110px}.card b{display:block;font-size:20px}
summary{cursor:pointer;color:#0b57d0}a{color:#0b57d0}
"""


def _launch(kernel: Any, call: Any) -> str:
    """How a kernel is launched: a Triton kernel's grid and chosen config, a C++ kernel's parallel loops."""
    launcher: Any = getattr(call, "fn", None)
    triton_kernel = getattr(launcher, "kernel", None)
    if triton_kernel is None:
        outer = ", ".join(str(s) for s in kernel.outer)
        return f"C++: parallel over outer loops [{outer}]; {len(kernel.nodes)} loop nest(s)"
    if triton_kernel.style == "flat":
        shape = f"Triton flat kernel over {triton_kernel.xnumel} points"
    else:
        shape = f"Triton {triton_kernel.style} kernel over {triton_kernel.xnumel} rows of {triton_kernel.rnumel}"
    binaries = launcher.resolve() if hasattr(launcher, "resolve") else {}
    built = sum(getattr(b, "seconds", 0.0) for b in binaries.values())
    if built:
        # Identical kernels of repeated blocks share one compile: each lists it.
        shape += f"; {len(binaries)} config(s) compiled in {built:.2f} s of worker time"
    config = getattr(launcher, "config", None)
    if config is None:
        return f"{shape}; config chosen at its first launch (not launched yet)"
    return (f"{shape}; XBLOCK={config.xblock}" + (f", RBLOCK={config.rblock}" if triton_kernel.style != "flat" else "")
            + f", {config.num_warps} warps, {config.num_stages} stage(s); grid of ceil({triton_kernel.xnumel} / XBLOCK) programs")


def _kernels_of(compiled: Any) -> list[Any]:
    """The scheduled kernels of a ptc-inductor CompiledGraph (none for other compiled callables)."""
    schedule = getattr(compiled, "schedule", None)
    return list(schedule.kernels) if schedule is not None else []


def _page(title: str, body: str, up: str | None = "index.html") -> str:
    nav = f'<p><a href="{up}">&larr; overview</a></p>' if up else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body>{nav}{body}</body></html>"
    )


class Writer:
    """Writes one report directory from a Recorder's records."""

    def __init__(self, recorder: Recorder, directory: str) -> None:
        self.recorder = recorder
        self.directory = directory
        self.files = 0
        os.makedirs(os.path.join(directory, "files"), exist_ok=True)

    def _write(self, name: str, html: str) -> None:
        with open(os.path.join(self.directory, name), "w", encoding="utf-8") as f:
            f.write(html)

    def code(self, title: str, body: str, *, prefix: str = "../", open_: bool = False, up: str = "index.html") -> str:
        """``body`` (already escaped HTML lines) collapsed under ``title``, or on its own page when long."""
        lines = body.count("\n") + 1
        if len(body) <= INLINE_LIMIT:
            return f"<details{' open' if open_ else ''}><summary>{escape(title)} ({lines} lines)</summary><pre>{body}</pre></details>"
        self.files += 1
        name = f"files/code{self.files}.html"
        self._write(name, _page(title, f"<h1>{escape(title)}</h1><pre>{body}</pre>", up=f"{prefix}{up}"))
        return f'<p><a href="{name}">{escape(title)}</a> <span class="muted">({lines} lines, {len(body) // 1024} KiB, on its own page)</span></p>'

    # -- graphs ------------------------------------------------------------------------------

    def graph_block(self, title: str, gm: Any, up: str) -> str:
        """A graph, one node a line, fallbacks highlighted."""
        rows = []
        fallbacks = 0
        for line, fallback in text.graph_lines(gm):
            if fallback:
                fallbacks += 1
                rows.append(f'<span class="fb">{escape(line)}  # fallback: runs the eager kernel, unfused</span>')
            else:
                rows.append(escape(line))
        label = f"{title}: {len(rows)} nodes" + (f", {fallbacks} fallback(s)" if fallbacks else "")
        return self.code(label, "\n".join(rows), up=up)

    def graph_page(self, graph: GraphRecord, frame: FrameRecord, compile_: CompileRecord) -> str:
        """Write graph_<id>.html (aten graph, core graph, kernels, wrapper, stage times); return its file name."""
        name = f"graph_{graph.id}.html"
        back = f"frame_{frame.id}.html"
        parts = [
            f"<h1>Graph {graph.id}: {escape(graph.kind)} of {escape(frame.qualname)} (compile #{compile_.index})</h1>"
        ]
        parts.append(f'<p><a href="{back}">&larr; frame {escape(frame.qualname)}</a></p>')
        if graph.spans:
            rows = "".join(
                f'<tr><td>{escape(timeline.stage_key(s))}{" (" + escape(s.detail) + ")" if s.detail else ""}</td><td class="n">{s.seconds * 1e3:.1f} ms</td></tr>'
                for s in graph.spans
                if s.lane != "stage compile"
            )
            parts.append(f"<h2>Time</h2><table><tr><th>stage</th><th>time</th></tr>{rows}</table>")
        if graph.graph_cache is not None:
            parts.append(f"<p>ptc graph cache: <b>{escape(graph.graph_cache)}</b></p>")
        if graph.fallbacks:
            parts.append(
                f"<p>Fallbacks (ops run unfused, as eager kernels): <b>{escape(', '.join(graph.fallbacks))}</b></p>"
            )
        parts.append("<h2>Graphs</h2>")
        parts.append(self.graph_block(f"aot {graph.kind} graph (aten)", graph.aten, back))
        if graph.core is not None:
            parts.append(self.graph_block("core graph (after ptc-decomp)", graph.core, back))
        compiled = graph.compiled
        if _kernels_of(compiled) or getattr(compiled, "cpp_source", None):
            parts.append(self.kernels(compiled, back))
        self._write(name, _page(name, "".join(parts), up="index.html"))
        return name

    def kernels(self, compiled: Any, up: str) -> str:
        """Each kernel: the nodes it fused, its loops (launch configuration), its code; then the wrapper."""
        kernels = _kernels_of(compiled)
        sources = text.kernel_sources(compiled.cpp_source, [k.name for k in kernels])
        out = [f"<h2>Kernels ({len(kernels)})</h2>"]
        if kernels:
            out.append("<table><tr><th>kernel</th><th>fuses graph nodes</th><th>launch</th></tr>")
            for k in kernels:
                fused = sorted({origin for node in k.nodes for origin in node.origins})
                out.append(
                    f"<tr><td>{escape(k.name)}</td><td>{escape(', '.join(fused))}</td>"
                    f"<td>{escape(_launch(k, getattr(compiled, 'kernel_calls', {}).get(k.name)))}</td></tr>"
                )
            out.append("</table>")
        for i, k in enumerate(kernels):
            body = sources.get(k.name)
            if body is not None:  # the first kernel shows open: a reader sees generated code at once
                out.append(self.code(f"{k.name} code", escape(body), up=up, open_=i == 0))
        if compiled.cpp_source and not sources:  # no schedule to split it by (loaded from the graph cache)
            out.append(self.code("generated code", escape(compiled.cpp_source), up=up))
        out.append(self.code("wrapper (Python)", escape(compiled.wrapper_source), up=up))
        return "".join(out)

    # -- frames ------------------------------------------------------------------------------

    def source(self, frame: FrameRecord) -> str:
        """The frame's source, each line that broke the graph marked with the reasons and their stacks."""
        lines = linecache.getlines(frame.filename)
        if not lines or frame.firstlineno < 1:
            return f"<p class='muted'>Source of {escape(frame.filename)} is not available.</p>"
        try:
            block = inspect.getblock(lines[frame.firstlineno - 1 :])
        except (IndentationError, SyntaxError, IndexError):
            block = lines[frame.firstlineno - 1 : frame.firstlineno + 40]
        first, last = frame.firstlineno, frame.firstlineno + len(block) - 1
        notes: dict[int, list[str]] = {}
        for compile_ in frame.compiles:
            for record in compile_.capture.breaks:
                here = [loc for loc in record.stack if loc.filename == frame.filename and first <= loc.lineno <= last]
                line = here[-1].lineno if here else first
                stack = "\n".join(f"    {loc.filename}:{loc.lineno} in {loc.function}" for loc in record.stack)
                note = f"graph break: {record.reason}\n{stack}"
                if note not in notes.setdefault(line, []):
                    notes[line].append(note)
        rows = []
        for number, line in enumerate(block, first):
            content = f'<span class="ln">{number}</span>{escape(line.rstrip())}'
            if number in notes:
                rows.append(
                    f'<span class="brk">{content}</span>'
                    + "".join(f'<span class="note">{escape(n)}</span>' for n in notes[number])
                )
            else:
                rows.append(content)
        return f'<pre class="src">{chr(10).join(rows)}</pre>'

    def frame_page(self, frame: FrameRecord) -> str:
        """Write frame_<id>.html; return its file name."""
        name = f"frame_{frame.id}.html"
        parts = [f"<h1>{escape(frame.qualname)}</h1><p>{escape(frame.filename)}:{frame.firstlineno}</p>"]
        parts.append("<h2>Source</h2>" + self.source(frame))
        parts.append(f"<h2>Compiles ({len(frame.compiles)})</h2>")
        for compile_ in frame.compiles:
            parts.append(self.compile_section(frame, compile_))
        self._write(name, _page(frame.qualname, "".join(parts)))
        return name

    def compile_section(self, frame: FrameRecord, compile_: CompileRecord) -> str:
        """One compile: why it happened, its guards, breaks, graphs and their kernels."""
        capture = compile_.capture
        kind = "first compile" if compile_.index == 0 else f"recompile #{compile_.index}"
        why = "first call" if compile_.reason is None else f"guard failed: {compile_.reason}"
        out = [
            f'<h3 id="c{compile_.index}">{kind} <span class="muted">({compile_.span.seconds * 1e3:.0f} ms)</span></h3>'
        ]
        out.append(f"<p>Why: <b>{escape(why)}</b></p>")
        if capture.eager_reason:
            out.append(f"<p>Runs eagerly: {escape(str(capture.eager_reason))}</p>")
        for record in capture.breaks:
            where = record.stack[-1] if record.stack else "?"
            out.append(
                f'<p><span class="tag">break</span> {escape(record.reason)} <span class="muted">at {escape(str(where))}</span></p>'
            )
        guards = [g.describe() for g in capture.guards]
        out.append(
            self.code(
                f"guards of this cache entry ({len(guards)})", escape("\n".join(guards)), up=f"frame_{frame.id}.html"
            )
        )
        if capture.graph is not None:
            out.append(self.graph_block("captured graph (torch dialect)", capture.graph, f"frame_{frame.id}.html"))
        graphs = compile_.graphs
        if graphs:
            items = []
            for graph in graphs:
                page = self.graph_page(graph, frame, compile_)
                kernels = len(_kernels_of(graph.compiled))
                nodes = len(graph.aten.graph.nodes)
                fallback = f", {len(graph.fallbacks)} fallback(s)" if graph.fallbacks else ""
                items.append(
                    f'<li><a href="{page}">graph {graph.id}: aot {escape(graph.kind)}</a> ({nodes} aten nodes, {kernels} kernels{fallback})</li>'
                )
            out.append("<p>Stage graphs (aot, core, kernels):</p><ul>" + "".join(items) + "</ul>")
        return "".join(out)

    # -- overview ----------------------------------------------------------------------------

    def index(self) -> None:
        """Write every page, index.html last."""
        rec = self.recorder
        frames = list(rec.frames.values())
        pages = {f.id: self.frame_page(f) for f in frames}
        compiles = [c for f in frames for c in f.compiles]
        breaks: Counter[tuple[int, str, str]] = Counter(
            (f.id, b.reason, str(b.stack[-1]) if b.stack else "?")
            for f in frames
            for c in f.compiles
            for b in c.capture.breaks
        )
        recompiles = [(f, c) for f in frames for c in f.compiles if c.index > 0]
        graphs = [g for c in compiles for g in c.graphs]
        kernels = sum(len(_kernels_of(g.compiled)) for g in graphs)
        builds = Counter(s.detail for s in rec.spans if s.lane == "inductor build")
        total = timeline.busy_seconds(rec.spans)
        cards = [
            ("frames", len(frames)), ("compiles", len(compiles)), ("recompiles", len(recompiles)),
            ("captured graphs", sum(1 for c in compiles if c.capture.graph is not None)), ("stage graphs", len(graphs)),
            ("graph breaks", len(breaks)), ("kernels", kernels), ("compile time", f"{total:.2f} s"),
            ("graph cache", f"{sum(g.graph_cache == 'hit' for g in graphs)} hit / {sum(g.graph_cache == 'miss' for g in graphs)} miss"),
            ("C++ build cache", f"{builds['disk hit'] + builds['memory hit']} hit / {builds['built']} miss"),
        ]  # fmt: skip
        parts = ["<h1>ptc compile report</h1>", '<div class="cards">']
        parts += [f'<div class="card"><b>{escape(str(v))}</b>{escape(k)}</div>' for k, v in cards]
        parts.append("</div><h2>Timeline</h2>" + timeline.svg(rec.spans))
        rows = "".join(
            f'<tr><td>{escape(k)}</td><td class="n">{v * 1e3:.1f} ms</td><td class="n">{100 * v / max(total, 1e-9):.0f}%</td></tr>'
            for k, v in timeline.exclusive_seconds(rec.spans).items()
        )
        parts.append(f"<h2>Time per stage</h2><table><tr><th>stage</th><th>time</th><th>share</th></tr>{rows}</table>")
        if builds:
            parts.append("<p>C++ builds: " + ", ".join(f"{n} {escape(k)}" for k, n in sorted(builds.items())) + "</p>")
        parts.append(
            "<h2>Frames</h2><table><tr><th>frame</th><th>where</th><th>compiles</th><th>breaks</th><th>graphs</th><th>compile time</th></tr>"
        )
        for f in frames:
            nbreaks = sum(len(c.capture.breaks) for c in f.compiles)
            ngraphs = sum(len(c.graphs) for c in f.compiles)
            seconds = sum(c.span.seconds for c in f.compiles)
            parts.append(
                f'<tr><td><a href="{pages[f.id]}">{escape(f.qualname)}</a></td><td>{escape(f.filename)}:{f.firstlineno}</td>'
                f'<td class="n">{len(f.compiles)}</td><td class="n">{nbreaks}</td><td class="n">{ngraphs}</td><td class="n">{seconds * 1e3:.0f} ms</td></tr>'
            )
        parts.append("</table>")
        if breaks:
            parts.append("<h2>Graph breaks</h2><ul>")
            names = {f.id: f.qualname for f in frames}
            for (frame_id, reason, where), count in breaks.items():
                times = f" (in {count} compiles)" if count > 1 else ""
                parts.append(
                    f'<li><a href="{pages[frame_id]}">{escape(names[frame_id])}</a>: {escape(reason)} '
                    f'<span class="muted">at {escape(where)}{times}</span></li>'
                )
            parts.append("</ul>")
        if recompiles:
            parts.append("<h2>Recompiles</h2><ul>")
            for f, c in recompiles:
                parts.append(
                    f'<li><a href="{pages[f.id]}#c{c.index}">{escape(f.qualname)}</a> #{c.index}: {escape(c.reason or "?")}</li>'
                )
            parts.append("</ul>")
        if not frames:
            parts.append(
                "<p>Nothing was compiled while recording (set PTC_REPORT=DIR, or call ptc.report.start() before compiling).</p>"
            )
        self._write("index.html", _page("ptc compile report", "".join(parts), up=None))
