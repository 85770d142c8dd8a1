"""ptc: make unmodified PyTorch programs faster with ``model = ptc.compile(model)``."""

from . import cache, report
from .api import (
    MODES,
    compile,
    disable,
    explain,
    is_compiling,
    list_backends,
    mark_dynamic,
    mark_static,
    reset,
    set_stance,
)
from .errors import MissingComponentError, PtcError, UnknownOptionError
from .export import ExportedProgram, ExportError, aot_compile, export, load_exported
from .logs import CHANNELS
from .logs import enable as enable_logs

__version__ = "0.1.0"

__all__ = [
    "CHANNELS",
    "ExportError",
    "ExportedProgram",
    "MODES",
    "MissingComponentError",
    "PtcError",
    "UnknownOptionError",
    "aot_compile",
    "cache",
    "compile",
    "disable",
    "enable_logs",
    "explain",
    "export",
    "is_compiling",
    "list_backends",
    "load_exported",
    "mark_dynamic",
    "mark_static",
    "report",
    "reset",
    "set_stance",
]
