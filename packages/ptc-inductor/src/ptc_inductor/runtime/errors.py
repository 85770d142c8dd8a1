"""Errors of the run-time half."""

from __future__ import annotations

from ..errors import PtcInductorError


class ArtifactError(PtcInductorError):
    """A compiled graph cannot be written as an artifact, or an artifact cannot be read or run."""


class InputError(PtcInductorError, ValueError):
    """A call passed inputs an ahead-of-time artifact does not admit (dtype, device, size)."""
