"""Exceptions raised by ptc-inductor."""

from __future__ import annotations


class PtcInductorError(Exception):
    """Base class of every error ptc-inductor raises."""


class LoweringError(PtcInductorError):
    """A graph node could not be lowered to the loop IR or an extern kernel."""


class UnsupportedOpError(LoweringError):
    """The graph calls an op that is not in the op set ptc-inductor accepts."""


class CodegenError(PtcInductorError):
    """The backend could not generate code for a scheduled kernel."""


class BuildError(PtcInductorError):
    """The C++ compiler failed on generated source."""
