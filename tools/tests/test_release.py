"""tools/release.py on a throwaway copy of a two-package repository."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import release  # noqa: E402


def _package(root: Path, name: str, version: str, deps: list[str], changelog: str) -> None:
    path = root / "packages" / name
    path.mkdir(parents=True)
    quoted = ", ".join(f'"{d}"' for d in deps)
    (path / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{quoted}]\n')
    (path / "CHANGELOG.md").write_text(changelog)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _package(tmp_path, "ptc-spec", "0.1.0", ["torch>=2.11"], "# Changelog\n\n## Unreleased\n\n- op set core/1\n\n## 0.0.1 — 2026-01-01\n\n- first\n")
    _package(tmp_path, "ptc-aot", "0.3.2", ["ptc-spec>=0.1,<0.2"], "# Changelog\n\n## Unreleased\n\n- joint graphs\n")
    return tmp_path


def test_patch_release_moves_the_changelog_and_bumps_the_version(repo: Path) -> None:
    assert release.release(repo, "ptc-spec", "patch", today="2026-11-22") == "0.1.1"
    assert 'version = "0.1.1"' in (repo / "packages/ptc-spec/pyproject.toml").read_text()
    changelog = (repo / "packages/ptc-spec/CHANGELOG.md").read_text()
    assert changelog == "# Changelog\n\n## Unreleased\n\n## 0.1.1 — 2026-11-22\n\n- op set core/1\n\n## 0.0.1 — 2026-01-01\n\n- first\n"


def test_release_outside_a_dependents_range_is_refused_and_changes_nothing(repo: Path) -> None:
    before = (repo / "packages/ptc-spec/pyproject.toml").read_text()
    with pytest.raises(release.ReleaseError, match=r"ptc-spec 0.2.0 falls outside declared ranges: ptc-aot requires ptc-spec<0.2,>=0.1"):
        release.release(repo, "ptc-spec", "minor")
    assert (repo / "packages/ptc-spec/pyproject.toml").read_text() == before


def test_each_package_versions_independently(repo: Path) -> None:
    assert release.release(repo, "ptc-aot", "major", today="2026-11-22") == "1.0.0"
    assert 'version = "0.1.0"' in (repo / "packages/ptc-spec/pyproject.toml").read_text()


def test_empty_unreleased_section_is_refused(repo: Path) -> None:
    release.release(repo, "ptc-aot", "patch")
    with pytest.raises(release.ReleaseError, match="nothing to release"):
        release.release(repo, "ptc-aot", "patch")


def test_bump_rules() -> None:
    assert release.bump("1.2.3", "major") == "2.0.0"
    assert release.bump("1.2.3", "minor") == "1.3.0"
    assert release.bump("1.2", "patch") == "1.2.1"
    with pytest.raises(release.ReleaseError, match="unknown part"):
        release.bump("1.0.0", "micro")


def test_dry_run_writes_nothing(repo: Path) -> None:
    assert release.release(repo, "ptc-spec", "patch", dry_run=True) == "0.1.1"
    assert 'version = "0.1.0"' in (repo / "packages/ptc-spec/pyproject.toml").read_text()
