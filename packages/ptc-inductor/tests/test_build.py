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


@pytest.fixture(autouse=True)
def _precompile_from_the_first_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' processes have built other graphs or not, depending on what else runs: the
    precompiled prelude starts with any first build here (the policy has its own test)."""
    from ptc_inductor import build

    monkeypatch.setattr(build, "_PCH_AFTER_BUILDS", 0)


def test_a_process_starts_precompiling_the_prelude_at_its_third_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ptc_inductor import build

    monkeypatch.setattr(build, "_PCH_AFTER_BUILDS", 2)
    monkeypatch.setattr(build.STATS, "compiles", 0)  # a fresh process
    _, pch_dir = _pch_graph(tmp_path)
    _pch_graph(tmp_path, "sigmoid")
    build.wait_for_precompiled_headers()
    assert not pch_dir.exists()  # one or two graphs: no precompiling paid for
    _pch_graph(tmp_path, "cos")
    build.wait_for_precompiled_headers()
    assert len(list(pch_dir.glob("*/prelude.h.gch"))) == 1


def _pch_graph(tmp_path: Path, op: str = "tanh", dtype: object = None, **fields: object) -> tuple[object, Path]:
    """Compile a small CPU graph (``op`` then a scale) with the cache in ``tmp_path``; check it against eager."""
    import torch
    from conftest import trace_core

    import ptc_inductor

    unary = getattr(torch.ops.aten, op).default

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.mul.Tensor(unary(x), 0.5)

    config = ptc_inductor.Config(cache_dir=str(tmp_path / "cache"), **fields)  # type: ignore[arg-type]
    dt = dtype if isinstance(dtype, torch.dtype) else torch.float32
    compiled = ptc_inductor.compile(trace_core(fn, torch.randn(7, 9, dtype=dt)), config=config)
    x = torch.randn(7, 9, dtype=dt)
    torch.testing.assert_close(compiled(x), fn(x))
    return compiled, tmp_path / "cache" / "pch"


def _machine_code(so: Path) -> list[str]:
    """The disassembly of ``so``'s code, addresses included: equal lists are equal code."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.endswith("file format elf64-x86-64")]


def _build_commands(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling:")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_first_build_does_not_wait_for_the_prelude_and_later_ones_include_it(
    dtype: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    import torch

    from ptc_inductor.build import clear_memory_cache, wait_for_precompiled_headers
    from ptc_inductor.codegen.cpp_prelude import PRELUDE

    with caplog.at_level("DEBUG", logger="ptc.inductor.cache"):
        _pch_graph(tmp_path / "on")
        (first,) = _build_commands(caplog)
        assert "-include" not in first  # an empty cache: the prelude was being precompiled meanwhile
        wait_for_precompiled_headers()
        (header,) = sorted((tmp_path / "on" / "cache" / "pch").glob("*/prelude.h.gch"))
        assert header.stat().st_size > 1_000_000
        # bf16/fp16 graphs use the prelude's conversion helpers, compiled from the precompiled form.
        with_pch, _ = _pch_graph(tmp_path / "on", "sigmoid", getattr(torch, dtype))
        second = _build_commands(caplog)[1]
    assert f"-include {header.with_suffix('')}" in second, second
    # The cache entry keeps the whole source (prelude included), so it stays a readable record.
    assert Path(str(with_pch.library_path)[:-3] + ".cpp").read_text().startswith(PRELUDE)  # type: ignore[attr-defined]
    clear_memory_cache()
    without_pch, off_dir = _pch_graph(tmp_path / "off", "sigmoid", getattr(torch, dtype), cxx_pch=False)
    assert not off_dir.exists()
    if shutil.which("objdump"):
        assert _machine_code(Path(str(with_pch.library_path))) == _machine_code(Path(str(without_pch.library_path)))  # type: ignore[attr-defined]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_precompiled_header_costs_time_not_results(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    from ptc_inductor.build import _PCH, clear_memory_cache, wait_for_precompiled_headers

    _, pch_dir = _pch_graph(tmp_path)
    wait_for_precompiled_headers()
    (gch,) = pch_dir.glob("*/prelude.h.gch")
    data = gch.read_bytes()
    gch.write_bytes(data[: len(data) // 3] if damage == "truncate" else b"not a precompiled header")
    # As a new process would: nothing known in memory, a damaged file on disk.
    _PCH.clear()
    clear_memory_cache()
    with caplog.at_level("WARNING", logger="ptc.inductor.cache"):
        _pch_graph(tmp_path, "exp")
    assert any("precompiled C++ prelude" in r.getMessage() for r in caplog.records), caplog.records
    # The damaged file was dropped: the next compile precompiles the prelude again.
    _pch_graph(tmp_path, "sin")
    wait_for_precompiled_headers()
    assert len(gch.read_bytes()) > 1_000_000


def test_a_removed_cache_directory_gets_its_precompiled_header_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    from ptc_inductor.build import wait_for_precompiled_headers

    _, pch_dir = _pch_graph(tmp_path)
    wait_for_precompiled_headers()
    shutil.rmtree(tmp_path / "cache")  # as `rm -rf` by hand would, with this process's memory of it kept
    with caplog.at_level("WARNING", logger="ptc.inductor.cache"):
        _pch_graph(tmp_path, "cos")
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    wait_for_precompiled_headers()
    assert len(list(pch_dir.glob("*/prelude.h.gch"))) == 1


def test_a_forked_child_leaves_its_parents_precompilation_to_the_parent(tmp_path: Path) -> None:
    from ptc_inductor import build

    _pch_graph(tmp_path)
    assert build._PCH_BUILDS, "the first build started precompiling the prelude"
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no build in flight that it could take for its own
        os.write(writer, b"1" if not build._PCH_BUILDS else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(reader, 1) == b"1"
    build.wait_for_precompiled_headers()
    (gch,) = (tmp_path / "cache" / "pch").glob("*/prelude.h.gch")
    assert gch.stat().st_size > 1_000_000
