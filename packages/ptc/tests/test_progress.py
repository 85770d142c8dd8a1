"""The progress line of long compiles: shown on a terminal, never elsewhere."""

from __future__ import annotations

import io
import time

import pytest
import torch

import ptc
from ptc import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _slow_compile(seconds: float) -> None:
    with progress.compiling("a graph of 3 nodes", lambda: (1, 7)):
        time.sleep(seconds)


def test_a_long_compile_on_a_terminal_shows_one_line_and_clears_it(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setenv("PTC_PROGRESS_AFTER", "0.05")
    _slow_compile(0.5)
    shown = terminal.getvalue()
    assert "ptc: compiling a graph of 3 nodes: 0 s, last step starting; 1 graph(s), 7 kernel(s) done" in shown
    assert shown.endswith("\r\x1b[K")  # cleared when the compile ended
    assert "\n" not in shown  # rewritten in place, never scrolling


def test_short_compiles_pipes_and_the_switch_show_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    _slow_compile(0.05)  # under the default 2 s
    monkeypatch.setenv("PTC_PROGRESS_AFTER", "0")
    monkeypatch.setattr(progress.sys, "stderr", pipe)
    _slow_compile(0.3)
    monkeypatch.setenv("PTC_PROGRESS", "0")
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    _slow_compile(0.3)
    assert terminal.getvalue() == "" and pipe.getvalue() == ""


def test_a_real_compile_reports_its_stages_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setenv("PTC_PROGRESS_AFTER", "0")
    monkeypatch.setenv("PTC_GRAPH_CACHE", "0")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    torch.testing.assert_close(ptc.compile(model)(x), model(x))
    shown = terminal.getvalue()
    assert shown.startswith("\r\x1b[Kptc: compiling a graph of") and shown.endswith("\r\x1b[K")
    assert not progress._ACTIVE
