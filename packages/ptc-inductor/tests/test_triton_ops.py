"""The part-1 op, reduction and view tests, run again through the Triton backend.

Each reused test calls ``conftest.check``, which compiles with ``ptc_inductor.compile``; here
that is swapped for the Triton driver, so the same graphs and comparisons with eager run
through generated Triton kernels (under ``TRITON_INTERPRET=1`` in CI). Larger batches are
``slow``: the interpreter runs every program of every kernel in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import test_pointwise_ops
import test_reductions
import test_views
import torch
from test_triton_kernels import compile_triton

import ptc_inductor
from ptc_inductor.triton_interpret import interpreting

# The reused tests build CPU inputs, which only Triton's interpreter can run kernels on.
pytestmark = pytest.mark.skipif(not interpreting(), reason="needs TRITON_INTERPRET=1")

FAST: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
    (test_pointwise_ops.test_integer_ops_match_eager, ()),
    (test_pointwise_ops.test_bool_ops_match_eager, ()),
    (test_reductions.test_integer_and_bool_reductions_match_eager, ()),
    (test_views.test_cat_and_constant_pad_match_eager, ()),
]
SLOW: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
    (test_pointwise_ops.test_unary_float_ops_match_eager, (torch.float32,)),
    (test_pointwise_ops.test_unary_float_ops_match_eager, (torch.float64,)),
    (test_pointwise_ops.test_unary_float_ops_match_eager, (torch.bfloat16,)),
    (test_pointwise_ops.test_binary_float_ops_match_eager_with_broadcasting, (torch.float32,)),
    (test_pointwise_ops.test_binary_float_ops_match_eager_with_broadcasting, (torch.bfloat16,)),
    (test_pointwise_ops.test_casts_between_dtypes_match_eager, ()),
    (test_reductions.test_float_reductions_match_eager, (torch.float32,)),
    (test_reductions.test_float_reductions_match_eager, (torch.float64,)),
    (test_reductions.test_float_reductions_match_eager, (torch.bfloat16,)),
    (test_views.test_views_compose_without_copies_and_match_eager, ()),
    (test_views.test_reshape_of_noncontiguous_value_remaps_indices, ()),
    (test_views.test_gathers_and_slice_scatters_match_eager, ()),
    (test_views.test_creation_ops_match_eager, ()),
]


def _name(case: tuple[Callable[..., None], tuple[Any, ...]]) -> str:
    fn, args = case
    return fn.__name__ + "".join(f"-{a}" for a in args)


@pytest.fixture
def triton_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route ``ptc_inductor.compile`` (as conftest.check calls it) to the Triton driver."""
    monkeypatch.setattr(ptc_inductor, "compile", lambda gm, **kw: compile_triton(gm))


@pytest.mark.parametrize("case", FAST, ids=_name)
def test_part1_case_matches_eager_through_triton(case: tuple[Callable[..., None], tuple[Any, ...]], triton_backend: None) -> None:
    fn, args = case
    fn(*args)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=_name)
def test_part1_slow_case_matches_eager_through_triton(case: tuple[Callable[..., None], tuple[Any, ...]], triton_backend: None) -> None:
    fn, args = case
    fn(*args)
