"""The compile report: what it records, and the pages it writes (PTC_REPORT at exit, ptc.report.write)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_program

import ptc
import ptc_aot
import ptc_capture
import ptc_inductor
from ptc.report.record import RECORDER

HERE = Path(__file__).parent


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Compile every graph (a graph-cache hit has no core graph or schedule to show).
    monkeypatch.setenv("PTC_GRAPH_CACHE", "0")
    RECORDER.clear()
    ptc.report.start()
    yield
    ptc.report.stop()
    RECORDER.clear()


def _channels_listened() -> list[bool]:
    return [ptc_capture.events.COMPILES.wanted(), ptc_aot.events.STAGES.wanted(), ptc_inductor.events.STEPS.wanted()]


def test_nothing_listens_or_records_while_the_report_is_off() -> None:
    assert not RECORDER.active
    assert _channels_listened() == [False, False, False]
    report_program.run(ptc.compile(report_program.step, dynamic=False))
    assert RECORDER.frames == {} and RECORDER.spans == []


def test_recording_keeps_frames_compiles_graphs_and_stage_times(recording: None) -> None:
    assert _channels_listened() == [True, True, True]
    report_program.run(ptc.compile(report_program.step, dynamic=False))
    frames = {f.qualname: f for f in RECORDER.frames.values()}
    step = frames["step"]
    assert [c.reason for c in step.compiles] == [None, "size of x dim 0 changed 8 -> 16"]
    assert [b.reason for b in step.compiles[0].capture.breaks] == ["print() writes output: it runs outside the graph"]
    graph = step.compiles[0].graphs[0]
    assert graph.kind == "forward" and graph.core is not None and graph.compiled.kernel_count >= 1
    lanes = {s.lane for s in RECORDER.spans}
    assert {"capture", "aot", "decomp", "inductor", "inductor build"} <= lanes


def test_write_makes_an_overview_frame_pages_and_graph_pages(recording: None, tmp_path: Path) -> None:
    report_program.run(ptc.compile(report_program.step, dynamic=False))
    index = Path(ptc.report.write(str(tmp_path)))
    overview = index.read_text()
    assert "<svg" in overview and "Time per stage" in overview
    assert "print() writes output: it runs outside the graph" in overview
    assert "size of x dim 0 changed 8 -&gt; 16" in overview
    frame = (tmp_path / "frame_0.html").read_text()
    assert "print(&quot;halfway&quot;)" in frame and "graph break: print() writes output" in frame
    assert "GRAD_MODE" in frame or "TENSOR" in frame  # the cache entry's guards
    graph = (tmp_path / "graph_0.html").read_text()
    assert "extern &quot;C&quot; void kernel0(" in graph and "relu" in graph
    for page in tmp_path.rglob("*.html"):
        text = page.read_text()
        assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_long_code_goes_to_its_own_page(recording: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ptc.report import pages

    monkeypatch.setattr(pages, "INLINE_LIMIT", 200)
    report_program.run(ptc.compile(report_program.step, dynamic=False))
    ptc.report.write(str(tmp_path))
    files = list((tmp_path / "files").glob("code*.html"))
    assert files and "on its own page" in (tmp_path / "graph_0.html").read_text()


def test_ptc_report_env_writes_the_report_at_exit(tmp_path: Path) -> None:
    script = "import ptc, report_program; report_program.run(ptc.compile(report_program.step, dynamic=False))"
    env = {
        **os.environ,
        "PTC_REPORT": str(tmp_path / "report"),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    overview = (tmp_path / "report" / "index.html").read_text()
    assert "recompiles" in overview and "size of x dim 0 changed 8 -&gt; 16" in overview


def test_triton_kernels_show_their_grid_and_chosen_config(tmp_path: Path) -> None:
    # Triton kernels, run by its interpreter on the CPU (set before triton is imported).
    script = (
        "import ptc, report_program; ptc.report.start(); report_program.run(ptc.compile(report_program.step, dynamic=False));"
        f" ptc.report.write({str(tmp_path)!r})"
    )
    env = {
        **os.environ, "PTC_GRAPH_CACHE": "0", "TRITON_INTERPRET": "1", "PTC_INDUCTOR_BACKEND": "triton",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    graph = (tmp_path / "graph_0.html").read_text()
    assert "Triton flat kernel over 32 points; XBLOCK=32, 1 warps, 1 stage(s); grid of ceil(32 / XBLOCK) programs" in graph
    assert "@triton.jit" in graph
