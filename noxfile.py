"""Sessions for the ptc monorepo. Packages are discovered from packages/*/pyproject.toml.

    nox                      lint, typecheck, docs, every tests-<package>, and torchfree
    nox -s tests-ptc-spec    one package's tests, in a fresh env holding only it and its ptc deps
    nox -s bench             pytest-benchmark suites (not part of the default run)
    nox -s gpu               tests marked gpu, in the current environment (the GPU machine)

A new package directory with a pyproject.toml and tests/ is picked up by every session
without editing this file. Every install goes through constraints.txt so that pip never
resolves torch to a CUDA build on a CPU machine.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = ["-c", str(ROOT / "constraints.txt")]
SPEC = "ptc-spec"

# Packages whose torch-free layers are tested on the pyenv interpreters, which have no torch:
# package -> its torch-free test directory.
TORCH_FREE_TESTS = {"ptc-capture": "tests/torchfree"}
TORCH_FREE_PYTHONS = os.environ.get("PTC_TORCHFREE_PYTHONS", "3.12,3.13").split(",")

# Debian packages a package's tests need, installed by its tests session when missing
# (CI machines are Debian with apt as root): package -> (executable, Debian package).
SYSTEM_TOOLS = {"ptc": [("chromium", "chromium")]}  # the report tests render pages in headless Chromium

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True


def _project(package: str) -> dict:
    with open(ROOT / "packages" / package / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))


def _import_name(package: str) -> str:
    found = [p.name for p in (ROOT / "packages" / package / "src").iterdir() if (p / "__init__.py").exists()]
    if len(found) != 1:
        raise RuntimeError(f"packages/{package}/src must hold exactly one import package, found {found}")
    return found[0]


def _local_deps(package: str) -> list[str]:
    """The package and every local package it depends on, dependencies first."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for req in _project(name)["project"].get("dependencies", []):
            dep = req.split(";")[0].split("[")[0]
            for sep in "<>=!~ ":
                dep = dep.split(sep)[0]
            if dep in PACKAGES:
                visit(dep)
        order.append(name)

    visit(package)
    return order


def _install_package(session: nox.Session, package: str, extra: str = "test") -> None:
    targets = [str(ROOT / "packages" / dep) for dep in _local_deps(package)[:-1]]
    extras = _project(package)["project"].get("optional-dependencies", {})
    suffix = f"[{extra}]" if extra in extras else ""
    targets.append(f"{ROOT / 'packages' / package}{suffix}")
    session.install(*CONSTRAINTS, *targets)


def _tests_session(package: str) -> None:
    @nox.session(name=f"tests-{package}")
    def tests(session: nox.Session) -> None:
        _install_package(session, package)
        _install_system_tools(session, package)
        session.chdir(ROOT / "packages" / package)
        # Running from the package directory keeps src/ off sys.path: the installed package is tested.
        session.run("python", "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", *session.posargs)


def _install_system_tools(session: nox.Session, package: str) -> None:
    missing = [debian for exe, debian in SYSTEM_TOOLS.get(package, []) if shutil.which(exe) is None]
    if missing:
        session.run("apt-get", "update", external=True)
        session.run("apt-get", "install", "-y", *missing, external=True)


for _package in PACKAGES:
    _tests_session(_package)


