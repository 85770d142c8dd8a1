# torch.ops overloads are untyped, so every aten call returns Any.
"""Backward ops of layer, group and batch norm, from the statistics the forward saved."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dims import reshape
from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def _input_grad(g: torch.Tensor, x_hat: torch.Tensor, rstd: torch.Tensor, dims: list[int], n: int) -> torch.Tensor:
    """rstd / n * (n * g - sum(g) - x_hat * sum(g * x_hat)), sums over the normalized ``dims``."""
    sum_g = aten.sum.dim_IntList(g, dims, True)
    sum_gx = aten.sum.dim_IntList(aten.mul.Tensor(g, x_hat), dims, True)
    inner = aten.sub.Tensor(aten.sub.Tensor(aten.mul.Tensor(g, n), sum_g), aten.mul.Tensor(x_hat, sum_gx))
    return aten.mul.Tensor(aten.div.Tensor(rstd, n), inner)


@register_decomposition(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_mask: Sequence[bool],
) -> Grads:
    """(grad_input, grad_weight, grad_bias), None where output_mask is false."""
    axis = input.dim() - len(normalized_shape)
    inner_dims = list(range(axis, input.dim()))
    outer_dims = list(range(axis))
    n = 1
    for s in normalized_shape:
        n *= s
    g, x = upcast(grad_out), upcast(input)
    r = upcast(rstd)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(x, upcast(mean)), r)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        g_scaled = aten.mul.Tensor(g, upcast(weight)) if weight is not None else g
        grad_input = cast(_input_grad(g_scaled, x_hat, r, inner_dims, n), input.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = cast(_sum_to(aten.mul.Tensor(g, x_hat), outer_dims), weight.dtype)
    if output_mask[2] and bias is not None:
        grad_bias = cast(_sum_to(g, outer_dims), bias.dtype)
    return grad_input, grad_weight, grad_bias


def _sum_to(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return aten.sum.dim_IntList(x, dims, False) if dims else aten.clone.default(x)


@register_decomposition(aten.native_group_norm_backward.default)
def native_group_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    N: int,
    C: int,
    HxW: int,
    group: int,
    output_mask: Sequence[bool],
) -> Grads:
    """(grad_input, grad_weight, grad_bias) of group norm."""
    per_group = (C // group) * HxW
    g = reshape(upcast(grad_out), [N, C, HxW])
    x = reshape(upcast(input), [N, C, HxW])
    mean_c = reshape(aten.expand.default(aten.view.default(upcast(mean), [N, group, 1]), [N, group, C // group]), [N, C, 1])
    rstd_c = reshape(aten.expand.default(aten.view.default(upcast(rstd), [N, group, 1]), [N, group, C // group]), [N, C, 1])
    x_hat = aten.mul.Tensor(aten.sub.Tensor(x, mean_c), rstd_c)
    grad_input = grad_weight = grad_bias = None
    # The meta kernel (so every traced graph) gives all three gradients in the promotion of
    # the input's and weight's dtypes; eager's CPU kernel rounds grad_input to the input's
    # dtype, so it is rounded there first and only then widened to the recorded dtype.
    dtype = input.dtype if weight is None else torch.promote_types(input.dtype, weight.dtype)
    if output_mask[0]:
        g_scaled = aten.mul.Tensor(g, aten.view.default(upcast(weight), [1, C, 1])) if weight is not None else g
        grouped = _input_grad(
            reshape(g_scaled, [N, group, per_group]),
            reshape(x_hat, [N, group, per_group]),
            aten.view.default(upcast(rstd), [N, group, 1]),
            [2],
            per_group,
        )
        grad_input = cast(cast(reshape(grouped, list(input.shape)), input.dtype), dtype)
    if output_mask[1]:
        grad_weight = cast(aten.sum.dim_IntList(aten.mul.Tensor(g, x_hat), [0, 2], False), dtype)
    if output_mask[2]:
        grad_bias = cast(aten.sum.dim_IntList(g, [0, 2], False), dtype)
    return grad_input, grad_weight, grad_bias


def _batch_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> Grads:
    shape = [1, input.shape[1]] + [1] * (input.dim() - 2)
    dims = [0, *range(2, input.dim())]
    g, x = upcast(grad_out), upcast(input)
    if train:
        if save_mean is None or save_invstd is None:
            raise RuntimeError("batch norm backward in training mode needs the saved mean and invstd")
        mean, invstd = upcast(save_mean), upcast(save_invstd)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch norm backward in eval mode needs running_mean and running_var")
        mean = upcast(running_mean)
        invstd = aten.rsqrt.default(aten.add.Tensor(upcast(running_var), eps))
    mean, invstd = aten.view.default(mean, shape), aten.view.default(invstd, shape)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(x, mean), invstd)
    w = aten.view.default(upcast(weight), shape) if weight is not None else None
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        g_scaled = aten.mul.Tensor(g, w) if w is not None else g
        if train:
            n = input.numel() // input.shape[1]
            grad_input = _input_grad(g_scaled, x_hat, invstd, dims, n)
        else:
            grad_input = aten.mul.Tensor(g_scaled, invstd)
        grad_input = cast(grad_input, input.dtype)
    param_dtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        grad_weight = cast(aten.sum.dim_IntList(aten.mul.Tensor(g, x_hat), dims, False), param_dtype)
    if output_mask[2]:
        grad_bias = cast(aten.sum.dim_IntList(g, dims, False), param_dtype)
    return grad_input, grad_weight, grad_bias


@register_decomposition(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> Grads:
    """(grad_input, grad_weight, grad_bias) of batch norm, training or eval."""
    return _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)


@register_decomposition(aten.batch_norm_backward.default)
def batch_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_var: torch.Tensor | None,
    update: bool,
    eps: float,
    output_mask: Sequence[bool],
    reserve: torch.Tensor,
) -> Grads:
    """The newer batch_norm_backward: ``update`` means training statistics; save_var holds invstd."""
    return _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask)


@register_decomposition(aten.cudnn_batch_norm_backward.default)
def cudnn_batch_norm_backward(  # parameter names follow the op's schema
    input: torch.Tensor,
    grad_output: torch.Tensor,
    weight: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_var: torch.Tensor | None,
    epsilon: float,
    reserveSpace: torch.Tensor,  # noqa: N803
) -> Grads:
    """cuDNN's batch norm backward (autograd uses it only for training-mode batch norm, with the
    batch mean and invstd saved): all three gradients, so they fuse into the neighbouring kernels
    instead of a cuDNN call that converts layouts around itself."""
    return _batch_norm_backward(
        grad_output, input, weight, running_mean, running_var, save_mean, save_var, True, epsilon, (True, True, True)
    )
