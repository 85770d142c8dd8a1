"""ptc_capture: turn running Python frames into torch-dialect FX graphs.

The frame hook (:mod:`ptc_capture.framehook`) and the bytecode layer
(:mod:`ptc_capture.bytecode`) do not need torch; the capture API below is imported from
:mod:`ptc_capture.api` on first use, so ``import ptc_capture`` works without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ptc_capture.errors import (
    BytecodeError,
    FrameHookUnavailable,
    PtcCaptureError,
    RecompileError,
    ShapeConstraintError,
)

__version__ = "0.1.0"

# Public names served lazily by ptc_capture.api (which imports torch).
_LAZY_API = (
    "ExplainOutput",
    "allow_in_graph",
    "capture_function",
    "current_stance",
    "disable",
    "events",
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
)

__all__ = [
    "BytecodeError",
    "FrameHookUnavailable",
    "PtcCaptureError",
    "RecompileError",
    "ShapeConstraintError",
    "__version__",
    *_LAZY_API,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY_API:
        try:
            api = importlib.import_module("ptc_capture.api")
        except ImportError as exc:
            raise ImportError(
                f"ptc_capture.{name} needs ptc_capture.api, which could not be imported ({exc}); "
                f"the capture API requires torch."
            ) from exc
        try:
            value = getattr(api, name)
        except AttributeError:
            raise AttributeError(f"ptc_capture.api does not define {name!r} yet") from None
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ptc_capture' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
