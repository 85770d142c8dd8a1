"""The report as a person sees it: pages rendered by headless Chromium (Debian's ``chromium``).

``nox -s tests-ptc`` installs Chromium when it is missing; without it these tests fail and say so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
import report_program

import ptc
from ptc.report.record import RECORDER

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


def chromium(page: Path, *args: str) -> str:
    """Run headless Chromium on ``page`` with ``args`` (a fresh profile each time); returns its stdout."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("Chromium is not installed: apt-get install -y chromium (nox -s tests-ptc installs it)")
    with tempfile.TemporaryDirectory(prefix="ptc-chromium-") as profile:
        out = subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def visible_text(page: Path) -> str:
    """The text of the page's DOM after Chromium loaded it, tags stripped and whitespace collapsed."""
    dom = chromium(page, "--dump-dom")
    dom = re.sub(r"<(style|svg)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", dom)))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTC_GRAPH_CACHE", "0")  # compile every graph: a cache hit keeps no schedule to show
        RECORDER.clear()
        ptc.report.start()
        try:
            report_program.run(ptc.compile(report_program.step, dynamic=False))
        finally:
            ptc.report.stop()
        ptc.report.write(str(directory))
    RECORDER.clear()
    yield directory
    ptc.reset()


def test_overview_shows_breaks_recompiles_and_times(report: Path) -> None:
    text = visible_text(report / "index.html")
    assert "ptc compile report" in text
    assert "print() writes output: it runs outside the graph" in text
    assert "step #1: size of x dim 0 changed 8 -> 16" in text
    assert re.search(r"capture \d+\.\d ms \d+%", text), text[:2000]
    assert re.search(r"inductor: C\+\+ build \d+\.\d ms", text)
    assert re.search(r"\d+\.\d\d s compile time", text)


def test_frame_page_marks_the_breaking_user_line(report: Path) -> None:
    text = visible_text(report / "frame_0.html")
    lineno = report_program.step.__code__.co_firstlineno + 2
    assert f'{lineno} print("halfway") graph break: print() writes output: it runs outside the graph' in text
    assert f"report_program.py:{lineno} in step" in text
    assert "Why: guard failed: size of x dim 0 changed 8 -> 16" in text


def test_graph_page_shows_kernel_code_fused_nodes_and_stage_times(report: Path) -> None:
    text = visible_text(report / "graph_0.html")
    assert 'extern "C" void kernel0(' in text
    assert re.search(r"kernel0 \S*relu\S*", text) or "relu" in text
    assert "parallel over outer loops" in text
    assert re.search(r"inductor: schedule \d+\.\d ms", text)


def test_overview_screenshot_is_a_picture(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "overview.png"
    chromium(report / "index.html", f"--screenshot={shot}", "--window-size=1200,1400")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
