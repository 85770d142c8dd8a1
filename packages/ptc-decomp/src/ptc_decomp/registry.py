"""The decomposition table: one registry, filled by ``@register_decomposition`` where each is written."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
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


# Whether the decomposition being traced may decline (return NotImplemented) because its op can
# run as a fallback instead: set by decompose() around each decomposition call.
_MAY_DECLINE: ContextVar[bool] = ContextVar("ptc_decomp_may_decline", default=False)


def may_decline() -> bool:
    """True when a decomposition may return NotImplemented to leave its op to the eager kernel.

    Decompositions decline forms whose eager rounding they cannot reproduce without cost
    (addbmm's per-batch rounding in bf16); without fallbacks they must decompose anyway.
    """
    return _MAY_DECLINE.get()


@contextmanager
def declining(allowed: bool) -> Iterator[None]:
    """Set what :func:`may_decline` answers inside the block."""
    token = _MAY_DECLINE.set(allowed)
    try:
        yield
    finally:
        _MAY_DECLINE.reset(token)


# The metadata the graph records for the node being decomposed (None inside nested calls).
_RECORDED: ContextVar[Any] = ContextVar("ptc_decomp_recorded", default=None)


def recorded() -> Any:
    """The TensorMeta (or tuple of them) the graph records for the op being decomposed.

    None when the op is called by another decomposition. Decompositions of ops whose results
    depend on the device (norm statistics: their dtype, and whether eval mode saves any)
    follow it, so a graph traced for one device decomposes the same on any machine.
    """
    return _RECORDED.get()


@contextmanager
def recording(meta: Any) -> Iterator[None]:
    """Set what :func:`recorded` answers inside the block."""
    token = _RECORDED.set(meta)
    try:
        yield
    finally:
        _RECORDED.reset(token)


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
