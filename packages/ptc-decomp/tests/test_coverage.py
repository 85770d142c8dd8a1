"""The coverage report counts every aten overload once and the committed file is current."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptc_decomp import coverage, registered

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "docs" / "decomp-coverage.md"


@pytest.fixture(scope="module")
def cov() -> coverage.Coverage:
    return coverage.measure("core/1")


def test_every_overload_is_counted_once(cov: coverage.Coverage) -> None:
    groups = [cov.core, cov.decomposed, cov.mutating, cov.implicit, cov.fallback, cov.missing]
    names = [n for g in groups for n in g]
    assert len(names) == len(set(names)) == cov.total
    assert "aten.gelu.default" in cov.decomposed and "aten.mm.default" in cov.core
    assert "aten.add_.Tensor" in cov.mutating and "aten.cholesky.default" in cov.missing
    assert not cov.fallback, "core/1 has no fallbacks"


def test_in_core2_ops_with_a_meta_kernel_count_as_fallbacks() -> None:
    cov = coverage.measure("core/2")
    assert "aten.cholesky.default" in cov.fallback and "aten.kthvalue.default" in cov.fallback
    assert "aten._logcumsumexp.default" in cov.missing


def test_every_registered_aten_op_is_counted_as_decomposed(cov: coverage.Coverage) -> None:
    from ptc_spec import overload_name

    names = {overload_name(op) for op in registered()}
    assert names == set(cov.decomposed)


def test_markdown_lists_the_counts(cov: coverage.Coverage) -> None:
    text = coverage.markdown(cov)
    assert f"| decomposed by ptc-decomp | {len(cov.decomposed)} |" in text
    assert "`aten.native_layer_norm_backward.default`" in text


def test_check_mode_detects_a_stale_file(tmp_path: Path) -> None:
    target = tmp_path / "cov.md"
    assert coverage.main(["--output", str(target)]) == 0
    assert coverage.main(["--output", str(target), "--check"]) == 0
    target.write_text(target.read_text() + "stale\n")
    assert coverage.main(["--output", str(target), "--check"]) == 1
    assert coverage.main(["--check", str(target)]) == 1


def test_committed_report_is_current() -> None:
    if not COMMITTED.exists():
        pytest.skip("docs/decomp-coverage.md is generated in the monorepo checkout only")
    assert coverage.main(["--check", str(COMMITTED)]) == 0
