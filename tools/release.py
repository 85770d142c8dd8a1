"""Release one package: bump its version and date its CHANGELOG's Unreleased section.

    python tools/release.py ptc-spec minor [--dry-run]

Refuses when a package that depends on it declares a range the new version falls outside:
release that package's range change first (docs/releasing.md).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
_VERSION_LINE = re.compile(r'^version\s*=\s*"([^"]+)"\s*$', re.MULTILINE)


class ReleaseError(Exception):
    """A release that would leave the repository inconsistent."""


def bump(version: str, part: str) -> str:
    """Return ``version`` with its major, minor or patch part incremented."""
    v = Version(version)
    major, minor, patch = (list(v.release) + [0, 0, 0])[:3]
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    if part == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise ReleaseError(f"unknown part {part!r}: use major, minor or patch")


def _packages(root: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in sorted(root.glob("packages/*/pyproject.toml"))}


def dependents_refusing(root: Path, package: str, new_version: str) -> list[str]:
    """Lines naming each package whose declared range for ``package`` excludes ``new_version``."""
    refusing = []
    for name, path in _packages(root).items():
        project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        for text in requirements:
            req = Requirement(text)
            if req.name == package and not req.specifier.contains(new_version, prereleases=True):
                refusing.append(f"{name} requires {req}")
    return refusing


def move_unreleased(changelog: str, version: str, date: str) -> str:
    """Put the Unreleased entries under a new ``## version — date`` heading, leaving Unreleased empty."""
    marker = "## Unreleased"
    if marker not in changelog:
        raise ReleaseError("the CHANGELOG has no '## Unreleased' section")
    head, rest = changelog.split(marker, 1)
    entries, sep, tail = rest.partition("\n## ")
    if not entries.strip():
        raise ReleaseError("the Unreleased section is empty: there is nothing to release")
    released = f"{marker}\n\n## {version} — {date}\n\n{entries.strip()}\n"
    return head + released + (f"\n## {tail}" if sep else "")


def release(root: Path, package: str, part: str, dry_run: bool = False, today: str | None = None) -> str:
    """Bump ``package`` and move its CHANGELOG entries; return the new version."""
    packages = _packages(root)
    if package not in packages:
        raise ReleaseError(f"no package {package!r}; known: {', '.join(packages)}")
    path = packages[package]
    pyproject = (path / "pyproject.toml").read_text()
    match = _VERSION_LINE.search(pyproject)
    if match is None:
        raise ReleaseError(f"{package}/pyproject.toml has no version line")
    new_version = bump(match.group(1), part)
    refusing = dependents_refusing(root, package, new_version)
    if refusing:
        raise ReleaseError(f"{package} {new_version} falls outside declared ranges: {'; '.join(refusing)}; widen them first")
    changelog = move_unreleased((path / "CHANGELOG.md").read_text(), new_version, today or datetime.date.today().isoformat())
    if not dry_run:
        (path / "pyproject.toml").write_text(_VERSION_LINE.sub(f'version = "{new_version}"', pyproject, count=1))
        (path / "CHANGELOG.md").write_text(changelog)
    return new_version


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package")
    parser.add_argument("part", choices=["major", "minor", "patch"])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    try:
        version = release(ROOT, args.package, args.part, args.dry_run)
    except ReleaseError as exc:
        sys.stderr.write(f"release refused: {exc}\n")
        return 1
    sys.stdout.write(f"{args.package} {version}{' (dry run)' if args.dry_run else ''}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
