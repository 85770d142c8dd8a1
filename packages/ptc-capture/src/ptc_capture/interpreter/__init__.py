"""The symbolic bytecode interpreter: handler families register themselves into loop.HANDLERS."""

from ptc_capture.interpreter import (  # noqa: F401  (registration)
    attrs,
    autocast,
    build,
    builtins,
    calls,
    checks,
    classes,
    collectives,
    constant_calls,
    container_slots,
    containers,
    control,
    copying,
    global_state,
    iterators,
    module_members,
    objects,
    ops,
    stack,
)
from ptc_capture.interpreter.loop import HANDLERS, StopAt, handler, run_frame
from ptc_capture.interpreter.state import CaptureState, Frame, Raised, Unsupported, UserLocation

__all__ = ["HANDLERS", "CaptureState", "Frame", "Raised", "StopAt", "Unsupported", "UserLocation", "handler", "run_frame"]
