"""The backend registry: built-in ``eager``, names from the ``ptc.backends`` entry points, any callable.

A backend is any callable ``backend(gm, example_inputs) -> callable`` (the Backend protocol);
the returned callable takes the graph's inputs positionally and returns its outputs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Protocol

import torch
import torch.fx

from ptc_capture.errors import BackendError

__all__ = ["Backend", "list_backends", "lookup_backend", "register_backend"]


class Backend(Protocol):
    """Compiles one torch-dialect graph into a callable with the same inputs and outputs."""

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]: ...


_REGISTRY: dict[str, Backend] = {}
_lock = threading.Lock()
ENTRY_POINT_GROUP = "ptc.backends"


def register_backend(
    fn: Backend | None = None, *, name: str | None = None
) -> Backend | Callable[[Backend], Backend]:
    """Register ``fn`` under ``name`` (default: its __name__); usable as ``@register_backend``."""

    def register(backend: Backend) -> Backend:
        key = name or getattr(backend, "__name__", None)
        if not key:
            raise BackendError("a backend needs a name: pass name=...")
        with _lock:
            _REGISTRY[key] = backend
        return backend

    return register(fn) if fn is not None else register


def eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Run the captured graph as is (its generated forward, skipping nn.Module call overhead)."""
    return gm.forward


register_backend(eager, name="eager")


def _entry_point_backends() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def lookup_backend(backend: str | Backend) -> Backend:
    """Return the backend callable for a name or a callable."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise BackendError(f"a backend must be a name or a callable, got {type(backend).__name__}")
    found = _REGISTRY.get(backend)
    if found is not None:
        return found
    ep = _entry_point_backends().get(backend)
    if ep is None:
        known = sorted(set(_REGISTRY) | set(_entry_point_backends()))
        raise BackendError(f"unknown backend {backend!r}; known backends: {', '.join(known)}")
    try:
        loaded = ep.load()
    except Exception as exc:
        raise BackendError(f"backend {backend!r} from entry point {ep.value} failed to load: {exc}") from exc
    with _lock:
        _REGISTRY[backend] = loaded
    return loaded  # type: ignore[no-any-return]


def list_backends() -> list[str]:
    """Names of every registered and installed backend."""
    return sorted(set(_REGISTRY) | set(_entry_point_backends()))
