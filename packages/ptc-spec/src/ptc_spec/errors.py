"""Exceptions raised by ptc-spec. Every message is one sentence: what is wrong and what to do."""

from __future__ import annotations


class PtcSpecError(Exception):
    """Base class of every error ptc-spec raises."""


class DialectError(PtcSpecError):
    """A graph contains nodes outside the dialect it was checked against."""


class UnsupportedDialectError(PtcSpecError):
    """A consumer was handed a graph in a dialect or op-set version it does not support."""


class SerializationError(PtcSpecError):
    """A graph could not be written, or a file is not a valid ptc-graph file."""


class TraceError(PtcSpecError):
    """A function could not be traced into a graph."""


class DataDependentError(TraceError):
    """Tracing reached an op whose result depends on tensor values, which meta tensors lack."""


class BoundaryError(PtcSpecError):
    """A graph changed when round-tripped through the serialized form."""


class UnbackedSizeError(DataDependentError):
    """A decision needs the value of a data-dependent (unbacked) size, which has no example value."""
