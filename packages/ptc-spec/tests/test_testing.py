"""The shared comparison helper must catch every kind of mismatch it promises to."""

from __future__ import annotations

import pytest
import torch

from ptc_spec.config import config_from_env
from ptc_spec.testing import assert_as_accurate_as_eager, assert_same, compare_with_eager


def test_value_dtype_shape_and_structure_mismatches_are_caught() -> None:
    a = torch.ones(3)
    with pytest.raises(AssertionError, match="dtype"):
        assert_same(a.double(), a)
    with pytest.raises(AssertionError, match="shape"):
        assert_same(torch.ones(4), a)
    with pytest.raises(AssertionError):
        assert_same(a + 1e-3, a)
    with pytest.raises(AssertionError, match="structure"):
        assert_same((a, a), [a, a])
    with pytest.raises(AssertionError, match="stride"):
        assert_same(torch.ones(3, 2).t(), torch.ones(2, 3), check_stride=True)
    assert_same(a + 1e-7, a)
    assert_same({"x": [a, 2]}, {"x": [a.clone(), 2]})


def test_compare_with_eager_checks_gradients_and_mutations() -> None:
    def good(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).sin()

    def wrong_grad(x: torch.Tensor) -> torch.Tensor:
        return (x.detach() * 3).sin() + x * 0 + (x * 3).sin().detach() - (x * 3).sin().detach()

    x = torch.randn(4, requires_grad=True)
    compare_with_eager(good, good, x, grads=True)
    with pytest.raises(AssertionError, match="grad of input 0"):
        compare_with_eager(wrong_grad, good, x, grads=True)

    def mutates(t: torch.Tensor) -> torch.Tensor:
        t.add_(1)
        return t * 2

    def forgets(t: torch.Tensor) -> torch.Tensor:
        return (t + 1) * 2

    with pytest.raises(AssertionError, match="inputs after the call"):
        compare_with_eager(forgets, mutates, torch.randn(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_accuracy_against_float64_accepts_one_rounding_and_catches_real_errors(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(64, 64, generator=gen) for _ in range(3))

    def multiply_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a * b + c  # eager rounds twice, a fused kernel once

    low = [t.to(dtype) for t in (a, b, c)]
    eager, reference = multiply_add(*low), multiply_add(*(t.double() for t in low))
    fused = multiply_add(*(t.float() for t in low)).to(dtype)  # one rounding at the end, as a fused kernel
    errors = assert_as_accurate_as_eager(fused, eager, reference)
    assert errors["err_ptc"] < errors["err_eager"]
    with pytest.raises(AssertionError, match="RMS error"):
        assert_as_accurate_as_eager(fused.t().contiguous(), eager, reference)  # a layout error
    with pytest.raises(AssertionError, match="RMS error"):
        assert_as_accurate_as_eager(fused * 1.05, eager, reference)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_as_accurate_as_eager(torch.where(fused > 2, torch.inf, fused), eager, reference)
    with pytest.raises(AssertionError, match="eager"):
        assert_as_accurate_as_eager(fused.float(), eager, reference)


def test_config_reads_the_boundary_switch() -> None:
    assert config_from_env({"PTC_CHECK_BOUNDARIES": "1"}).check_boundaries
    assert not config_from_env({}).check_boundaries
