"""Why a call runs eagerly instead of replaying a graph, and the pure decisions behind it."""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Sequence

log = logging.getLogger("ptc.cudagraphs")


class FallbackReason(enum.Enum):
    """A reason to run eagerly; the value is the sentence logged."""

    CPU_TENSORS = "an input tensor is not on the graph's CUDA device"
    MIXED_DEVICES = "input tensors are on more than one device"
    INPUT_MUTATION = "the callable mutates a non-static input"
    CAPTURE_FAILED = "the callable cannot be captured (CPU sync or uncapturable work)"
    TOO_MANY_SHAPES = "too many distinct input signatures were recorded"
    NOT_CUDA = "no CUDA device is available"


# Reasons after which the callable never records again: its behaviour, not its inputs, is
# what a graph cannot hold.
PERMANENT = frozenset({FallbackReason.INPUT_MUTATION, FallbackReason.CAPTURE_FAILED,
                       FallbackReason.NOT_CUDA})


def device_reason(devices: Collection[object], expected: object) -> FallbackReason | None:
    """Return why tensors on `devices` cannot feed a graph on `expected`, or None."""
    distinct = set(devices)
    if len(distinct) > 1:
        return FallbackReason.MIXED_DEVICES
    if distinct and expected not in distinct:
        return FallbackReason.CPU_TENSORS
    return None


def mutation_reason(before: Sequence[int], after: Sequence[int]) -> FallbackReason | None:
    """Return INPUT_MUTATION when any version counter moved between before and after."""
    for old, new in zip(before, after, strict=True):
        if old != new:
            return FallbackReason.INPUT_MUTATION
    return None


def log_fallback(function: str, reason: FallbackReason, detail: str = "") -> None:
    """Log one fallback decision on the ptc.cudagraphs channel."""
    suffix = f": {detail}" if detail else ""
    if reason is FallbackReason.TOO_MANY_SHAPES:
        log.warning("cudagraphs: %s runs eagerly because %s%s", function, reason.value, suffix)
    else:
        log.info("cudagraphs: %s runs eagerly because %s%s", function, reason.value, suffix)
