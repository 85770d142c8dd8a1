from __future__ import annotations

from ptc_cudagraphs.reasons import FallbackReason
from ptc_cudagraphs.stats import Stats, merge


def test_fallback_counts_every_call_and_logs_first_occurrence() -> None:
    stats = Stats()
    assert stats.fallback("f", FallbackReason.CPU_TENSORS)
    assert not stats.fallback("f", FallbackReason.CPU_TENSORS)
    assert stats.fallback("g", FallbackReason.CPU_TENSORS)
    snap = stats.snapshot()
    assert snap.fallbacks == {"CPU_TENSORS": 3} and snap.eager_calls == 3
    assert snap.fallback_log == (("f", "CPU_TENSORS"), ("g", "CPU_TENSORS"))


def test_merge_sums_trees() -> None:
    a, b = Stats(recordings=1, replays=2, pool_bytes=10), Stats(recordings=2, pool_bytes=5)
    b.fallback("f", FallbackReason.TOO_MANY_SHAPES)
    total = merge([a.snapshot(), b.snapshot()])
    assert (total.recordings, total.replays, total.pool_bytes) == (3, 2, 15)
    assert total.fallbacks == {"TOO_MANY_SHAPES": 1}
