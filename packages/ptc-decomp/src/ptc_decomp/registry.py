"""The decomposition table: one registry, filled by ``@register_decomposition`` where each is written."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import torch

from ptc_spec import LATEST_CORE, opset, overload_name

Decomposition = Callable[..., Any]
"""A Python function over aten ops with the signature of the overload it replaces."""

F = TypeVar("F", bound=Decomposition)


@dataclass(frozen=True, slots=True)
class Registered:
    """One table row: the overload, its decomposition and the module (kind) that defines it."""

    op: torch._ops.OpOverload
    fn: Decomposition
    kind: str


# The one mutable registry of the package, filled at import time of ptc_decomp.decomps.
_REGISTRY: dict[torch._ops.OpOverload, Registered] = {}
_LOADED = False


def register_decomposition(*ops: torch._ops.OpOverload) -> Callable[[F], F]:
    """Register the decorated function as the decomposition of each overload in ``ops``."""

    def wrap(fn: F) -> F:
        kind = fn.__module__.rsplit(".", 1)[-1]
        for op in ops:
            if not isinstance(op, torch._ops.OpOverload):
                raise TypeError(f"register_decomposition takes OpOverloads, got {op!r}; name an overload such as aten.gelu.default")
            if op in _REGISTRY:
                raise ValueError(f"{overload_name(op)} already has a decomposition in {_REGISTRY[op].kind}")
            _REGISTRY[op] = Registered(op, fn, kind)
        return fn

    return wrap


def _load() -> None:
    global _LOADED
    if not _LOADED:
        # Importing the package runs every module's decorators; done lazily so that
        # register_decomposition is importable by the modules themselves without a cycle.
        importlib.import_module("ptc_decomp.decomps")
        _LOADED = True


def registered() -> Mapping[torch._ops.OpOverload, Registered]:
    """Every registered decomposition, whatever the target, keyed by overload."""
    _load()
    return MappingProxyType(_REGISTRY)


def table(target: str = LATEST_CORE) -> dict[torch._ops.OpOverload, Decomposition]:
    """Return op -> decomposition for every registered op outside ``target``; callers may subset it."""
    _load()
    ops = opset(target)
    return {op: row.fn for op, row in _REGISTRY.items() if not ops.in_set(op)}
