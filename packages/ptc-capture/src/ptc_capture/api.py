"""The public capture API: optimize, disable, allow_in_graph, reset, is_compiling, explain."""

from __future__ import annotations

import functools
import logging
import time
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ptc_capture import events, framehook
from ptc_capture.backends import Backend, list_backends, lookup_backend, register_backend
from ptc_capture.cache import CacheEntry, CodeCache, all_caches, cache_of
from ptc_capture.capture import Capture, capture_frame, capture_function
from ptc_capture.config import get_config, set_config
from ptc_capture.dynamic import DynamicPolicy, mark_dynamic, mark_static
from ptc_capture.errors import RecompileError
from ptc_capture.explanation import ExplainOutput, explain
from ptc_capture.interpreter.builtins import register_is_compiling
from ptc_capture.interpreter.calls import ALLOW_IN_GRAPH, DISABLED_ATTR
from ptc_capture.logs import channel, set_logs
from ptc_capture.stance import STATE as _STANCE
from ptc_capture.stance import current_stance, set_stance

__all__ = [
    "ExplainOutput",
    "allow_in_graph",
    "capture_function",
    "current_stance",
    "disable",
    "explain",
    "get_config",
    "is_compiling",
    "list_backends",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "optimize",
    "register_backend",
    "register_module_wrapper",
    "reset",
    "set_config",
    "set_logs",
    "set_stance",
]

F = TypeVar("F", bound=Callable[..., Any])

_recompile_log = channel("recompiles")
_get_extra: Callable[[types.CodeType], Any] = framehook._ext.get_code_extra if framehook.available else (lambda code: None)


