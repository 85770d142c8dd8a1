"""Exceptions raised by ptc-decomp. Every message is one sentence: what is wrong and what to do."""

from __future__ import annotations


class PtcDecompError(Exception):
    """Base class of every error ptc-decomp raises."""


class WrongDialectError(PtcDecompError):
    """decompose was handed a graph that is not an aten-dialect (or core) graph."""


class NoDecompositionError(PtcDecompError):
    """The graph uses ops that are outside the target op set and have no decomposition."""


class InPlaceOpError(PtcDecompError):
    """The graph mutates a tensor; decompose takes functional graphs only."""


class DecompositionError(PtcDecompError):
    """A decomposition failed or produced a result whose shape or dtype differs from the op's."""
