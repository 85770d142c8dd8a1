"""Functional counterparts of mutating ops."""

from __future__ import annotations

import pytest
import torch

from ptc_aot import UnsupportedMutationError
from ptc_aot.mutations import call_arguments, functional_form

aten = torch.ops.aten


@pytest.mark.parametrize(
    ("op", "bound", "expected"),
    [
        (aten.add_.Tensor, {"self": 1, "other": 2}, aten.add.Tensor),
        (aten.add.out, {"self": 1, "other": 2, "out": 3}, aten.add.Tensor),
        (aten.bernoulli_.float, {"self": 1, "p": 0.5}, aten.bernoulli.p),
        (aten.copy_.default, {"self": 1, "src": 2}, aten.copy.default),
        (aten.native_batch_norm.default, {"input": 1, "running_mean": 2, "running_var": 3, "training": True}, aten._native_batch_norm_legit_functional.default),
        (aten._native_batch_norm_legit.default, {"input": 1, "running_mean": 2, "running_var": 3}, aten._native_batch_norm_legit_functional.default),
    ],
)
def test_functional_form_finds_the_functional_op(op: torch._ops.OpOverload, bound: dict[str, object], expected: torch._ops.OpOverload) -> None:
    assert functional_form(op, bound).target is expected


def test_batch_norm_new_running_stats_follow_its_own_results() -> None:
    form = functional_form(aten.native_batch_norm.default, {"input": 1, "running_mean": 2, "running_var": 3, "training": True})
    assert form.written == ("running_mean", "running_var")
    assert form.new_values == (3, 4)
    assert form.results == (0, 1, 2)


def test_in_place_results_alias_the_written_argument() -> None:
    form = functional_form(aten.mul_.Tensor, {"self": 1, "other": 2})
    assert form.written == ("self",) and form.new_values == (None,) and form.results == ("self",)


def test_resize_is_refused() -> None:
    with pytest.raises(UnsupportedMutationError, match="size or storage"):
        functional_form(aten.resize_.default, {"self": 1, "size": [2]})


def test_call_arguments_fill_skipped_defaults_positionally() -> None:
    args, kwargs = call_arguments(aten.add.Tensor._schema, {"self": "a", "other": "b", "alpha": 2})
    assert args == ("a", "b") and kwargs == {"alpha": 2}
    args, kwargs = call_arguments(aten.slice_scatter.default._schema, {"self": "a", "src": "b", "end": 3})
    assert args == ("a", "b", 0, None, 3)
