"""Counters of recordings, replays and fallbacks, and their frozen snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ptc_cudagraphs.reasons import FallbackReason


@dataclass(frozen=True, slots=True)
class CudagraphStats:
    """A snapshot of what the graph trees did; returned by stats()."""

    recordings: int
    replays: int
    warmups: int
    eager_calls: int
    fallbacks: dict[str, int]
    fallback_log: tuple[tuple[str, str], ...]
    pool_bytes: int
    pinned_output_bytes: int
    input_buffer_bytes: int


@dataclass
class Stats:
    """The mutable counters one tree updates (the only mutable statistics state)."""

    recordings: int = 0
    replays: int = 0
    warmups: int = 0
    eager_calls: int = 0
    pool_bytes: int = 0
    pinned_output_bytes: int = 0
    input_buffer_bytes: int = 0
    fallbacks: Counter[FallbackReason] = field(default_factory=Counter)
    # First occurrence of each (function, reason): enough to explain, bounded in size.
    fallback_log: dict[tuple[str, str], None] = field(default_factory=dict)

    def fallback(self, function: str, reason: FallbackReason) -> bool:
        """Count one eager call for reason; return True the first time function hits it."""
        self.fallbacks[reason] += 1
        self.eager_calls += 1
        entry = (function, reason.name)
        if entry in self.fallback_log:
            return False
        self.fallback_log[entry] = None
        return True

    def snapshot(self) -> CudagraphStats:
        """Return the counters as a frozen CudagraphStats."""
        return CudagraphStats(
            recordings=self.recordings,
            replays=self.replays,
            warmups=self.warmups,
            eager_calls=self.eager_calls,
            fallbacks={reason.name: n for reason, n in self.fallbacks.items()},
            fallback_log=tuple(self.fallback_log),
            pool_bytes=self.pool_bytes,
            pinned_output_bytes=self.pinned_output_bytes,
            input_buffer_bytes=self.input_buffer_bytes,
        )


def merge(snapshots: list[CudagraphStats]) -> CudagraphStats:
    """Return the sum of several trees' snapshots."""
    fallbacks: Counter[str] = Counter()
    log: dict[tuple[str, str], None] = {}
    for snap in snapshots:
        fallbacks.update(snap.fallbacks)
        log.update(dict.fromkeys(snap.fallback_log))
    return CudagraphStats(
        recordings=sum(s.recordings for s in snapshots),
        replays=sum(s.replays for s in snapshots),
        warmups=sum(s.warmups for s in snapshots),
        eager_calls=sum(s.eager_calls for s in snapshots),
        fallbacks=dict(fallbacks),
        fallback_log=tuple(log),
        pool_bytes=sum(s.pool_bytes for s in snapshots),
        pinned_output_bytes=sum(s.pinned_output_bytes for s in snapshots),
        input_buffer_bytes=sum(s.input_buffer_bytes for s in snapshots),
    )
