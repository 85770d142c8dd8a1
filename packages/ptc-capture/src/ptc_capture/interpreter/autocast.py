"""Trace-time ``torch.autocast``: making regions, entering and leaving them, and the state queries.

A region is recorded as the public calls that switch the thread's autocast state (see
``ptc_capture.autocast_state.transition``), so the graph stays one graph and the aten tracer
that runs it sees autocast at work and records explicit casts. While any device type casts,
graph.py computes each op's dtypes on ptc-spec traced tensors, which carry their real
device (meta tensors never go through autocast).
"""

from __future__ import annotations

from typing import Any

import torch

from ptc_capture.autocast_state import (
    AutocastExit,
    AutocastRegion,
    AutocastState,
    AutocastSwitch,
    applied,
    nesting,
    transition,
)
from ptc_capture.guards import Guard
from ptc_capture.interpreter.builtins import builtin
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.interpreter.values import as_const, from_python
from ptc_capture.variables import Var, const
from ptc_spec import META_KEY

__all__ = ["autocast_at_end", "enter_region", "exit_region", "start_autocast"]

Args = list[Var]
Kwargs = dict[str, Var]

# torch.cpu.amp.autocast / torch.cuda.amp.autocast are deprecated subclasses that some torch
# versions may drop; they construct through the same path.
_AUTOCAST_CLASSES = [torch.amp.autocast] + [
    cls for cls in (getattr(torch.cpu.amp, "autocast", None), getattr(torch.cuda.amp, "autocast", None)) if cls is not None
]


def start_autocast(state: CaptureState) -> None:
    """Begin a trace in the thread's current autocast state (the caller guards on it)."""
    state.autocast = state.autocast_entry = AutocastState.current()
    state.autocast_nesting = 0
    state.autocast_entry_depth = nesting()
    state.graph.autocast = state.autocast if state.autocast.any_enabled else None


def _switch(state: CaptureState, after: AutocastState, change: int, clear: bool = False) -> None:
    graph = state.graph.graph
    for fn, args in transition(state.autocast, after, change, clear):
        graph.call_function(fn, args).meta[META_KEY] = None
    state.autocast = after
    state.autocast_nesting += change
    state.autocast_switched = True
    state.graph.autocast = after if after.any_enabled else None


def enter_region(frame: Frame, region: AutocastRegion) -> Var:
    """Enter ``region`` in the trace and the graph; return the Var of its ``__exit__``."""
    state = frame.state
    before = state.autocast
    _switch(state, before.with_device(region.mode, region.cache_enabled), 1)
    return Var("ctx_exit", AutocastExit(before.device(region.mode.device_type), before.cache_enabled))


def exit_region(frame: Frame, exit: AutocastExit) -> None:
    """Leave a region as eager's ``__exit__`` does: its device and the cache flag go back to their state before it."""
    state = frame.state
    relative = state.autocast_nesting - 1
    clear = False
    if relative <= 0:
        # Whether this exit empties the weight-cast cache depends on the regions open when the
        # frame was called, so that becomes part of the guard.
        clear = state.autocast_entry_depth + relative == 0
        state.guards.add(Guard("autocast_nesting", None, (-relative, clear)))
    _switch(state, state.autocast.with_device(exit.before, exit.cache_before), -1, clear)


def autocast_at_end(state: CaptureState) -> AutocastSwitch | None:
    """Make the graph end in the state it began in; return what the runner must do about autocast (None: nothing)."""
    if not state.autocast_switched:
        return None
    entry, final, open_regions = state.autocast_entry, state.autocast, state.autocast_nesting
    graph = state.graph.graph
    # Back to the entry state without clearing the cache: the runner re-enters the open regions,
    # which keep using it as eager's would.
    for fn, args in transition(final, entry, -open_regions):
        graph.call_function(fn, args).meta[META_KEY] = None
    return AutocastSwitch(entry, final, open_regions)


def _region_var(manager: Any) -> Var:
    region = AutocastRegion.of(manager)
    if region is None:
        raise Unsupported(f"torch.autocast for device type {manager.device!r} is not supported (only cpu and cuda)")
    return Var("ctx", region)


@builtin(*_AUTOCAST_CLASSES)
def _autocast(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    values = [as_const(a, "a torch.autocast argument") for a in args]
    options = {k: as_const(v, "a torch.autocast argument") for k, v in kwargs.items()}
    # The real constructor validates the arguments (warning and disabling as eager does) and
    # fills the defaults (dtype, cache) from the state in force, which is the traced one.
    with applied(frame.state.autocast):
        try:
            manager = fn.value(*values, **options)
        except Exception as exc:
            raise Unsupported(f"torch.autocast() raised {type(exc).__name__} at trace time (it raises in eager too)") from exc
    return _region_var(manager)


def _device_arg(args: Args, kwargs: Kwargs, default: str | None) -> str:
    found = kwargs.get("device_type", args[0] if args else None)
    if found is None:
        if default is None:
            raise Unsupported("an autocast query without a device type")
        return default
    device_type = as_const(found, "a device type")
    if not isinstance(device_type, str) or device_type not in ("cpu", "cuda"):
        raise Unsupported(f"autocast state of device type {device_type!r} is not tracked (only cpu and cuda)")
    return device_type


@builtin(torch.is_autocast_enabled)
def _is_autocast_enabled(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # Without an argument torch.is_autocast_enabled() answers for CUDA (its legacy meaning).
    return const(frame.state.autocast.device(_device_arg(args, kwargs, "cuda")).enabled)


@builtin(torch.get_autocast_dtype)
def _get_autocast_dtype(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return from_python(frame.state.autocast.device(_device_arg(args, kwargs, None)).dtype)


@builtin(torch.is_autocast_cache_enabled)
def _is_autocast_cache_enabled(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(frame.state.autocast.cache_enabled)


# Legacy per-device queries (deprecated in torch, still called by libraries).
_LEGACY: dict[str, tuple[str, str]] = {
    "is_autocast_cpu_enabled": ("cpu", "enabled"),
    "get_autocast_cpu_dtype": ("cpu", "dtype"),
    "get_autocast_gpu_dtype": ("cuda", "dtype"),
}


def _legacy(device_type: str, field: str) -> Any:
    def query(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
        return from_python(getattr(frame.state.autocast.device(device_type), field))

    return query


for _name, (_device_type, _field) in _LEGACY.items():
    _function = getattr(torch, _name, None)
    if _function is not None:
        builtin(_function)(_legacy(_device_type, _field))
