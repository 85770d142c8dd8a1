"""Shared fixtures of the torch-free tests: stdlib code objects to round-trip."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterator

import pytest

STDLIB_PACKAGES = ("json", "dataclasses", "collections")


def stdlib_modules() -> list[types.ModuleType]:
    """json, dataclasses, collections and their importable submodules."""
    modules = []
    for name in STDLIB_PACKAGES:
        module = importlib.import_module(name)
        modules.append(module)
        for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
            try:
                modules.append(importlib.import_module(f"{name}.{info.name}"))
            except ImportError:
                continue
    return modules


def nested_codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in its constants, depth first."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested_codes(const)


@pytest.fixture(scope="session")
def stdlib_codes() -> list[types.CodeType]:
    """Every code object (module bodies, functions, methods, comprehensions) of the stdlib modules."""
    codes: list[types.CodeType] = []
    for module in stdlib_modules():
        source = inspect.getsource(module)
        codes.extend(nested_codes(compile(source, module.__file__ or module.__name__, "exec")))
    assert len(codes) > 250
    return codes
