"""Exceptions raised by ptc-cudagraphs."""

from __future__ import annotations


class PtcCudagraphsError(Exception):
    """Base class of every error ptc-cudagraphs raises."""


class OverwrittenOutputError(PtcCudagraphsError):
    """A graph output the user still holds was overwritten by a later replay."""


class CaptureError(PtcCudagraphsError):
    """Recording a callable into a CUDA graph failed; the callable runs eagerly instead."""
