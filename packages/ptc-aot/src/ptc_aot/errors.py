"""Exceptions raised by ptc-aot. Every message is one sentence: what is wrong and what to do."""

from __future__ import annotations


class PtcAotError(Exception):
    """Base class of every error ptc-aot raises."""


class UnsupportedMutationError(PtcAotError):
    """A traced function mutates a tensor in a way functionalization does not handle."""


class PartitionError(PtcAotError):
    """The joint graph could not be split into a forward and a backward graph."""


class DoubleBackwardError(PtcAotError):
    """A gradient computed by a compiled backward was differentiated again."""


class CorruptProgramError(PtcAotError):
    """A program cache entry cannot be read; the cache drops it and the program is compiled again."""
