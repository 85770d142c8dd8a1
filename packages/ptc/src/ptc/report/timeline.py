"""Time per stage (exclusive of the stages nested in it) and the timeline picture (inline SVG)."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from .record import Span

LANES = ("capture", "aot", "stage compile", "graph cache", "decomp", "inductor", "inductor build")
"""Timeline rows, outermost work first."""

COLORS = {
    "capture": "#4e79a7", "aot": "#f28e2b", "stage compile": "#bab0ac",
    "graph cache": "#76b7b2", "decomp": "#59a14f", "inductor": "#e15759",
    "inductor build": "#b07aa1",
}  # fmt: skip


def stage_key(span: Span) -> str:
    """The row of the time table a span counts in (``aot: trace``, ``inductor: schedule``, ...)."""
    if span.lane == "inductor build":
        return "inductor: C++ build"
    if span.lane in ("aot", "inductor", "graph cache"):
        return f"{span.lane}: {span.name}"
    if span.lane == "stage compile":
        return "pipeline glue"
    return span.lane


def exclusive_seconds(spans: list[Span]) -> dict[str, float]:
    """Seconds per stage row, each span less the spans nested directly inside it (rows add up to the total)."""
    ordered = sorted(spans, key=lambda s: (s.start, -s.seconds))
    own = [s.seconds for s in ordered]
    stack: list[int] = []
    for i, span in enumerate(ordered):
        while stack and ordered[stack[-1]].end <= span.start + 1e-9:
            stack.pop()
        if stack and span.end <= ordered[stack[-1]].end + 1e-6:
            own[stack[-1]] -= span.seconds
        stack.append(i)
    totals: dict[str, float] = defaultdict(float)
    for span, seconds in zip(ordered, own, strict=True):
        totals[stage_key(span)] += max(seconds, 0.0)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def busy_seconds(spans: list[Span]) -> float:
    """Wall time during which some compile work ran (the union of the spans)."""
    total, reach = 0.0, float("-inf")
    for span in sorted(spans, key=lambda s: s.start):
        if span.end <= reach:
            continue
        total += span.end - max(span.start, reach)
        reach = span.end
    return total


def svg(spans: list[Span], width: int = 960) -> str:
    """The compile as bars per stage row against wall time; hovering a bar names it and its time."""
    if not spans:
        return "<p>No compile work was recorded.</p>"
    lanes = [lane for lane in LANES if any(s.lane == lane for s in spans)]
    t0 = min(s.start for s in spans)
    t1 = max(s.end for s in spans)
    left, row, top = 120, 26, 22
    scale = (width - left - 10) / max(t1 - t0, 1e-9)
    height = top + row * len(lanes) + 8
    out = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="compile timeline">'
    ]
    step = _tick(t1 - t0)
    tick = 0.0
    while tick <= t1 - t0 + 1e-9:
        x = left + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 4}" stroke="#ddd"/>')
        out.append(
            f'<text x="{x:.1f}" y="{top - 8}" font-size="11" text-anchor="middle" fill="#555">{tick:.3g} s</text>'
        )
        tick += step
    for r, lane in enumerate(lanes):
        y = top + r * row
        out.append(
            f'<text x="{left - 8}" y="{y + 16}" font-size="12" text-anchor="end" fill="#222">{escape(lane)}</text>'
        )
        for span in spans:
            if span.lane != lane:
                continue
            x = left + (span.start - t0) * scale
            w = max(span.seconds * scale, 1.0)
            label = f"{lane}: {span.name}{' (' + span.detail + ')' if span.detail else ''}: {span.seconds * 1e3:.1f} ms"
            out.append(
                f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" rx="2" fill="{COLORS[lane]}">'
                f"<title>{escape(label)}</title></rect>"
            )
    out.append("</svg>")
    return "".join(out)


def _tick(total: float) -> float:
    for step in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100):
        if total / step <= 10:
            return float(step)
    return total / 10
