"""ptc.compile and friends, mirroring torch.compile so that switching is one line."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from . import distributed
from .backends import BACKENDS, Backend, make_backend
from .config import MODES, make_options
from .errors import MissingComponentError, UnknownOptionError
from .logs import configure_logs
from .report import configure_report

configure_logs()
configure_report()


def _capture() -> Any:
    import ptc_capture

    return ptc_capture


distributed.register_wrappers(_capture().register_module_wrapper)


def list_backends() -> list[str]:
    """Names of every backend ptc.compile accepts (ptc's own and any registered by plugins)."""
    names = set(BACKENDS)
    registry = getattr(_capture(), "list_backends", None)
    if callable(registry):
        names |= set(registry())
    return sorted(names)


def _resolve_backend(backend: str | Callable[..., Any], mode: str | None, options: dict[str, Any] | None) -> Backend:
    opts = make_options(mode, options)
    if opts.cudagraphs and importlib.util.find_spec("ptc_cudagraphs") is None:
        raise MissingComponentError(f"mode={mode!r} needs ptc-cudagraphs: pip install ptc-cudagraphs (or ptc[all])")
    if callable(backend):
        return backend
    if backend in BACKENDS:
        return make_backend(backend, opts)
    lookup = getattr(_capture(), "lookup_backend", None)
    if callable(lookup) and backend in list_backends():
        found: Backend = lookup(backend)
        return found
    raise UnknownOptionError(f"unknown backend {backend!r}: valid backends are {', '.join(list_backends())}")


def compile(
    model: Callable[..., Any] | None = None,
    *,
    backend: str | Callable[..., Any] = "inductor",
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Return ``model`` (a function or nn.Module) compiled by ptc; usable as a decorator.

    ``mode`` is one of ``default``, ``reduce-overhead``, ``max-autotune``,
    ``max-autotune-no-cudagraphs``; unknown backends, modes and options raise one error
    listing the valid ones. ``dynamic``, as torch.compile's: None compiles static first and
    makes a dim symbolic once it changes, True is symbolic from the first compile, False static.
    """
    compiled_backend = _resolve_backend(backend, mode, options)

    def wrap(fn: Callable[..., Any]) -> Any:
        return _capture().optimize(compiled_backend, fullgraph=fullgraph, dynamic=dynamic)(fn)

    return wrap if model is None else wrap(model)


def mark_dynamic(tensor: Any, dim: int | list[int], *, min: int | None = None, max: int | None = None) -> None:
    """Make ``dim`` of ``tensor`` symbolic in the next compile that reads it (as torch.compile's mark_dynamic)."""
    _capture().mark_dynamic(tensor, dim, min=min, max=max)


def mark_static(tensor: Any, dim: int | list[int]) -> None:
    """Keep ``dim`` of ``tensor`` static, over automatic dynamic and dynamic=True."""
    _capture().mark_static(tensor, dim)


def explain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Return a callable that runs ``fn`` and reports its graphs, breaks and guards."""
    explained: Callable[..., Any] = _capture().explain(fn)
    return explained


def reset() -> None:
    """Forget every compiled graph and cached guard."""
    _capture().reset()
    if importlib.util.find_spec("ptc_cudagraphs") is not None:
        import ptc_cudagraphs

        ptc_cudagraphs.reset()


def disable(fn: Callable[..., Any] | None = None) -> Any:
    """Run ``fn`` (or the decorated function) eagerly, never captured."""
    return _capture().disable(fn) if fn is not None else _capture().disable


def set_stance(stance: str = "default") -> Any:
    """Set what compiled frames do for a while (``default``, ``force_eager``, ``eager_on_recompile``,
    ``fail_on_recompile``); usable as a plain call, a context manager and a decorator."""
    return _capture().set_stance(stance)


def is_compiling() -> bool:
    """True while ptc is capturing a frame."""
    return bool(_capture().is_compiling())


__all__ = [
    "MODES", "compile", "disable", "explain", "is_compiling", "list_backends", "mark_dynamic", "mark_static", "reset", "set_stance",
]
