"""ptc-inductor: compiles core-dialect FX graphs into fused C++/OpenMP kernels and a Python wrapper.

The compiler half (sympy, lowering, codegen) is imported on first use of one of its names, so
that ``import ptc_inductor.runtime`` (the run-time half, which loads ahead-of-time artifacts)
never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import BuildError, CodegenError, LoweringError, PtcInductorError, UnsupportedOpError

# Public names and the module each comes from (attribute name there, when it differs).
_LAZY: dict[str, tuple[str, str]] = {
    "ArtifactError": ("runtime.errors", "ArtifactError"),
    "CompiledGraph": ("compiled", "CompiledGraph"),
    "Config": ("config", "Config"),
    "SymbolSource": ("size_sources", "SymbolSource"),
    "build_stats": ("build", "STATS"),
    "compile": ("compiler", "compile"),
    "config_from_env": ("config", "config_from_env"),
    "coverage": ("coverage", "coverage"),
    "load_artifact": ("artifact", "load_artifact"),
    "save_artifact": ("artifact", "save_artifact"),
    "save_aot_artifact": ("aot_artifact", "save_aot_artifact"),
}

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
    "save_aot_artifact",
    "save_artifact",
]


def __getattr__(name: str) -> Any:
    if name == "events":
        return importlib.import_module(".events", __name__)
    if name not in _LAZY:
        raise AttributeError(f"module 'ptc_inductor' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
