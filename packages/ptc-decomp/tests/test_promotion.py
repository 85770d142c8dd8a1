"""result_type and friends agree with eager's type promotion."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from ptc_decomp.promotion import as_operand, category, float_result_type, opmath, result_type

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
NUMBERS: list[Any] = [True, 3, 2.5, 1j]


def _operands() -> list[tuple[Any, Any]]:
    cases: list[tuple[Any, Any]] = []
    for a, b in itertools.product(DTYPES, DTYPES):
        cases.append((torch.ones(2, dtype=a), torch.ones(2, dtype=b)))
        cases.append((torch.ones(2, dtype=a), torch.ones((), dtype=b)))
    for a, n in itertools.product(DTYPES, NUMBERS):
        cases.append((torch.ones(2, dtype=a), n))
        cases.append((torch.ones((), dtype=a), n))
    return cases


@pytest.mark.parametrize(("a", "b"), _operands())
def test_result_type_matches_torch(a: Any, b: Any) -> None:
    assert result_type(a, b) == torch.result_type(a, b)


def test_three_tiers() -> None:
    x = torch.ones(3, dtype=torch.int32)
    zero_dim = torch.ones((), dtype=torch.float64)
    assert result_type(x, zero_dim, 1) == torch.float64
    assert result_type(torch.ones(3, dtype=torch.float16), zero_dim, 1.5) == torch.float16


def test_float_result_type_and_opmath() -> None:
    assert float_result_type(torch.ones(2, dtype=torch.int64)) == torch.float32
    assert float_result_type(torch.ones(2, dtype=torch.bfloat16)) == torch.bfloat16
    assert opmath(torch.bfloat16) == torch.float32 and opmath(torch.float64) == torch.float64
    assert [category(d) for d in (torch.bool, torch.int8, torch.float16, torch.complex64)] == [0, 1, 2, 3]


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bool])
@pytest.mark.parametrize("number", [2, 2.5, False])
def test_as_operand_promotes_like_the_number(dtype: torch.dtype, number: Any) -> None:
    x = torch.ones(3, dtype=dtype)
    expected = torch.where(x.bool(), x, number)
    actual = torch.ops.aten.where.self(x.bool(), x, as_operand(number, x))
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)
