"""Every decomposition checked against the eager op on OpInfo sample inputs (forward and backward)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (in ptc-decomp[test])")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

import ptc_decomp  # noqa: E402

from .eager_check import Report, check_strictly, run_samples  # noqa: E402

TABLE = ptc_decomp.table("core/1")
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool)
# The default run keeps to a representative slice (three dtypes, two samples, one backward
# sample) so the package's tests stay within a few minutes; the slow run takes everything.
DEFAULT_DTYPES = (torch.float32, torch.bfloat16, torch.int64)
DEFAULT_SAMPLES = 2
DEFAULT_BACKWARD_SAMPLES = 1
# OpInfos that take minutes or need data-dependent ops unrelated to the table.
SKIP = {"nn.functional.ctc_loss", "linalg.matrix_norm", "norm", "linalg.norm", "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d"}

_SUFFIXES = ("_backward_data", "_dense_backward", "_with_indices_backward", "_with_indices", "_backward", "_forward", "2d_forward", "_legit_functional", "_legit_no_training", "_legit", "_kernel_backward", "_kernel")


def stems(op: Any) -> set[str]:
    """Names under which an OpInfo may exercise ``op`` (gelu_backward -> gelu, _log_softmax -> log_softmax)."""
    name = op._schema.name.split("::", 1)[1]
    found = {name, name.lstrip("_")}
    for base in list(found):
        found.add(base.removeprefix("native_"))
    for base in list(found):
        for suffix in _SUFFIXES:
            if base.endswith(suffix):
                found.add(base[: -len(suffix)])
    for base in list(found):
        if base.endswith(("1d", "2d", "3d")):
            found.add(base[:-2])
        if base.startswith("upsample"):
            found.add("interpolate")
        if base.startswith(("reflection_pad", "replication_pad")):
            found.add("pad")
    return found


def _selected() -> list[Any]:
    wanted: set[str] = set()
    for op in TABLE:
        wanted |= stems(op)
    chosen = []
    for info in op_db:
        names = {info.name, info.name.rsplit(".", 1)[-1], str(info.aten_name), str(info.aten_name).rsplit(".", 1)[-1]}
        if names & wanted and info.name not in SKIP:
            chosen.append(info)
    return chosen


OPINFOS = _selected()
TOTALS: dict[str, Counter[Any]] = {"checked": Counter(), "samples": Counter(), "strict": Counter(), "symbolic": Counter()}


def _label(info: Any) -> str:
    return re.sub(r"\W", "_", f"{info.name}.{info.variant_test_name}".strip("."))


def _check(info: Any, dtype: torch.dtype, limit: int | None, backward_limit: int | None) -> Report:
    report = Report()
    samples = list(info.sample_inputs("cpu", dtype, requires_grad=False))
    run_samples(info.op, samples[:limit], False, TABLE, report)
    TOTALS["samples"][info.name] += len(samples[:limit])
    if info.supports_autograd and dtype in (torch.float32, torch.float64):
        grad_samples = list(info.sample_inputs("cpu", dtype, requires_grad=True))[:backward_limit]
        run_samples(info.op, grad_samples, True, TABLE, report)
        TOTALS["samples"][info.name] += len(grad_samples)
    TOTALS["checked"].update(report.checked)
    TOTALS["strict"].update(report.strict)
    TOTALS["symbolic"].update(report.symbolic)
    return report


def _cases(dtypes: tuple[torch.dtype, ...]) -> list[Any]:
    cases = []
    for info in OPINFOS:
        supported = info.supported_dtypes("cpu")
        for dtype in dtypes:
            if dtype in supported:
                cases.append(pytest.param(info, dtype, id=f"{_label(info)}-{str(dtype).removeprefix('torch.')}"))
    return cases


@pytest.mark.parametrize(("info", "dtype"), _cases(DEFAULT_DTYPES))
def test_decompositions_match_eager_on_opinfo_samples(info: Any, dtype: torch.dtype) -> None:
    report = _check(info, dtype, DEFAULT_SAMPLES, DEFAULT_BACKWARD_SAMPLES)
    assert not report.failures, "\n".join(report.failures[:5])


@pytest.mark.slow
@pytest.mark.parametrize(("info", "dtype"), _cases(DTYPES))
def test_decompositions_match_eager_on_all_opinfo_samples(info: Any, dtype: torch.dtype) -> None:
    report = _check(info, dtype, None, None)
    assert not report.failures, "\n".join(report.failures[:5])


def test_every_decomposition_is_checked_by_an_opinfo_or_a_hand_written_sample() -> None:
    # Runs after the parametrized OpInfo tests of this module have filled TOTALS.
    if not TOTALS["checked"]:
        pytest.skip("the OpInfo tests of this module were deselected")
    from .test_samples import MANUAL

    unchecked = sorted(str(op) for op in TABLE if op not in TOTALS["checked"] and op not in MANUAL)
    assert not unchecked, f"{len(unchecked)} decompositions have no sample: {unchecked}"


def test_every_decomposition_emits_only_core_ops_or_ops_that_decompose() -> None:
    # The whole table under decompose(strict=True): each op the OpInfo samples reached was
    # traced and decomposed there; the rest are decomposed here on their hand-written samples.
    if not TOTALS["checked"]:
        pytest.skip("the OpInfo tests of this module were deselected")
    from .test_samples import MANUAL, REFERENCES

    report = Report()
    for op in TABLE:
        if op in TOTALS["strict"]:
            continue
        for sample in MANUAL.get(op, []):
            args, kwargs = sample()
            check_strictly(op, args, kwargs, REFERENCES.get(op, op)(*args, **kwargs), report)
    TOTALS["strict"].update(report.strict)
    TOTALS["symbolic"].update(report.symbolic)
    assert not report.failures, "\n".join(report.failures[:5])
    undecomposed = sorted(str(op) for op in TABLE if op not in TOTALS["strict"])
    assert not undecomposed, f"{len(undecomposed)} decompositions were never decomposed strictly: {undecomposed}"
