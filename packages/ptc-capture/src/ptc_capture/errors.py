"""Exceptions raised by ptc_capture."""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BytecodeError",
    "CaptureInternalError",
    "FrameHookUnavailable",
    "GraphBreakError",
    "PtcCaptureError",
    "RecompileError",
    "ShapeConstraintError",
]


class PtcCaptureError(Exception):
    """Base class of every error raised by ptc_capture."""


class FrameHookUnavailable(PtcCaptureError):
    """The C frame hook could not be loaded, so frames cannot be captured."""


class BytecodeError(PtcCaptureError):
    """Bytecode could not be decoded, edited or assembled into a valid code object."""


class GraphBreakError(PtcCaptureError):
    """With fullgraph=True, the traced code needed a graph break (the message names reason and line)."""


class CaptureInternalError(PtcCaptureError):
    """A bug in the symbolic interpreter; the message names the function and the instruction."""


class BackendError(PtcCaptureError):
    """A backend name could not be resolved, or the backend failed to compile a graph."""


class ShapeConstraintError(PtcCaptureError):
    """A dim marked dynamic (mark_dynamic) could not stay dynamic: it is 0/1, out of its range, or the trace fixed it."""


class RecompileError(PtcCaptureError):
    """Under ``set_stance("fail_on_recompile")`` a frame's guards failed (the message names the frame and the guard)."""
