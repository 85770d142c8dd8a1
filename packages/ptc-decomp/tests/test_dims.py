"""View-stride computation agrees with eager's view() on random layouts."""

from __future__ import annotations

import random

import pytest
import torch

from ptc_decomp.dims import infer_size, reduction_dims, reshape, view_strides, wrap_dim


def _random_case(rng: random.Random) -> tuple[torch.Tensor, list[int]]:
    ndim = rng.randint(0, 4)
    x = torch.empty([rng.choice([1, 2, 3, 4]) for _ in range(ndim)])
    if ndim > 1:
        order = list(range(ndim))
        rng.shuffle(order)
        x = x.permute(order)
    if ndim and rng.random() < 0.3:
        d = rng.randrange(ndim)
        x = x.narrow(d, 0, max(1, x.shape[d] - 1))
    remaining, shape = x.numel(), []
    for _ in range(rng.randint(0, 4)):
        factor = rng.choice([f for f in (1, 2, 3, 4) if remaining % f == 0])
        shape.append(factor)
        remaining //= factor
    if remaining != 1:
        shape.append(remaining)
    return x, shape


@pytest.mark.parametrize("seed", range(4))
def test_view_strides_agree_with_eager(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        x, shape = _random_case(rng)
        try:
            expected: list[int] | None = list(x.view(shape).stride())
        except RuntimeError:
            expected = None
        got = view_strides(list(x.shape), list(x.stride()), shape)
        assert (got is None) == (expected is None), (tuple(x.shape), x.stride(), shape)
        if got is not None and expected is not None:
            assert [s for s, n in zip(got, shape) if n != 1] == [s for s, n in zip(expected, shape) if n != 1]


def test_reshape_copies_only_when_it_must() -> None:
    x = torch.randn(4, 6)
    assert reshape(x, [2, 12])._base is x
    t = x.t()
    out = reshape(t, [24])
    torch.testing.assert_close(out, t.reshape(24))


def test_dim_helpers() -> None:
    assert wrap_dim(-1, 3) == 2 and wrap_dim(0, 0) == 0
    with pytest.raises(IndexError, match="Dimension out of range"):
        wrap_dim(3, 3)
    assert reduction_dims(None, 3) == [0, 1, 2] and reduction_dims([-1, 0], 3) == [0, 2] and reduction_dims([], 2) == [0, 1]
    assert infer_size([2, -1], 12) == [2, 6]
    with pytest.raises(RuntimeError, match="invalid for input of size"):
        infer_size([5, -1], 12)
