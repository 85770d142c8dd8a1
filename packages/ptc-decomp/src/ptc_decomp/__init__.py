"""ptc-decomp: decompositions of ATen ops into the ptc core op set, applied graph to graph."""

from .config import Config, config_from_env
from .decompose import FALLBACKS_KEY, KEPT_KEY, SOURCE_KEY, decompose
from .errors import DecompositionError, InPlaceOpError, NoDecompositionError, PtcDecompError, WrongDialectError
from .promotion import result_type
from .registry import Decomposition, may_decline, register_decomposition, registered, table

__version__ = "0.1.0"

__all__ = [
    "FALLBACKS_KEY",
    "KEPT_KEY",
    "SOURCE_KEY",
    "Config",
    "Decomposition",
    "DecompositionError",
    "InPlaceOpError",
    "NoDecompositionError",
    "PtcDecompError",
    "WrongDialectError",
    "config_from_env",
    "decompose",
    "may_decline",
    "register_decomposition",
    "registered",
    "result_type",
    "table",
]
