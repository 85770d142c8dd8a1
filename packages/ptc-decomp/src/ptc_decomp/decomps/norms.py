"""Normalization layers (layer, group and batch norm, forward) with eager's saved statistics."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ptc_spec import TensorMeta, norm_statistics_dtype, running_statistics_dtype

from ..dims import reduction_dims, reshape
from ..errors import InPlaceOpError
from ..promotion import cast, opmath, upcast
from ..registry import recorded, register_decomposition

aten = torch.ops.aten


def moments(x: torch.Tensor, dims: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, biased variance) of an opmath tensor over ``dims``, both kept as size-1 dims."""
    n = 1
    for d in dims:
        n *= x.shape[d]
    mean = aten.div.Tensor(aten.sum.dim_IntList(x, dims, True), n)
    diff = aten.sub.Tensor(x, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(diff, diff), dims, True), n)
    return mean, var


def _affine(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
    if weight is not None:
        x = aten.mul.Tensor(x, aten.view.default(upcast(weight), list(shape)) if list(weight.shape) != list(shape) else upcast(weight))
    if bias is not None:
        x = aten.add.Tensor(x, aten.view.default(upcast(bias), list(shape)) if list(bias.shape) != list(shape) else upcast(bias))
    return x


@register_decomposition(aten.native_layer_norm.default)
def native_layer_norm(
    input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, mean, rstd) of layer norm over the trailing ``normalized_shape`` dims."""
    axis = input.dim() - len(normalized_shape)
    dims = list(range(axis, input.dim()))
    x = upcast(input)
    mean, var = moments(x, dims)
    rstd = aten.rsqrt.default(aten.add.Tensor(var, eps))
    out = _affine(aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd), weight, bias, list(normalized_shape))
    # Statistics in the dtype eager saves them in on this device (float32 on CUDA, the
    # parameters' on the CPU), which is what the traced graph records.
    stats, _ = _saved_like(norm_statistics_dtype(input.device.type, input.dtype, weight.dtype if weight is not None else None), False)
    return cast(out, input.dtype), cast(mean, stats), cast(rstd, stats)


@register_decomposition(aten.native_group_norm.default)
def native_group_norm(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, N: int, C: int, HxW: int, group: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, mean[N, group], rstd[N, group]) of group norm."""
    x = reshape(upcast(input), [N, group, (C // group) * HxW])
    mean, var = moments(x, [2])
    rstd = aten.rsqrt.default(aten.add.Tensor(var, eps))
    normalized = reshape(aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd), [N, C, HxW])
    out = reshape(_affine(normalized, weight, bias, [1, C, 1]), list(input.shape))
    stats_shape = [N, group]
    return cast(out, input.dtype), cast(aten.view.default(mean, stats_shape), input.dtype), cast(aten.view.default(rstd, stats_shape), input.dtype)


def _saved_like(default_dtype: torch.dtype, default_empty: bool) -> tuple[torch.dtype, bool]:
    """(dtype, empty) of the saved statistics (results 1 and 2): what the graph records for the
    node, else what eager gives on the input's device (the defaults)."""
    meta = recorded()
    if isinstance(meta, (tuple, list)) and len(meta) > 2 and isinstance(meta[1], TensorMeta):
        return meta[1].dtype, meta[1].shape == (0,)
    return default_dtype, default_empty


def _channel_shape(x: torch.Tensor) -> list[int]:
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _running_dtype(input: torch.Tensor, running: torch.Tensor, index: int) -> torch.dtype:
    # On CUDA (and in the meta kernel) the updated running statistics come back in the
    # promotion of their dtype with float32; CPU kernels keep their dtype. Values are rounded
    # to the running dtype first, so both agree on the numbers. The graph's record decides.
    meta = recorded()
    if isinstance(meta, (tuple, list)) and len(meta) > index and isinstance(meta[index], TensorMeta):
        return meta[index].dtype
    return running_statistics_dtype(input.device.type, input.dtype, running.dtype)


def _batch_norm(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    device_type: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(out, save_mean, save_rstd, new_running_mean, new_running_var) as eager's functional batch norm.

    Saved statistics are in the dtype eager saves them in on the input's device
    (ptc_spec.norm_statistics_dtype): float32 for reduced inputs on CUDA, the parameters' on the CPU;
    ``device_type`` overrides the device for ops with one kernel (cuDNN's).
    """
    compute = opmath(input.dtype)
    shape = _channel_shape(input)
    x = upcast(input)
    if training:
        dims = reduction_dims([0, *range(2, input.dim())], input.dim())
        mean, var = moments(x, dims)
        rstd = aten.rsqrt.default(aten.add.Tensor(var, eps))
        out = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
        save_mean, save_rstd = aten.squeeze.dims(mean, dims), aten.squeeze.dims(rstd, dims)
        new_mean = new_var = None
        if running_mean is not None and running_var is not None:
            n = input.numel() // input.shape[1]
            unbiased = aten.mul.Tensor(aten.squeeze.dims(var, dims), n / max(n - 1, 1))
            new_mean = aten.add.Tensor(aten.mul.Tensor(cast(running_mean, compute), 1 - momentum), aten.mul.Tensor(save_mean, momentum))
            new_var = aten.add.Tensor(aten.mul.Tensor(cast(running_var, compute), 1 - momentum), aten.mul.Tensor(unbiased, momentum))
            new_mean = cast(cast(new_mean, running_mean.dtype), _running_dtype(input, running_mean, 3))
            new_var = cast(cast(new_var, running_var.dtype), _running_dtype(input, running_var, 4))
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch norm in eval mode needs running_mean and running_var")
        rstd = aten.rsqrt.default(aten.add.Tensor(cast(running_var, compute), eps))
        out = aten.mul.Tensor(aten.sub.Tensor(x, aten.view.default(cast(running_mean, compute), shape)), aten.view.default(rstd, shape))
        # Nothing reads the saved statistics in eval mode: CUDA saves the ones used, (C,),
        # eager's CPU kernels none (empty tensors); the traced graph records its device's.
        save_mean, save_rstd = cast(running_mean, compute), rstd
        new_mean, new_var = running_mean, running_var
    params = (weight.dtype if weight is not None else None, running_mean.dtype if running_mean is not None else None)
    stats, empty = _saved_like(norm_statistics_dtype(device_type or input.device.type, input.dtype, *params),
                               not training and (device_type or input.device.type) == "cpu")  # fmt: skip
    if empty:
        save_mean = aten.empty.memory_format([0], dtype=stats, device=input.device)
        save_rstd = aten.empty.memory_format([0], dtype=stats, device=input.device)
    out = _affine(out, weight, bias, shape)
    return cast(out, input.dtype), cast(save_mean, stats), cast(save_rstd, stats), new_mean, new_var


@register_decomposition(aten.native_batch_norm.default)
def native_batch_norm(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, save_mean, save_rstd); only when it would not update running statistics in place."""
    if training and running_mean is not None:
        raise InPlaceOpError(
            "native_batch_norm in training mode updates running_mean/running_var in place;"
            " functionalize the graph first (it becomes _native_batch_norm_legit_functional)"
        )
    out, save_mean, save_rstd, _, _ = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, save_mean, save_rstd


@register_decomposition(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_functional(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, save_mean, save_rstd, new_running_mean, new_running_var)."""
    out, save_mean, save_rstd, new_mean, new_var = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    if new_mean is None or new_var is None or not training:
        # Eval mode hands the running statistics back unchanged, as fresh tensors.
        new_mean = _fresh(running_mean, _running_dtype(input, running_mean, 3))
        new_var = _fresh(running_var, _running_dtype(input, running_var, 4))
    return out, save_mean, save_rstd, new_mean, new_var


def _fresh(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return aten.clone.default(x) if x.dtype == dtype else cast(x, dtype)


@register_decomposition(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_no_training(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode batch norm: (out, empty, empty)."""
    out, save_mean, save_rstd, _, _ = _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, save_mean, save_rstd


@register_decomposition(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batch norm without running statistics (always normalizes by batch statistics)."""
    out, save_mean, save_rstd, _, _ = _batch_norm(input, weight, bias, None, None, True, momentum, eps)
    return out, save_mean, save_rstd


@register_decomposition(aten._batch_norm_no_update.default)
def batch_norm_no_update(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode batch norm: (out, mean, rstd, empty reserve), or batch statistics without running ones."""
    if running_mean is None or running_var is None:
        out, save_mean, save_rstd, _, _ = _batch_norm(input, weight, bias, None, None, True, momentum, eps)
        return out, save_mean, save_rstd, aten.empty.memory_format([0], dtype=torch.uint8, device=input.device)
    # Like native_batch_norm in eval mode: (C,) statistics as the meta kernel records them.
    out, save_mean, save_rstd, _, _ = _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)
    reserve = aten.empty.memory_format([0], dtype=torch.uint8, device=input.device)
    return out, save_mean, save_rstd, reserve


@register_decomposition(aten.cudnn_batch_norm.default)
def cudnn_batch_norm(  # parameter names follow the op's schema
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
    training: bool, exponential_average_factor: float, epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """cuDNN's batch norm: (out, save_mean, save_rstd, reserve); refused where it would update running stats."""
    if training and running_mean is not None:
        # Its schema does not mark the running statistics as written, but the kernel writes them.
        raise InPlaceOpError(
            "cudnn_batch_norm in training mode updates running_mean/running_var in place;"
            " functionalize the graph first (it becomes _native_batch_norm_legit_functional)"
        )
    out, save_mean, save_rstd, _, _ = _batch_norm(
        input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon, device_type="cuda"
    )
    if not training:
        # cuDNN saves statistics for a backward only in training; in eval they come back
        # empty, in the weight's dtype (its meta kernel, and cuDNN, allocate them so).
        save_mean = aten.empty.memory_format([0], dtype=weight.dtype, device=input.device)
        save_rstd = aten.empty.memory_format([0], dtype=weight.dtype, device=input.device)
    return out, save_mean, save_rstd, aten.empty.memory_format([0], dtype=torch.uint8, device=input.device)


@register_decomposition(aten._fused_rms_norm.default)
def fused_rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None, eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x * rsqrt(mean(x**2) + eps) * weight, rstd in float32 for reduced floats); eps defaults to the dtype's epsilon."""
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    x = upcast(input)
    n = 1
    for d in dims:
        n *= input.shape[d]
    mean_square = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(x, x), dims, True), n)
    epsilon = torch.finfo(input.dtype).eps if eps is None else eps
    rstd = aten.rsqrt.default(aten.add.Tensor(mean_square, epsilon))
    out = aten.mul.Tensor(x, rstd)
    if weight is not None:
        out = aten.mul.Tensor(out, upcast(weight))
    return cast(out, input.dtype), rstd
