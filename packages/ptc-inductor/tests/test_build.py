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


def _pch_graph(tmp_path: Path, **fields: object) -> tuple[object, Path]:
    import torch
    from conftest import trace_core

    import ptc_inductor

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.mul.Tensor(torch.ops.aten.tanh.default(x), 0.5)

    config = ptc_inductor.Config(cache_dir=str(tmp_path / "cache"), **fields)  # type: ignore[arg-type]
    compiled = ptc_inductor.compile(trace_core(fn, torch.randn(7, 9)), config=config)
    x = torch.randn(7, 9)
    torch.testing.assert_close(compiled(x), fn(x))
    return compiled, tmp_path / "cache" / "pch"


def _machine_code(so: Path) -> list[str]:
    """The disassembly of ``so``'s code, addresses included: equal lists are equal code."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.endswith("file format elf64-x86-64")]


def test_the_prelude_is_precompiled_once_and_the_code_built_with_it_is_the_same(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    from ptc_inductor.build import clear_memory_cache

    with caplog.at_level("DEBUG", logger="ptc.inductor.cache"):
        with_pch, pch_dir = _pch_graph(tmp_path / "on")
    headers = sorted(pch_dir.glob("*/prelude.h.gch"))
    assert len(headers) == 1 and headers[0].stat().st_size > 1_000_000, headers
    (command,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling:")]
    assert f"-include {headers[0].with_suffix('')}" in command, command
    # The cache entry keeps the whole source (prelude included), so it stays a readable record.
    from ptc_inductor.codegen.cpp_prelude import PRELUDE

    assert Path(str(with_pch.library_path)[:-3] + ".cpp").read_text().startswith(PRELUDE)  # type: ignore[attr-defined]
    clear_memory_cache()
    without_pch, off_dir = _pch_graph(tmp_path / "off", cxx_pch=False)
    assert not off_dir.exists()
    if shutil.which("objdump"):
        assert _machine_code(Path(str(with_pch.library_path))) == _machine_code(Path(str(without_pch.library_path)))  # type: ignore[attr-defined]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_precompiled_header_costs_time_not_results(tmp_path: Path, damage: str) -> None:
    from ptc_inductor.build import _PCH, clear_memory_cache

    _, pch_dir = _pch_graph(tmp_path / "first")
    (gch,) = pch_dir.glob("*/prelude.h.gch")
    data = gch.read_bytes()
    gch.write_bytes(data[: len(data) // 3] if damage == "truncate" else b"not a precompiled header")
    # A new process (here: a cleared in-memory state and a new graph) builds against the damaged file.
    _PCH.clear()
    clear_memory_cache()
    import torch
    from conftest import trace_core

    import ptc_inductor

    def other(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.sub.Tensor(torch.ops.aten.exp.default(x), 1.0)

    config = ptc_inductor.Config(cache_dir=str(tmp_path / "first" / "cache"))
    compiled = ptc_inductor.compile(trace_core(other, torch.randn(4, 5)), config=config)
    x = torch.randn(4, 5)
    torch.testing.assert_close(compiled(x), other(x))
    third = ptc_inductor.compile(trace_core(other, torch.randn(2, 3)), config=config)
    torch.testing.assert_close(third(x[:2, :3]), other(x[:2, :3]))
    # The damaged file was replaced: the next build precompiles the prelude again and uses it.
    assert len(gch.read_bytes()) > 1_000_000


def test_a_removed_cache_directory_gets_its_precompiled_header_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    import torch
    from conftest import trace_core

    import ptc_inductor

    _, pch_dir = _pch_graph(tmp_path)
    shutil.rmtree(tmp_path / "cache")  # as `rm -rf` by hand would, with this process's memory of it kept

    def other(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.add.Tensor(torch.ops.aten.sin.default(x), 1.0)

    config = ptc_inductor.Config(cache_dir=str(tmp_path / "cache"))
    with caplog.at_level("WARNING", logger="ptc.inductor.cache"):
        compiled = ptc_inductor.compile(trace_core(other, torch.randn(3, 8)), config=config)
    x = torch.randn(3, 8)
    torch.testing.assert_close(compiled(x), other(x))
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert len(list(pch_dir.glob("*/prelude.h.gch"))) == 1
