"""Exceptions raised by the ptc meta-package."""

from __future__ import annotations


class PtcError(Exception):
    """Base class of every error ptc itself raises."""


class UnknownOptionError(PtcError, ValueError):
    """An unknown backend, mode or option was passed to ptc.compile."""


class MissingComponentError(PtcError, ImportError):
    """A feature needs a ptc component that is not installed."""
