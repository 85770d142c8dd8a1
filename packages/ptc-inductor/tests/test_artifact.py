"""Compiled graphs written as artifacts and loaded back run exactly as the graph they came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import assert_meta_strides, trace_core
from test_triton_kernels import DEVICE, _rand  # sets TRITON_INTERPRET before triton is imported

import ptc_inductor
import ptc_spec
from ptc_inductor import build, triton_runtime
from ptc_inductor.artifact import MANIFEST, ArtifactError, load_artifact, save_artifact
from ptc_inductor.config import config_from_env
from ptc_spec.testing import compare_with_eager

FIXTURES = Path(__file__).parent / "fixtures"


def _roundtrip(compiled: ptc_inductor.CompiledGraph, path: Path) -> ptc_inductor.CompiledGraph:
    save_artifact(compiled, str(path))
    # A fresh process has no library loaded: forget this one's, so the load goes to the disk.
    build.clear_memory_cache()
    return load_artifact(str(path), config_from_env())


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.ptcg")))
def test_fixture_graph_loaded_from_its_artifact_matches_eager(name: str, tmp_path: Path) -> None:
    gm = ptc_spec.load(FIXTURES / f"{name}.ptcg")
    metas = [n.meta[ptc_spec.META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = [m.example(seed=i) for i, m in enumerate(metas)]
    compiled = ptc_inductor.compile(gm)
    loaded = _roundtrip(compiled, tmp_path / name)
    bf16 = any(m.dtype == torch.bfloat16 for m in metas)
    tol = {"rtol": 5e-2, "atol": 5e-2} if bf16 else {"rtol": 1e-4, "atol": 1e-4}
    actual = compare_with_eager(loaded, gm, *inputs, **tol)
    assert_meta_strides(gm, actual)
    # Same kernels, so the same bits as the graph compiled in this process.
    expected = compiled(*inputs)
    for a, e in zip(actual if isinstance(actual, (tuple, list)) else [actual], expected if isinstance(expected, (tuple, list)) else [expected]):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)
    assert loaded.kernel_count == compiled.kernel_count
    assert loaded.wrapper_source == compiled.wrapper_source
    assert loaded.schedule is None


def test_constants_non_finite_floats_and_recycled_outputs_survive(tmp_path: Path) -> None:
    table = torch.arange(12, dtype=torch.float32).reshape(3, 4)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masked = torch.ops.aten.where.self(x > 0, x, torch.ops.aten.full.default([], float("-inf")))
        return torch.ops.aten.add.Tensor(x, table), torch.ops.aten.amax.default(masked, [1])

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    gm = trace_core(fn, x)
    loaded = _roundtrip(ptc_inductor.compile(gm), tmp_path / "a")
    compare_with_eager(loaded, fn, x)
    big = torch.randn(256, 1024, generator=torch.Generator().manual_seed(1))
    gm = trace_core(lambda t: torch.ops.aten.mul.Tensor(t, 2.0), big)
    compiled = ptc_inductor.compile(gm)
    assert "take()" in compiled.wrapper_source  # the output comes from a recycler
    loaded = _roundtrip(compiled, tmp_path / "b")
    first = loaded(big)
    second = loaded(big)
    torch.testing.assert_close(first, big * 2)
    torch.testing.assert_close(second, big * 2)


def test_an_unreadable_or_foreign_artifact_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot read"):
        load_artifact(str(tmp_path / "missing"), config_from_env())
    gm = trace_core(lambda t: torch.ops.aten.abs.default(t), torch.randn(4))
    save_artifact(ptc_inductor.compile(gm), str(tmp_path / "a"))
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    manifest["format"] = "ptc-inductor-artifact/99"
    (tmp_path / "a" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="ptc-inductor-artifact/99"):
        load_artifact(str(tmp_path / "a"), config_from_env())


def test_cpp_kernels_are_rebuilt_when_the_kernel_cache_lost_them(tmp_path: Path) -> None:
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    gm = trace_core(lambda t: torch.ops.aten.sin.default(torch.ops.aten.mul.Tensor(t, 3.0)), x)
    compiled = ptc_inductor.compile(gm)
    save_artifact(compiled, str(tmp_path / "a"))
    assert compiled.library_path is not None
    os.remove(compiled.library_path)
    build.clear_memory_cache()
    loaded = load_artifact(str(tmp_path / "a"), config_from_env())
    torch.testing.assert_close(loaded(x), torch.sin(x * 3.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_kernels_load_from_the_artifact_without_compiling(dtype: torch.dtype, tmp_path: Path) -> None:
    x, w = _rand(64, 300, dtype=dtype), _rand(300, dtype=dtype, seed=1)

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.ops.aten.mul.Tensor(x, w)
        return y, torch.ops.aten.sum.dim_IntList(y, [1])

    gm = trace_core(fn, x, w)
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend="triton"))
    save_artifact(compiled, str(tmp_path / "a"))
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert {k["backend"] for k in manifest["kernels"].values()} == {"triton"}
    if DEVICE == "cuda":  # every candidate config's binary is in the artifact
        assert all(k["binaries"] for k in manifest["kernels"].values())
    compiles = []
    original = triton_runtime._compile
    triton_runtime._compile = lambda *a, **k: compiles.append(a) or original(*a, **k)  # type: ignore[assignment]
    try:
        loaded = load_artifact(str(tmp_path / "a"), config_from_env(backend="triton"))
        tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
        compare_with_eager(loaded, fn, x, w, **tol)
    finally:
        triton_runtime._compile = original  # type: ignore[assignment]
    assert compiles == []
