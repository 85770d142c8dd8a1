"""ptc-inductor: compiles core-dialect FX graphs into fused C++/OpenMP kernels and a Python wrapper."""

from . import events
from .artifact import ArtifactError, load_artifact, save_artifact
from .build import STATS as build_stats
from .compiler import CompiledGraph, compile
from .config import Config, config_from_env
from .coverage import coverage
from .errors import BuildError, CodegenError, LoweringError, PtcInductorError, UnsupportedOpError
from .size_sources import SymbolSource

__all__ = [
    "ArtifactError",
    "BuildError",
    "CodegenError",
    "CompiledGraph",
    "Config",
    "LoweringError",
    "PtcInductorError",
    "SymbolSource",
    "UnsupportedOpError",
    "build_stats",
    "compile",
    "config_from_env",
    "coverage",
    "events",
    "load_artifact",
    "save_artifact",
]
