"""Hand-written samples for decompositions no OpInfo reaches (composite ops, Scalar overloads...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import ptc_decomp
from ptc_spec import overload_name

from .eager_check import Report, check_strictly, compare

aten = torch.ops.aten
TABLE = ptc_decomp.table("core/1")


def r(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Seeded random tensor (integers in [0, 5))."""
    gen = torch.Generator().manual_seed(seed + sum(shape))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(0, 5, shape, generator=gen).to(dtype)


Sample = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]

MANUAL: dict[Any, list[Sample]] = {
    aten._convolution.default: [lambda: ((r(1, 2, 5, 5), r(3, 2, 3, 3), r(3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True), {})],
    aten._native_batch_norm_legit.no_stats: [lambda: ((r(2, 3, 4, 4), r(3), r(3), True, 0.1, 1e-5), {})],
    aten._native_batch_norm_legit_functional.default: [
        lambda: ((r(2, 3, 4, 4), r(3), r(3), r(3), r(3).abs() + 0.5, True, 0.1, 1e-5), {}),
        lambda: ((r(2, 3, 4, 4, dtype=torch.bfloat16), None, None, r(3), r(3).abs() + 0.5, True, 0.1, 1e-5), {}),
    ],
    aten._native_batch_norm_legit_no_training.default: [lambda: ((r(2, 3, 4), r(3), r(3), r(3), r(3).abs() + 0.5, 0.1, 1e-5), {})],
    aten._reshape_alias.default: [lambda: ((r(4, 6), [6, 4], [1, 6]), {})],
    aten._safe_softmax.default: [lambda: ((torch.tensor([[1.0, 2.0, 3.0], [float("-inf")] * 3]), -1), {})],
    aten._unsafe_index.Tensor: [lambda: ((r(5, 4), [torch.tensor([0, 3, 3])]), {})],
    aten._unsafe_index_put.default: [lambda: ((r(5, 4), [torch.tensor([0, 3, 3])], r(3, 4), True), {})],
    aten._unsafe_view.default: [lambda: ((r(4, 6), [24]), {}), lambda: ((r(4, 6), [2, -1]), {})],
    aten.add.Scalar: [lambda: ((r(3, dtype=torch.int32), 2.5), {}), lambda: ((r(3, dtype=torch.bfloat16), 3), {"alpha": 2})],
    aten.arange.default: [lambda: ((5,), {}), lambda: ((4.0,), {"dtype": torch.float64})],
    aten.arange.start: [lambda: ((2, 9), {}), lambda: ((-1.5, 2), {})],
    aten.batch_norm_backward.default: [
        lambda: ((r(2, 3, 4, 4), r(2, 3, 4, 4, seed=1), r(3), r(3), r(3).abs() + 0.5, r(3), r(3).abs() + 0.5, True, 1e-5, [True, True, True], torch.empty(0)), {}),
        lambda: ((r(2, 3, 4, 4), r(2, 3, 4, 4, seed=1), r(3), r(3), r(3).abs() + 0.5, None, None, False, 1e-5, [True, True, True], torch.empty(0)), {}),
    ],
    aten.bernoulli.p: [lambda: ((r(4, 5), 0.3), {})],
    aten.bitwise_and.Scalar: [lambda: ((r(6, dtype=torch.int64), 3), {}), lambda: ((r(6, dtype=torch.bool), True), {})],
    aten.bitwise_or.Scalar: [lambda: ((r(6, dtype=torch.int32), 6), {})],
    aten.bitwise_xor.Scalar: [lambda: ((r(6, dtype=torch.uint8), 5), {})],
    aten.bitwise_left_shift.Tensor_Scalar: [lambda: ((r(6, dtype=torch.int64), 2), {})],
    aten.bitwise_right_shift.Tensor_Scalar: [lambda: ((r(6, dtype=torch.int32), 1), {})],
    aten.chunk.default: [lambda: ((r(7, 3), 3), {}), lambda: ((r(2, 6), 4, 1), {})],
    aten.clamp_max.default: [lambda: ((r(6), 0.2), {}), lambda: ((r(6, dtype=torch.int64), 2), {})],
    aten.conv1d.default: [lambda: ((r(1, 2, 9), r(4, 2, 3), r(4), [2], [1]), {})],
    aten.conv2d.default: [lambda: ((r(2, 5, 5), r(3, 2, 3, 3)), {})],
    aten.conv3d.default: [lambda: ((r(1, 1, 4, 4, 4), r(2, 1, 2, 2, 2)), {})],
    aten.copy.default: [lambda: ((r(3, 4), r(4, dtype=torch.float64)), {}), lambda: ((r(2, 2, dtype=torch.int32), r(2, 2)), {})],
    aten.div.Scalar_mode: [lambda: ((r(5) * 4, 1.5), {"rounding_mode": "floor"}), lambda: ((r(5, dtype=torch.int64), 2), {"rounding_mode": "trunc"})],
    aten.expand_as.default: [lambda: ((r(3, 1), r(2, 3, 4)), {})],
    aten.fill.Tensor: [lambda: ((r(2, 3), torch.tensor(2.5)), {})],
    aten.flatten.using_ints: [lambda: ((r(2, 3, 4), 1), {}), lambda: ((r(2, 3, 4).transpose(0, 2), 0, 1), {}), lambda: ((torch.tensor(3.0),), {})],
    aten.floor_divide.Scalar: [lambda: ((r(5) * 3, 2), {})],
    aten.fmod.Scalar: [lambda: ((r(5) * 3, 1.5), {}), lambda: ((r(5, dtype=torch.int32), 3), {})],
    aten.hstack.default: [lambda: (([r(2, 3), r(2, 1)],), {})],
    aten.isfinite.default: [lambda: ((torch.tensor([1.0, float("inf"), float("nan"), -float("inf")]),), {}), lambda: ((r(3, dtype=torch.int64),), {})],
    aten.lerp.Tensor: [lambda: ((r(4), r(4, seed=1), torch.tensor([0.0, 0.3, 0.7, 1.0])), {})],
    aten.lift_fresh_copy.default: [lambda: ((r(3),), {})],
    aten.linear.default: [lambda: ((r(2, 3, 4), r(5, 4), r(5)), {}), lambda: ((r(3, 4), r(5, 4), r(5)), {}), lambda: ((r(4), r(5, 4)), {})],
    aten.log_softmax.int: [lambda: ((r(3, 4), 1, torch.float64), {})],
    aten.matmul.default: [
        lambda: ((r(3), r(3, seed=1)), {}),
        lambda: ((r(2, 3), r(3)), {}),
        lambda: ((r(3), r(3, 4)), {}),
        lambda: ((r(2, 5, 3), r(3, 4)), {}),
        lambda: ((r(2, 1, 5, 3), r(4, 3, 2)), {}),
        lambda: ((r(3), r(2, 3, 4)), {}),
        lambda: ((r(2, 3, 4), r(4)), {}),
    ],
    aten.max.other: [lambda: ((r(4), torch.tensor([0.0, float("nan"), 1.0, -1.0])), {})],
    aten.min.other: [lambda: ((r(4), r(4, seed=2)), {})],
    aten.movedim.int: [lambda: ((r(2, 3, 4), 0, -1), {})],
    aten.narrow.default: [lambda: ((r(5, 3), 0, 1, 3), {}), lambda: ((r(5, 3), -1, -2, 2), {})],
    aten.native_dropout.default: [lambda: ((r(4, 5), 0.4, True), {}), lambda: ((r(4, 5), 0.4, False), {})],
    aten.nll_loss2d_forward.default: [lambda: ((torch.log_softmax(r(2, 3, 4, 4), 1), r(2, 4, 4, dtype=torch.int64) % 3, r(3).abs(), 1, -100), {})],
    aten.nll_loss2d_backward.default: [
        lambda: ((torch.tensor(1.5), torch.log_softmax(r(2, 3, 4, 4), 1), r(2, 4, 4, dtype=torch.int64) % 3, None, 1, 1, torch.tensor(20.0)), {})
    ],
    aten.one_hot.default: [lambda: ((torch.tensor([0, 2, 1]), 4), {})],
    aten.outer.default: [lambda: ((r(3), r(4)), {})],
    aten.positive.default: [lambda: ((r(3),), {})],
    aten.rand.default: [lambda: (([3, 4],), {}), lambda: (([5],), {"dtype": torch.float64})],
    aten.rand_like.default: [lambda: ((r(3, dtype=torch.bfloat16),), {})],
    aten.relu6.default: [lambda: ((r(8) * 8,), {})],
    aten.reshape.default: [lambda: ((r(4, 6).t(), [3, 8]), {}), lambda: ((r(4, 6), [-1]), {})],
    aten.reshape_as.default: [lambda: ((r(4, 6), r(8, 3)), {})],
    aten.rsub.Scalar: [lambda: ((r(4), 2.0), {}), lambda: ((r(4, dtype=torch.int64), 3), {"alpha": 2})],
    aten.softmax.int: [lambda: ((r(3, 4), 0), {}), lambda: ((r(3, 4, dtype=torch.bfloat16), 1, torch.float32), {})],
    aten.square.default: [lambda: ((r(4),), {}), lambda: ((r(4, dtype=torch.bool),), {})],
    aten.swapaxes.default: [lambda: ((r(2, 3, 4), 0, 2), {})],
    aten.swapdims.default: [lambda: ((r(2, 3, 4), -1, 1), {})],
    aten.take_along_dim.default: [lambda: ((r(3, 4), torch.tensor([[0], [3], [1]]), 1), {}), lambda: ((r(3, 4), torch.tensor([0, 5, 11])), {})],
    aten.true_divide.Tensor: [lambda: ((r(4, dtype=torch.int64), r(4, dtype=torch.int64) + 1), {})],
    aten.unflatten.int: [lambda: ((r(2, 12), 1, [3, -1]), {})],
    aten.uniform.default: [lambda: ((r(3, 4), -2.0, 3.0), {})],
    aten.view_as.default: [lambda: ((r(4, 6), r(3, 8)), {})],
    aten.where.Scalar: [lambda: ((r(5, dtype=torch.bool), 1.5, 0), {}), lambda: ((r(5, dtype=torch.bool), 1, 0), {})],
    aten.where.ScalarOther: [lambda: ((r(5, dtype=torch.bool), r(5, dtype=torch.bfloat16), 2.5), {})],
    aten.where.ScalarSelf: [lambda: ((r(5, dtype=torch.bool), 2, r(5, dtype=torch.int32)), {})],
    aten.zero.default: [lambda: ((r(2, 3).t(),), {})],
    aten.reflection_pad2d.default: [lambda: ((r(1, 2, 4, 5), [1, 2, 3, 0]), {})],
    aten.reflection_pad2d_backward.default: [lambda: ((r(1, 2, 7, 8), r(1, 2, 4, 5), [1, 2, 3, 0]), {})],
    aten.upsample_nearest2d.default: [
        lambda: ((r(1, 2, 3, 5), [7, 4]), {}),
        lambda: ((r(2, 1, 4, 4, dtype=torch.bfloat16), [8, 6], 2.0, 1.5), {}),
    ],
    aten.upsample_nearest2d.vec: [lambda: ((r(1, 2, 3, 5), None, [2.5, 0.6]), {}), lambda: ((r(1, 2, 3, 5), [6, 10], None), {})],
    aten.upsample_nearest2d_backward.default: [lambda: ((r(1, 2, 7, 4), [7, 4], [1, 2, 3, 5]), {}), lambda: ((r(1, 1, 6, 10), [6, 10], [1, 1, 3, 5], 2.0, 2.0), {})],
    aten.upsample_bilinear2d.vec: [
        lambda: ((r(1, 2, 3, 5), None, False, [2.0, 1.5]), {}),
        lambda: ((r(1, 2, 3, 5), [5, 9], True, None), {}),
    ],
    aten._batch_norm_no_update.default: [
        lambda: ((r(2, 3, 4), r(3), r(3), r(3), r(3).abs() + 0.5, 0.1, 1e-5), {}),
    ],
    aten._fused_rms_norm.default: [
        lambda: ((r(2, 3, 4), [4], r(4), 1e-6), {}),
        lambda: ((r(2, 3, 4, dtype=torch.bfloat16), [3, 4], None, None), {}),
    ],
    aten.copysign.Scalar: [lambda: ((r(5), -1.0), {}), lambda: ((r(5, dtype=torch.int64), 2), {})],
    aten.count_nonzero.dim_IntList: [lambda: ((r(3, 4, dtype=torch.int64), [1]), {})],
    aten.cudnn_batch_norm.default: [
        lambda: ((r(2, 3, 4), r(3), r(3), r(3), r(3).abs() + 0.5, False, 0.1, 1e-5), {}),
        lambda: ((r(2, 3, 4), r(3), r(3), None, None, True, 0.1, 1e-5), {}),
    ],
    aten.cudnn_batch_norm_backward.default: [
        lambda: ((r(2, 3, 4, 4), r(2, 3, 4, 4, seed=1), r(3), r(3), r(3).abs() + 0.5, r(3), r(3).abs() + 0.5, 1e-5, torch.empty(0, dtype=torch.uint8)), {}),
        lambda: ((r(4, 5, 7), r(4, 5, 7, seed=2), r(5), None, None, r(5), r(5).abs() + 0.5, 1e-3, torch.empty(0, dtype=torch.uint8)), {}),
    ],
    aten.norm.Scalar: [lambda: ((r(3, 4), 3), {})],
    aten.norm.ScalarOpt_dim: [lambda: ((r(3, 4), None, [1], True), {}), lambda: ((r(3, 4), float("inf"), [0]), {})],
    aten.remainder.Scalar_Tensor: [lambda: ((7, r(5, dtype=torch.int64) + 1), {}), lambda: ((2.5, r(5) + 3), {})],
    aten.xlogy.Scalar_Other: [lambda: ((r(5), 2.5), {}), lambda: ((r(5, dtype=torch.int64), 3), {})],
    aten.xlogy.Scalar_Self: [lambda: ((0, r(5).abs()), {}), lambda: ((2.0, r(5, dtype=torch.int32) + 1), {})],
    aten.embedding_dense_backward.default: [lambda: ((r(2, 3, 4), torch.tensor([[0, 2, 2], [1, 0, 2]]), 5, 2, True), {})],
    aten.gelu.default: [lambda: ((r(6, dtype=torch.bfloat16),), {"approximate": "tanh"})],
    # Eager's scan order decides the index: a NaN replaces the running max (the last NaN wins),
    # ties keep the first, and a window of -inf starts at its first position inside the input.
    aten.max_pool2d_with_indices.default: [
        lambda: ((_special(2, 3, 7, 9), [3, 3], [2, 2], [1, 1], [1, 1], False), {}),
        lambda: ((_special(1, 2, 8, 8, dtype=torch.bfloat16), [3, 2], [2, 3], [1, 1], [2, 1], True), {}),
        lambda: ((_special(2, 5, 6), [2, 2], [1, 1], [0, 0], [1, 1], False), {}),
        lambda: ((r(1, 2, 5, 5), [1, 1], [2, 2], [0, 0], [1, 1], False), {}),
        lambda: ((r(1, 2, 9, 9), [8, 8], [1, 1], [2, 2], [1, 1], False), {}),  # over the chained-window limit
        lambda: ((_special(2, 3, 7, 7, dtype=torch.float16), [3, 3], [2, 2], [1, 1], [1, 1], True), {}),
    ],
    # Over eager's own indices: ties, NaNs, overlapping windows, dilation, ceil mode, channels-last.
    aten.max_pool2d_with_indices_backward.default: [
        lambda: _pool_grad((2, 3, 7, 9), [3, 3], [2, 2], [1, 1], [1, 1], False),
        lambda: _pool_grad((1, 2, 8, 8), [3, 2], [2, 3], [1, 1], [2, 1], True, dtype=torch.bfloat16),
        lambda: _pool_grad((2, 5, 6), [2, 2], [1, 1], [0, 0], [1, 1], False),
        lambda: _pool_grad((1, 2, 5, 5), [1, 1], [2, 2], [0, 0], [1, 1], False),
        lambda: _pool_grad((1, 2, 9, 9), [8, 8], [1, 1], [2, 2], [1, 1], False),  # 64 windows a position
        lambda: _pool_grad((2, 3, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True, dtype=torch.float16, channels_last=True),
        lambda: _pool_grad((2, 4, 12, 10), [4, 4], [1, 1], [2, 2], [1, 1], False),  # 16 a position (bf16: eager sums in bf16)
    ],
    aten.avg_pool2d.default: [
        lambda: ((r(2, 3, 7, 9, dtype=torch.bfloat16), [3, 3], [2, 2], [1, 1], True, False, None), {}),
        lambda: ((r(1, 2, 6, 5), [2, 3], [1, 2], [1, 1], False, True, 5), {}),
        lambda: ((r(2, 3, 7, 9, dtype=torch.float16), [3, 3], [2, 2], [1, 1], False, True, None), {}),
    ],
}


def _special(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values with NaNs, -inf and repeated maxima scattered in."""
    x = torch.round(r(*shape) * 2).to(dtype)
    flat = x.view(-1)
    flat[:: 7] = float("nan")
    flat[3:: 11] = float("-inf")
    return x


def _pool_grad(
    shape: tuple[int, ...], kernel: list[int], stride: list[int], pad: list[int], dilation: list[int], ceil: bool,
    dtype: torch.dtype = torch.float32, channels_last: bool = False,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A max pool backward's arguments: eager's own indices of a pool over ``_special`` values."""
    x = _special(*shape, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out, indices = aten.max_pool2d_with_indices.default(x, kernel, stride, pad, dilation, ceil)
    return (r(*out.shape, dtype=dtype, seed=3), x, kernel, stride, pad, dilation, ceil, indices), {}


# Ops eager cannot run here (cuDNN needs CUDA): compared with the CPU op of the same meaning.
def _cudnn_batch_norm(*a: Any) -> tuple[torch.Tensor, ...]:
    out, mean, rstd = aten.native_batch_norm.default(*a)
    if not a[5]:  # statistics are saved for a backward only in training (cuDNN's meta kernel agrees)
        mean, rstd = mean.new_empty(0), rstd.new_empty(0)
    return out, mean, rstd, torch.empty(0, dtype=torch.uint8)


def _cudnn_batch_norm_backward(x: Any, g: Any, w: Any, rm: Any, rv: Any, mean: Any, invstd: Any, eps: float, _reserve: Any) -> Any:
    return aten.native_batch_norm_backward.default(g, x, w, rm, rv, mean, invstd, True, eps, [True, True, True])


REFERENCES: dict[Any, Callable[..., Any]] = {
    aten.cudnn_batch_norm.default: _cudnn_batch_norm,
    aten.cudnn_batch_norm_backward.default: _cudnn_batch_norm_backward,
}
CASES = [
    pytest.param(op, i, id=f"{overload_name(op)}-{i}")
    for op, samples in sorted(MANUAL.items(), key=lambda kv: overload_name(kv[0]))
    for i in range(len(samples))
]


@pytest.mark.parametrize(("op", "index"), CASES)
def test_decomposition_matches_eager_on_hand_written_sample(op: Any, index: int) -> None:
    args, kwargs = MANUAL[op][index]()
    expected = REFERENCES.get(op, op)(*args, **kwargs)
    actual = TABLE[op](*args, **kwargs)
    compare(op, actual, expected, args, kwargs)
    report = Report()
    check_strictly(op, args, kwargs, expected, report)
    assert not report.failures, report.failures[0]
