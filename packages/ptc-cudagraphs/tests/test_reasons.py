from __future__ import annotations

import pytest

from ptc_cudagraphs.reasons import FallbackReason, device_reason, mutation_reason


@pytest.mark.parametrize(
    ("devices", "expected", "reason"),
    [
        ([], "cuda:0", None),
        (["cuda:0"], "cuda:0", None),
        (["cpu"], "cuda:0", FallbackReason.CPU_TENSORS),
        (["cuda:0", "cpu"], "cuda:0", FallbackReason.MIXED_DEVICES),
        (["cuda:0", "cuda:1"], "cuda:0", FallbackReason.MIXED_DEVICES),
    ],
)
def test_device_reason(devices: list[str], expected: str, reason: FallbackReason | None) -> None:
    assert device_reason(devices, expected) is reason


def test_mutation_reason_reports_any_moved_counter() -> None:
    assert mutation_reason([0, 3], [0, 3]) is None
    assert mutation_reason([0, 3], [0, 4]) is FallbackReason.INPUT_MUTATION