class FrameCallback:
    """Decides, per fresh frame, which cached code runs (capturing on a miss)."""

    def __init__(
        self, backend: Backend, fullgraph: bool, record: Callable[[Capture], None] | None = None, dynamic: bool | None = None
    ) -> None:
        self.backend = backend
        self.fullgraph = fullgraph
        self.record = record
        self.dynamic = dynamic

    def __call__(self, frame: Any) -> types.CodeType | Callable[..., Any] | None:
        # The steady-state path of every hooked frame: kept to a few attribute reads and the
        # guard functions themselves.
        if _STANCE.name == "force_eager":
            return None
        code = frame.f_code
        cache: CodeCache = _get_extra(code) or cache_of(code)
        closure = frame.closure or ()
        f_locals, f_globals, f_builtins = frame.f_locals, frame.f_globals, frame.f_builtins
        for entry in cache.entries:
            if entry.owner is self and entry.check(f_locals, f_globals, f_builtins, closure):
                return entry.code
        return self._capture(code, cache, frame, closure)

    def _capture(self, code: types.CodeType, cache: CodeCache, frame: Any, closure: tuple[Any, ...]) -> types.CodeType | Callable[..., Any] | None:
        config = get_config()
        if _runs_under_autograd_apply(code, frame.f_locals):
            # A graph break left an autograd.Function's apply to run eagerly (see
            # interpreter/autograd_function.py); its forward must stay eager too.
            framehook.set_code_skip(code, True)
            return None
        if _FUNCTORCH_ACTIVE():
            # A frame that torch.vmap/grad runs (left to eager by a graph break, as torch.func
            # and associative_scan are) sees functorch's wrapped tensors, of which capture cannot
            # make examples: it runs as eager runs it. Not skipped for good: the same code may
            # run outside a transform later.
            return None
        count = cache.count(self)
        stance = _STANCE.name
        reason = None
        if count and stance == "eager_on_recompile":
            return None
        if count and (stance == "fail_on_recompile" or events.COMPILES.wanted() or _recompile_log.isEnabledFor(logging.INFO)):
            reason = _failures(cache, self, frame, closure)
            where = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
            if stance == "fail_on_recompile":
                raise RecompileError(f"{where} would recompile under set_stance('fail_on_recompile') because {reason}")
            _recompile_log.info("recompiling %s: %s", where, reason)
        if count >= config.recompile_limit:
            if not cache.exhausted:
                cache.exhausted = True
                warnings.warn(
                    f"ptc_capture: {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) reached the recompile "
                    f"limit of {config.recompile_limit}; it runs eagerly from now on (raise PTC_CAPTURE_RECOMPILE_LIMIT to allow more)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                framehook.set_code_skip(code, True)
            return None
        start = time.perf_counter()
        capture = capture_frame(
            code, frame.f_locals, frame.f_globals, frame.f_builtins, closure, self.backend, fullgraph=self.fullgraph, config=config,
            dynamic=DynamicPolicy(self.dynamic, cache.frame_sizes),
        )  # fmt: skip
        with cache.lock:
            pure_before = any(e.owner is self and e.capture.sees_no_tensors for e in cache.entries)
            cache.entries.append(CacheEntry(capture.check, capture.target, self, capture))
            if capture.sees_no_tensors and pure_before:
                # A second miss of a frame that never touched a tensor (a config's __getattribute__,
                # guarded on each attribute name) would recompile per call site for nothing: every
                # capture of it runs eagerly anyway. Skip it, as after the recompile limit but
                # silently; reset() hooks it again.
                cache.exhausted = True
                framehook.set_code_skip(code, True)
        if self.record is not None:
            self.record(capture)
        if events.COMPILES.wanted():
            seconds = time.perf_counter() - start
            events.COMPILES.emit(events.CompileEvent(code.co_qualname, code.co_filename, code.co_firstlineno, count, reason, capture, start, seconds))
        return capture.target


_FUNCTORCH_ACTIVE: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _runs_under_autograd_apply(code: types.CodeType, f_locals: Any) -> bool:
    """True for a frame whose first argument is the C ctx autograd.Function.apply made: a
    Function's forward or setup_context that eager apply is running."""
    if not code.co_argcount:
        return False
    first = f_locals.get(code.co_varnames[0]) if isinstance(f_locals, dict) else None
    return isinstance(first, torch._C._FunctionBase)


def _failures(cache: CodeCache, owner: Any, frame: Any, closure: tuple[Any, ...]) -> str:
    from ptc_capture.guard_failures import first_failure

    reasons = []
    for entry in reversed(cache.entries):  # the newest entry is the likeliest to have nearly matched
        if entry.owner is owner:
            reasons.append(first_failure(entry.capture.guards, frame.f_locals, frame.f_globals, frame.f_builtins, closure))
    return "; ".join(r for r in reasons if r) or "no entry matched"


def _run_with_callback(callback: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    previous = framehook.set_callback(callback)
    try:
        return fn(*args, **kwargs)
    finally:
        framehook.set_callback(previous)


_unavailable_warned = False


def _warn_unavailable() -> None:
    global _unavailable_warned
    if not _unavailable_warned:
        _unavailable_warned = True
        warnings.warn(f"ptc_capture cannot capture frames: {framehook.unavailable_reason} Running eagerly.", RuntimeWarning, stacklevel=3)


class OptimizedModule(torch.nn.Module):
    """An nn.Module whose calls run with capture enabled (the original is ``_orig_mod``)."""

    def __init__(self, module: torch.nn.Module, callback: FrameCallback) -> None:
        super().__init__()
        self._orig_mod = module
        self._ptc_callback = callback

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module with capture enabled."""
        if not framehook.available:
            _warn_unavailable()
            return self._orig_mod(*args, **kwargs)
        # _modules directly: self._orig_mod would go through nn.Module.__getattr__ on every call.
        module = self._modules["_orig_mod"]
        assert module is not None
        return _run_with_callback(self._ptc_callback, module, args, kwargs)


MODULE_WRAPPERS: dict[type, Callable[[Any], Any]] = {}
"""Wrapper module class -> the module an instance wraps (see register_module_wrapper)."""


def register_module_wrapper(cls: type, inner: Callable[[Any], Any]) -> None:
    """Make optimize/explain of a ``cls`` instance run its forward as it is and capture the
    forward of ``inner(instance)`` instead (DistributedDataParallel around the user's model)."""
    MODULE_WRAPPERS[cls] = inner


def _force_hook(fn: Any) -> None:
    # Code in torch's own files is skipped by default; an explicitly optimized function or
    # module forward is captured wherever it lives.
    if isinstance(fn, torch.nn.Module):
        inner = MODULE_WRAPPERS.get(type(fn))
        if inner is not None:
            # The wrapper's forward (its hooks and collectives) runs as it is; the frames it
            # calls are still captured.
            if framehook.available:
                framehook.set_code_skip(type(fn).forward.__code__, True)
            _force_hook(inner(fn))
            return
        fn = type(fn).forward
    code = getattr(fn, "__code__", None)
    if framehook.available and isinstance(code, types.CodeType):
        framehook.set_code_skip(code, False)


def optimize(backend: str | Backend = "eager", *, fullgraph: bool = False, dynamic: bool | None = None) -> Callable[[F], F]:
    """Return a decorator that captures calls of a function or module and compiles them with ``backend``.

    ``dynamic``: None (default) compiles static first and makes the dims that change between
    calls symbolic on recompile; True makes every dim symbolic from the start; False keeps
    sizes static (see ptc_capture.dynamic).
    """
    if dynamic not in (None, True, False):
        raise TypeError(f"dynamic must be None, True or False, not {dynamic!r}")
    compiler = lookup_backend(backend)
    callback = FrameCallback(compiler, fullgraph, dynamic=dynamic)

    def decorate(fn: F) -> F:
        if isinstance(fn, torch.nn.Module):
            _force_hook(fn)
            return OptimizedModule(fn, callback)  # type: ignore[return-value]
        _force_hook(fn)

        if not framehook.available:

            @functools.wraps(fn)
            def captured(*args: Any, **kwargs: Any) -> Any:
                _warn_unavailable()
                return fn(*args, **kwargs)

        else:
            set_callback = framehook._ext.set_callback

            @functools.wraps(fn)
            def captured(*args: Any, **kwargs: Any) -> Any:
                previous = set_callback(callback)
                try:
                    return fn(*args, **kwargs)
                finally:
                    set_callback(previous)

        captured._ptc_callback = callback  # type: ignore[attr-defined]
        return captured  # type: ignore[return-value]

    return decorate


def disable(fn: F) -> F:
    """Return ``fn`` wrapped so that it always runs eagerly (a traced call to it is a graph break)."""

    @functools.wraps(fn)
    def eager(*args: Any, **kwargs: Any) -> Any:
        if not framehook.available:
            return fn(*args, **kwargs)
        return _run_with_callback(None, fn, args, kwargs)

    setattr(eager, DISABLED_ATTR, True)
    return eager  # type: ignore[return-value]


def allow_in_graph(fn: F) -> F:
    """Record calls of ``fn`` as one graph node instead of tracing into it; returns ``fn``."""
    ALLOW_IN_GRAPH[id(fn)] = fn
    return fn


def reset() -> None:
    """Forget every cached capture and the input sizes seen (codes that hit the recompile limit are captured again)."""
    for cache in all_caches():
        with cache.lock:
            cache.entries.clear()
            cache.frame_sizes.clear()
            if cache.exhausted:
                cache.exhausted = False
                code = cache.code() if cache.code is not None else None
                if code is not None:
                    framehook.set_code_skip(code, None)


def is_compiling() -> bool:
    """True while ptc_capture traces the calling code (it is False when the code runs)."""
    return False


register_is_compiling(is_compiling)