def _pyenv_python(version: str) -> str:
    """The pyenv interpreter for a minor version (nox cannot see pyenv's non-global versions)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(root.glob(f"{version}.*"), key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()])
    for prefix in reversed(candidates):
        exe = prefix / "bin" / f"python{version}"
        if exe.exists():
            return str(exe)
    found = shutil.which(f"python{version}")
    if found:
        return found
    raise RuntimeError(f"no Python {version} found (looked in {root} and on PATH)")


@nox.session(name="torchfree", python=False)
def torchfree(session: nox.Session) -> None:
    """Torch-free layers (frame hook, bytecode) on the pyenv CPython 3.12 and 3.13 builds."""
    for version in TORCH_FREE_PYTHONS:
        python = _pyenv_python(version)
        env_dir = ROOT / ".nox" / f"torchfree-{version}"
        shutil.rmtree(env_dir, ignore_errors=True)
        session.run(python, "-m", "venv", str(env_dir))
        py = str(env_dir / "bin" / "python")
        session.run(py, "-m", "pip", "install", "-q", "pytest")
        for package, tests in TORCH_FREE_TESTS.items():
            if package not in PACKAGES:
                continue
            # --no-deps: these layers must import and work without torch or ptc-spec.
            session.run(py, "-m", "pip", "install", "-q", "--no-deps", str(ROOT / "packages" / package))
            session.chdir(ROOT / "packages" / package)
            session.run(py, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider", *session.posargs)
            session.chdir(ROOT)


def _importlinter_config(path: Path) -> None:
    names = {p: _import_name(p) for p in PACKAGES}
    components = [names[p] for p in PACKAGES if p not in (SPEC, "ptc")]
    roots = "\n".join(f"    {n}" for n in names.values())
    lines = ["[importlinter]", "root_packages =", roots, "include_external_packages = True", ""]
    if len(components) > 1:
        lines += ["[importlinter:contract:independent-components]", "name = No component imports another component",
                  "type = independence", "modules =", *[f"    {c}" for c in components], ""]
    lines += ["[importlinter:contract:components-never-import-ptc]", "name = Components never import the ptc meta-package",
              "type = forbidden", "source_modules =", *[f"    {c}" for c in [names[SPEC], *components]],
              "forbidden_modules =", "    ptc", ""]
    path.write_text("\n".join(lines))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (incl. the banned torch internals) and import-linter's package-boundary contracts."""
    session.install(*CONSTRAINTS, "ruff", "import-linter")
    session.run("ruff", "check", "packages", "tools", "noxfile.py")
    config = Path(session.create_tmp()) / "importlinter.ini"
    _importlinter_config(config)
    src_paths = os.pathsep.join(str(ROOT / "packages" / p / "src") for p in PACKAGES)
    # import-linter cannot forbid subpackages of external packages (torch._dynamo ...): ruff's
    # banned-api rule (TID251, configured in the root pyproject.toml) forbids those instead.
    session.run("lint-imports", "--config", str(config), env={"PYTHONPATH": src_paths})


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on every package's sources (strict for ptc-spec, per the root pyproject.toml)."""
    session.install(*CONSTRAINTS, "mypy", "torch", "sympy", "safetensors", "pytest", "numpy")
    paths = os.pathsep.join(str(ROOT / "packages" / p / "src") for p in PACKAGES)
    for package in PACKAGES:
        session.run("mypy", str(ROOT / "packages" / package / "src"), env={"MYPYPATH": paths})


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate the generated documents and fail if the committed ones are stale."""
    session.install(*CONSTRAINTS, *[str(ROOT / "packages" / p) for p in _local_deps("ptc-decomp" if "ptc-decomp" in PACKAGES else SPEC)])
    session.run("python", "-m", "ptc_spec.docs", "--check", str(ROOT / "docs" / "opset.md"))
    if "ptc-decomp" in PACKAGES:
        session.run("python", "-m", "ptc_decomp.coverage", "--check", str(ROOT / "docs" / "decomp-coverage.md"))


@nox.session(name="tests-tools")
def tests_tools(session: nox.Session) -> None:
    """Tests of the repository tools (release)."""
    session.install(*CONSTRAINTS, "pytest", "packaging")
    session.run("python", "-m", "pytest", str(ROOT / "tools" / "tests"), "-q", "-p", "no:cacheprovider")


@nox.session
def bench(session: nox.Session) -> None:
    """pytest-benchmark suites of every package (slow; compares with eager and torch.compile)."""
    for package in PACKAGES:
        _install_package(session, package)
    session.install("pytest-benchmark")
    for package in PACKAGES:
        bench_dir = ROOT / "packages" / package / "benchmarks"
        if bench_dir.is_dir() and any(bench_dir.glob("bench_*.py")):
            session.run("python", "-m", "pytest", str(bench_dir), "-o", "python_files=bench_*.py", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Tests marked gpu, run in the current environment from the sources (the GPU machine has no pip)."""
    paths = os.pathsep.join(str(ROOT / "packages" / p / "src") for p in PACKAGES)
    for package in PACKAGES:
        session.chdir(ROOT / "packages" / package)
        session.run("python3", "-m", "pytest", "tests", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                    success_codes=[0, 5], env={"PYTHONPATH": paths})


nox.options.sessions = ["lint", "typecheck", "docs", "tests-tools", *[f"tests-{p}" for p in PACKAGES], "torchfree"]
