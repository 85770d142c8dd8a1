"""Every core/1 pointwise op, compiled in batches and compared with eager over layouts and dtypes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import check

aten = torch.ops.aten

FLOAT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]

# Ops defined on all reals, then ops that need inputs in (0, 1).
UNARY_ANY = [
    aten.abs.default, aten.neg.default, aten.exp.default, aten.exp2.default, aten.expm1.default,
    aten.sin.default, aten.cos.default, aten.tan.default, aten.atan.default, aten.sinh.default,
    aten.cosh.default, aten.tanh.default, aten.asinh.default, aten.sigmoid.default, aten.erf.default,
    aten.erfc.default, aten.floor.default, aten.ceil.default, aten.round.default, aten.trunc.default,
    aten.sign.default, aten.frac.default, aten.reciprocal.default, aten.lgamma.default,
    aten.digamma.default, aten.i0.default,
]
UNARY_UNIT = [
    aten.log.default, aten.log2.default, aten.log10.default, aten.log1p.default, aten.sqrt.default,
    aten.rsqrt.default, aten.asin.default, aten.acos.default, aten.atanh.default, aten.erfinv.default,
]


def _tol(dtype: torch.dtype) -> dict[str, Any]:
    # Fused chains stay in float32 between ops where eager rounds after each one.
    return {torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2}, torch.float16: {"rtol": 1e-2, "atol": 1e-2}}.get(dtype, {})


def layouts(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    """Inputs of one dtype: contiguous, transposed, size-1 dims, odd 3-d, a sliced (strided) view."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    return [r(5, 7), r(7, 5).t(), r(1, 9), r(3, 1, 5), r(4, 10)[:, ::3]]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unary_float_ops_match_eager(dtype: torch.dtype) -> None:
    def fn(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for x in xs:
            for op in UNARY_ANY:
                outs.append(op(x))
            unit = aten.add.Tensor(aten.mul.Tensor(aten.sigmoid.default(x), 0.8), 0.1)
            for op in UNARY_UNIT:
                outs.append(op(unit))
            outs.append(aten.acosh.default(aten.add.Tensor(aten.abs.default(x), 1.0)))
            outs.append(aten.signbit.default(x))
            outs.append(aten.isnan.default(aten.log.default(x)))
            outs.append(aten.isinf.default(aten.reciprocal.default(aten.round.default(x))))
        return tuple(outs)

    check(fn, *layouts(dtype), **_tol(dtype))


BINARY_FLOAT = [
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.maximum.default,
    aten.minimum.default, aten.atan2.default, aten.copysign.Tensor, aten.fmax.default,
    aten.fmin.default, aten.hypot.default, aten.logaddexp.default, aten.remainder.Tensor,
    aten.fmod.Tensor, aten.nextafter.default,
]
COMPARE = [aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor]
COMPARE_SCALAR = [aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_binary_float_ops_match_eager_with_broadcasting(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 7, generator=g).to(dtype)
    bt = torch.randn(7, 6, generator=g).to(dtype).t()
    row = torch.randn(1, 7, generator=g).to(dtype)
    col = torch.randn(6, 1, generator=g).to(dtype)

    def fn(a: torch.Tensor, bt: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for other in (bt, row, col):
            for op in BINARY_FLOAT:
                if op is aten.nextafter.default and dtype in (torch.bfloat16, torch.float16):
                    continue
                outs.append(op(a, other))
            for op in COMPARE:
                outs.append(op(a, other))
        for op in COMPARE_SCALAR:
            outs.append(op(a, 0.25))
        outs.append(aten.add.Tensor(a, bt, alpha=2.5))
        outs.append(aten.sub.Tensor(a, 3))
        outs.append(aten.div.Tensor_mode(a, col, rounding_mode="floor"))
        outs.append(aten.div.Tensor_mode(a, col, rounding_mode="trunc"))
        outs.append(aten.pow.Tensor_Tensor(aten.abs.default(a), row))
        for e in (2, 3, 0.5, -1, 1.7):
            outs.append(aten.pow.Tensor_Scalar(aten.abs.default(a), e))
        outs.append(aten.pow.Scalar(2.0, a))
        outs.append(aten.heaviside.default(aten.round.default(a), row))
        outs.append(aten.where.self(aten.gt.Tensor(a, row), a, col))
        outs.append(aten.clamp.default(a, -0.5, 0.5))
        outs.append(aten.clamp.default(a, None, 0.1))
        outs.append(aten.clamp.Tensor(a, col, None))
        outs.append(aten.nan_to_num.default(aten.log.default(a), 0.0, 100.0, -100.0))
        return tuple(outs)

    check(fn, a, bt, row, col, **_tol(dtype))


def test_integer_ops_match_eager() -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randint(-20, 20, (5, 6), generator=g)
    b = torch.randint(1, 7, (6, 5), generator=g).t() * torch.tensor([1, -1, 1, -1, 1, -1])
    s = torch.randint(0, 5, (1, 6), generator=g)

    def fn(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for op in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.remainder.Tensor, aten.fmod.Tensor,
                   aten.maximum.default, aten.minimum.default, aten.bitwise_and.Tensor, aten.bitwise_or.Tensor,
                   aten.bitwise_xor.Tensor, aten.div.Tensor, *COMPARE):
            outs.append(op(a, b))
        outs.append(aten.div.Tensor_mode(a, b, rounding_mode="floor"))
        outs.append(aten.div.Tensor_mode(a, b, rounding_mode="trunc"))
        outs.append(aten.bitwise_left_shift.Tensor(a, s))
        outs.append(aten.bitwise_right_shift.Tensor(a, s))
        outs.append(aten.pow.Tensor_Tensor(a, s))
        outs.append(aten.pow.Tensor_Scalar(a, 2))
        for op in (aten.abs.default, aten.neg.default, aten.sign.default, aten.bitwise_not.default,
                   aten.floor.default, aten.exp.default, aten.sqrt.default):
            outs.append(op(a))
        outs.append(aten.add.Tensor(a, 1.5))
        outs.append(aten.clamp.default(a, -3, 4))
        outs.append(aten._to_copy.default(a, dtype=torch.float32))
        outs.append(aten._to_copy.default(aten.mul.Tensor(a, 0.37), dtype=torch.int32))
        return tuple(outs)

    check(fn, a, b, s)


def test_bool_ops_match_eager() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randint(0, 2, (4, 7), generator=g).bool()
    b = torch.randint(0, 2, (7, 4), generator=g).bool().t()
    x = torch.randn(4, 7, generator=g)

    def fn(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for op in (aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default,
                   aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor, aten.eq.Tensor):
            outs.append(op(a, b))
        outs.append(aten.logical_not.default(a))
        outs.append(aten.bitwise_not.default(a))
        outs.append(aten.where.self(a, x, aten.neg.default(x)))
        outs.append(aten.logical_and.default(x, a))
        outs.append(aten._to_copy.default(a, dtype=torch.float32))
        outs.append(aten._to_copy.default(x, dtype=torch.bool))
        outs.append(aten.add.Tensor(a, x))
        return tuple(outs)

    check(fn, a, b, x)


def test_casts_between_dtypes_match_eager() -> None:
    x = torch.randn(3, 5) * 50
    dtypes = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool]

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for d in dtypes:
            y = aten._to_copy.default(aten.abs.default(x), dtype=d)
            outs.append(y)
            outs.append(aten._to_copy.default(y, dtype=torch.float32))
        outs.append(aten.clone.default(aten.permute.default(x, [1, 0])))
        return tuple(outs)

    check(fn, x)


