"""Reports how much the OpInfo cross-check covered at the end of a run."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    module = sys.modules.get(f"{__package__}.test_opinfo") if __package__ else None
    totals = getattr(module, "TOTALS", None)
    if not totals or not totals["checked"]:
        return
    infos = len(totals["samples"])
    samples = sum(totals["samples"].values())
    checks = sum(totals["checked"].values())
    ops = len(totals["checked"])
    terminalreporter.write_line(
        f"OpInfo cross-check: {infos} OpInfos, {samples} samples run, {checks} decomposition checks covering {ops} decomposed ops,"
        f" {len(totals['symbolic'])} ops also decomposed over symbolic sizes"
    )
