"""The run-time half of ptc-inductor: loads and launches compiled kernels and ahead-of-time artifacts.

It imports torch, the standard library and safetensors only: never the compiler half of
ptc-inductor, sympy, Triton's compiler or another ptc package, so a serving process that loads
an artifact needs none of them (and no C++ compiler).
"""

from __future__ import annotations

from .artifact import FORMAT, load, read_manifest
from .errors import ArtifactError, InputError
from .program import Program
from .recycle import OutputRecycler

__all__ = ["FORMAT", "ArtifactError", "InputError", "OutputRecycler", "Program", "load", "read_manifest"]
