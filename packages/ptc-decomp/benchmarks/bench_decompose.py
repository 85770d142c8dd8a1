"""decompose() time on the fixture graphs (pytest-benchmark; not part of the unit tests).

    PYTHONPATH=packages/ptc-spec/src:packages/ptc-decomp/src pytest packages/ptc-decomp/benchmarks/bench_decompose.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ptc_spec
from ptc_decomp import decompose

FIXTURES = sorted((Path(__file__).parents[1] / "tests" / "fixtures").glob("*.ptcg"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def bench_decompose_fixture(benchmark: Any, path: Path) -> None:
    gm = ptc_spec.load(path)
    out = benchmark(decompose, gm)
    benchmark.extra_info["nodes_in"] = len(gm.graph.nodes)
    benchmark.extra_info["nodes_out"] = len(out.graph.nodes)
