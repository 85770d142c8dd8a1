"""The graph cache: a second process loads what the first compiled, and gets eager's results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import ptc
from ptc import cache

# A training step of a small MLP and an inference call, run in a fresh process; prints the
# cache's counters and the results' distance from eager's as one JSON line.
PROGRAM = textwrap.dedent(
    """
    import json, sys, torch, ptc
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, SCALE))
    x = torch.randn(8, 16)
    expected = model(x)
    expected.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    out = ptc.compile(model)(x)
    out.sum().backward()
    with torch.no_grad():
        infer = ptc.compile(lambda t: torch.softmax(t * 3, -1) + 1)(x)
    err = max([(out - expected).abs().max().item(), (infer - (torch.softmax(x * 3, -1) + 1)).abs().max().item()]
              + [(p.grad - g).abs().max().item() for p, g in zip(model.parameters(), grads)])
    ptc.cache.flush()
    s = ptc.cache.STATS
    compiler = [m for m in ("ptc_inductor.compiler", "ptc_inductor.lowering", "ptc_inductor.scheduler", "ptc_inductor.codegen")
                if m in sys.modules]
    print(json.dumps({"hits": s.hits, "misses": s.misses, "stores": s.stores, "corrupt": s.corrupt, "err": err,
                      "programs": [s.program_hits, s.program_misses, s.program_stores, s.program_corrupt],
                      "compiler": compiler}))
    """
)


def _run(cache_dir: Path, scale: int = 4, **env: str) -> dict[str, float]:
    environ = {k: v for k, v in os.environ.items() if k not in ("PTC_INDUCTOR_CACHE_DIR", "PTC_GRAPH_CACHE") or k in env}
    environ.update(PTC_CACHE_DIR=str(cache_dir), **env)
    proc = subprocess.run([sys.executable, "-c", PROGRAM.replace("SCALE", str(scale))], capture_output=True, text=True, env=environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr  # type: ignore[assignment]
    return result


def _entries(cache_dir: Path, section: str = "graphs") -> list[Path]:
    return [p for p in (cache_dir / section).glob("*/*") if not p.name.startswith(".")]


def test_a_second_process_loads_every_graph_and_matches_eager(tmp_path: Path) -> None:
    first = _run(tmp_path)
    # Forward and backward of the training step, and the inference graph.
    assert (first["hits"], first["misses"], first["stores"]) == (0, 3, 3)
    assert first["err"] < 1e-5
    assert len(_entries(tmp_path)) == 3
    assert list((tmp_path / "inductor").rglob("*.so")), "PTC_CACHE_DIR holds the kernel cache too"
    # The training and the inference program: [hits, misses, stores, corrupt].
    assert first["programs"] == [0, 2, 2, 0] and len(_entries(tmp_path, "aot")) == 2
    second = _run(tmp_path)
    assert (second["hits"], second["misses"], second["stores"]) == (3, 0, 0)
    assert second["programs"] == [2, 0, 0, 0]
    assert second["err"] < 1e-5
    # Loading compiled graphs imports none of the compiler (lowering, scheduling, code
    # generation: a quarter of a second of a warm start).
    assert first["compiler"] and second["compiler"] == []
    # Another model (another output width) is another set of graphs.
    third = _run(tmp_path, scale=5)
    assert third["stores"] == 2 and third["hits"] == 1


def test_a_corrupt_entry_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    _run(tmp_path)
    for entry in _entries(tmp_path):
        (entry / "manifest.json").write_text("{not json")
    again = _run(tmp_path)
    assert again["corrupt"] == 3 and again["stores"] == 3 and again["err"] < 1e-5
    assert "cannot be loaded" in str(again["stderr"]) and "compiling it again" in str(again["stderr"])
    assert _run(tmp_path)["hits"] == 3


def test_a_corrupt_program_entry_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    _run(tmp_path)
    for entry in _entries(tmp_path, "aot"):
        (entry / "plan.json").write_text("{not json")
    again = _run(tmp_path)
    assert again["programs"] == [0, 2, 2, 2] and again["err"] < 1e-5
    assert again["hits"] == 3, "the recompiled programs' graphs are the cached ones"
    assert "cached program" in str(again["stderr"]) and "compiling it again" in str(again["stderr"])
    assert _run(tmp_path)["programs"] == [2, 0, 0, 0]


def test_concurrent_processes_share_the_cache_safely(tmp_path: Path) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: _run(tmp_path), range(3)))
    assert all(r["err"] < 1e-5 for r in results)
    assert len(_entries(tmp_path)) == 3
    assert not [p for p in (tmp_path / "graphs").glob("*/.*")], "no half-written entry is left behind"
    assert _run(tmp_path)["hits"] == 3


def test_the_size_bound_evicts_the_least_recently_used(tmp_path: Path) -> None:
    _run(tmp_path, PTC_CACHE_SIZE_MB="0.001")
    # Each store evicts down to the bound, so at most the newest entry survives.
    assert len(_entries(tmp_path)) <= 1


def test_graph_cache_off_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    off = _run(tmp_path, PTC_GRAPH_CACHE="0")
    assert off["stores"] == 0 and not _entries(tmp_path)
    _run(tmp_path)
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PTC_INDUCTOR_CACHE_DIR", raising=False)
    assert cache.cache_dir() == tmp_path
    ptc.cache.clear()
    assert not _entries(tmp_path) and not _entries(tmp_path, "aot") and not list((tmp_path / "inductor").rglob("*.so"))


def test_keys_follow_the_graph_its_constants_and_the_settings() -> None:
    def graph(constant: torch.Tensor) -> torch.fx.GraphModule:
        gm = torch.fx.symbolic_trace(lambda x: x)
        gm.c = constant
        g = torch.fx.Graph()
        x = g.placeholder("x")
        c = g.get_attr("c")
        g.output(g.call_function(torch.ops.aten.add.Tensor, (x, c)))
        return torch.fx.GraphModule(gm, g)

    ones = graph(torch.ones(3))
    key = cache.graph_key(ones, [], "a")
    assert key is not None and key == cache.graph_key(graph(torch.ones(3)), [], "a")
    assert key != cache.graph_key(graph(torch.full((3,), 2.0)), [], "a")
    # The same bytes as another dtype is another constant.
    assert key != cache.graph_key(graph(torch.ones(3).view(torch.int32)), [], "a")
    assert key != cache.graph_key(ones, [], "b")


def test_the_default_dtype_is_part_of_a_graph_key() -> None:
    # A decomposition fills an open dtype (aten.full without one) with the default dtype.
    import ptc_inductor
    from ptc import pipeline
    from ptc.config import make_options

    g = torch.fx.Graph()
    g.output(g.call_function(torch.ops.aten.full.default, ([2], 1.0)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    config = ptc_inductor.config_from_env()
    key = pipeline._cache_key(gm, [], make_options(None, None), config)
    torch.set_default_dtype(torch.float64)
    try:
        other = pipeline._cache_key(gm, [], make_options(None, None), config)
    finally:
        torch.set_default_dtype(torch.float32)
    assert key is not None and other is not None and key != other
    # ptc-decomp's own switches too.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTC_DECOMP_RESTRIDE", "0")
        assert pipeline._cache_key(gm, [], make_options(None, None), config) != key


def test_an_unwritable_cache_directory_costs_the_cache_not_the_compile(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result = _run(blocker / "cache", PTC_INDUCTOR_CACHE_DIR=str(tmp_path / "kernels"))
    assert result["err"] < 1e-5 and result["stores"] == 0 and result["programs"][2] == 0  # type: ignore[index]


# bf16 weights, autocast and symbolic sizes: what users run beside the float32 MLP above.
MIXED = textwrap.dedent(
    """
    import json, torch, ptc
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).bfloat16()
    step = ptc.compile(lambda t: model(t).float().square().mean(), dynamic=True)
    errs = []
    for rows in (5, 9):
        x = torch.randn(rows, 16, dtype=torch.bfloat16)
        expected = model(x).float().square().mean()
        expected.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        loss = step(x)
        loss.backward()
        errs += [abs(loss.item() - expected.item()) / abs(expected.item())]
        errs += [((p.grad.float() - g.float()).abs().max() / g.float().abs().max()).item() for p, g in zip(model.parameters(), grads)]
        model.zero_grad()
    head = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.softmax(head(x), -1)
        out = ptc.compile(lambda t: torch.softmax(head(t), -1))(x)
    errs.append(((out.float() - expected.float()).abs().max()).item())
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    ptc.cache.flush()
    s = ptc.cache.STATS
    print(json.dumps({"hits": s.hits, "misses": s.misses, "stores": s.stores, "corrupt": s.corrupt, "err": max(errs),
                      "programs": [s.program_hits, s.program_misses, s.program_stores, s.program_corrupt]}))
    """
)


def test_bf16_autocast_and_symbolic_graphs_load_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "PROGRAM", MIXED)
    first = _run(tmp_path)
    assert first["stores"] >= 3 and first["err"] < 2e-2  # bf16 tolerance
    second = _run(tmp_path)
    # Every stored graph and program is loaded; nothing new is compiled into the cache.
    assert second["hits"] == first["stores"] and second["stores"] == 0
    assert second["programs"][0] == first["programs"][2] and second["programs"][2] == 0  # type: ignore[index]
    assert second["err"] < 2e-2 and second["corrupt"] == 0
