"""The disk cache: a second process compiles nothing; a corrupt entry is rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch, ptc_spec, ptc_inductor
    aten = torch.ops.aten
    def fn(x):
        return aten.mul.Tensor(aten.sigmoid.default(x), 3.0)
    gm = ptc_spec.trace(fn, ptc_spec.TensorMeta.of((5, 6)), dialect="core/1")
    compiled = ptc_inductor.compile(gm)
    x = torch.randn(5, 6)
    ok = torch.allclose(compiled(x), fn(x))
    s = ptc_inductor.build_stats
    print(json.dumps({"compiles": s.compiles, "disk_hits": s.disk_hits, "rebuilt": s.rebuilt_corrupt,
                      "ok": ok, "path": compiled.library_path}))
    """
)


def _run(cache: Path) -> dict[str, object]:
    env = dict(os.environ, PTC_INDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def fresh_cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_second_process_runs_no_compiler(fresh_cache: Path) -> None:
    first = _run(fresh_cache)
    second = _run(fresh_cache)
    assert first["compiles"] == 1 and first["ok"]
    assert second["compiles"] == 0 and second["disk_hits"] == 1 and second["ok"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing_checksum"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    import torch
    from conftest import trace_core

    import ptc_inductor
    from ptc_inductor.build import STATS, clear_memory_cache

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.add.Tensor(torch.ops.aten.cos.default(x), 2.0)

    config = ptc_inductor.Config(cache_dir=str(tmp_path / damage))
    gm = trace_core(fn, torch.randn(3, 3))
    first = ptc_inductor.compile(gm, config=config)
    so = Path(str(first.library_path))
    # The library is mapped into this process: damage a new inode, never the mapped one.
    data = so.read_bytes()
    if damage == "truncate":
        so.unlink()
        so.write_bytes(data[:100])
    elif damage == "garbage":
        so.unlink()
        so.write_bytes(b"\x7fELF not really a library")
    else:
        Path(str(so) + ".sha256").unlink()
    clear_memory_cache()
    before = (STATS.compiles, STATS.rebuilt_corrupt)
    second = ptc_inductor.compile(gm, config=config)
    assert (STATS.compiles, STATS.rebuilt_corrupt) == (before[0] + 1, before[1] + 1)
    x = torch.randn(3, 3)
    torch.testing.assert_close(second(x), fn(x))
