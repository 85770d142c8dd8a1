# torch.ops overloads are untyped, so every aten call returns Any.
"""Loss functions and their backward ops (nll, mse, smooth_l1/huber, binary cross entropy)."""

from __future__ import annotations

import torch

from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten

# torch.nn._reduction: 0 = none, 1 = mean, 2 = sum.
NONE, MEAN, SUM = 0, 1, 2


def _reduce(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == MEAN:
        return aten.div.Tensor(aten.sum.dim_IntList(loss, None, False), loss.numel())
    if reduction == SUM:
        return aten.sum.dim_IntList(loss, None, False)
    return loss


def _grad_scale(grad_output: torch.Tensor, like: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == MEAN:
        return aten.div.Tensor(grad_output, like.numel())
    return grad_output


def _class_dim(self: torch.Tensor) -> int:
    return 0 if self.dim() == 1 else 1


def _safe_target(target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(target != ignore_index, the target with ignored items pointing at class 0)."""
    valid = aten.ne.Scalar(target, ignore_index)
    return valid, aten.where.self(valid, target, aten.scalar_tensor.default(0, dtype=target.dtype, device=target.device))


def _class_weights(weight: torch.Tensor, valid: torch.Tensor, safe: torch.Tensor) -> torch.Tensor:
    """weight[target] per item, 0 for ignored items."""
    w = aten.index_select.default(weight, 0, aten.view.default(safe, [-1])) if safe.dim() <= 1 else aten.index.Tensor(weight, [safe])
    w = aten.view.default(w, list(safe.shape)) if safe.dim() <= 1 else w
    return aten.mul.Tensor(w, valid)


def _picked(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(-self[target] * w, w) per item, w = weight[target] masked by ignore_index."""
    dim = _class_dim(self)
    valid, safe = _safe_target(target, ignore_index)
    gathered = aten.squeeze.dims(aten.gather.default(self, dim, aten.unsqueeze.default(safe, dim)), [dim])
    w = _class_weights(weight, valid, safe) if weight is not None else cast(valid, self.dtype)
    return aten.mul.Tensor(aten.neg.default(gathered), w), w


def _nll_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    loss, w = _picked(upcast(self), target, upcast(weight) if weight is not None else None, ignore_index)
    total_weight = aten.sum.dim_IntList(w, None, False)
    if reduction == NONE:
        # Eager reports the weight of a single (1-D) input even unreduced, 0 for batches.
        if self.dim() > 1:
            total_weight = aten.full.default([], 0, dtype=self.dtype, device=self.device)
        return cast(loss, self.dtype), cast(total_weight, self.dtype)
    total = aten.sum.dim_IntList(loss, None, False)
    if reduction == MEAN:
        total = aten.div.Tensor(total, total_weight)
    return cast(total, self.dtype), cast(total_weight, self.dtype)


@register_decomposition(aten.nll_loss_forward.default)
def nll_loss_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, total_weight) of negative log likelihood over log-probabilities ``self``."""
    return _nll_forward(self, target, weight, reduction, ignore_index)


@register_decomposition(aten.nll_loss2d_forward.default)
def nll_loss2d_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """nll_loss_forward for (N, C, H, W) inputs."""
    return _nll_forward(self, target, weight, reduction, ignore_index)


def _nll_backward(
    grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int, total_weight: torch.Tensor
) -> torch.Tensor:
    dim = _class_dim(self)
    values = aten.neg.default(upcast(grad_output))
    if reduction == MEAN:
        values = aten.div.Tensor(values, upcast(total_weight))
    if weight is not None:
        values = aten.mul.Tensor(_class_weights(upcast(weight), *_safe_target(target, ignore_index)), values)
    # Each item's target class gets its value and every other class 0: a comparison with the
    # class index, which fuses into whatever reads the gradient (log_softmax's backward). A
    # scatter into zeros wrote the whole (N, C) tensor twice more (the zeros, then its copy).
    # It stays a few ops per element, so the fused kernels recompute it rather than store it.
    classes = aten.arange.start_step(0, self.shape[dim], 1, dtype=target.dtype, device=self.device)
    shape = [1] * self.dim()
    shape[dim] = self.shape[dim]
    hit = aten.eq.Tensor(aten.view.default(classes, shape), aten.unsqueeze.default(target, dim))
    if ignore_index >= 0:
        # An ignored index that is a class would be hit; a negative one (-100 by default) never is.
        hit = aten.logical_and.default(hit, aten.unsqueeze.default(aten.ne.Scalar(target, ignore_index), dim))
    if values.dim() > 0:
        values = aten.unsqueeze.default(values, dim)
    zero = aten.scalar_tensor.default(0, dtype=values.dtype, device=self.device)
    return cast(aten.where.self(hit, values, zero), self.dtype)


@register_decomposition(aten.nll_loss_backward.default)
def nll_loss_backward(
    grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int, total_weight: torch.Tensor
) -> torch.Tensor:
    """-w * grad at each item's target class, 0 elsewhere (divided by total_weight for mean)."""
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)


@register_decomposition(aten.nll_loss2d_backward.default)
def nll_loss2d_backward(
    grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int, ignore_index: int, total_weight: torch.Tensor
) -> torch.Tensor:
    """nll_loss_backward for (N, C, H, W) inputs."""
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)


@register_decomposition(aten.mse_loss.default)
def mse_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN) -> torch.Tensor:
    """(x - t)**2, reduced."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    return cast(_reduce(aten.mul.Tensor(diff, diff), reduction), self.dtype)


@register_decomposition(aten.mse_loss_backward.default)
def mse_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int) -> torch.Tensor:
    """2 * (x - t) * grad (/ numel for mean)."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    g = _grad_scale(upcast(grad_output), self, reduction)
    return cast(aten.mul.Tensor(aten.mul.Tensor(diff, 2), g), self.dtype)


def _huber(diff: torch.Tensor, delta: float, divide: bool) -> torch.Tensor:
    magnitude = aten.abs.default(diff)
    quadratic = aten.mul.Tensor(aten.mul.Tensor(diff, diff), 0.5)
    if divide:
        quadratic = aten.div.Tensor(quadratic, delta)
        linear = aten.sub.Tensor(magnitude, 0.5 * delta)
    else:
        linear = aten.mul.Tensor(aten.sub.Tensor(magnitude, 0.5 * delta), delta)
    return aten.where.self(aten.lt.Scalar(magnitude, delta), quadratic, linear)


@register_decomposition(aten.smooth_l1_loss.default)
def smooth_l1_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, beta: float = 1.0) -> torch.Tensor:
    """0.5 * d**2 / beta below beta, |d| - 0.5 * beta above; plain L1 when beta is 0."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    loss = aten.abs.default(diff) if beta == 0 else _huber(diff, beta, divide=True)
    return cast(_reduce(loss, reduction), self.dtype)


@register_decomposition(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int, beta: float) -> torch.Tensor:
    """d / beta below beta, sign(d) above, times grad."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    g = _grad_scale(upcast(grad_output), self, reduction)
    sign = aten.sign.default(diff)
    if beta == 0:
        return cast(aten.mul.Tensor(sign, g), self.dtype)
    local = aten.where.self(aten.lt.Scalar(aten.abs.default(diff), beta), aten.div.Tensor(diff, beta), sign)
    return cast(aten.mul.Tensor(local, g), self.dtype)


@register_decomposition(aten.huber_loss.default)
def huber_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = MEAN, delta: float = 1.0) -> torch.Tensor:
    """0.5 * d**2 below delta, delta * (|d| - 0.5 * delta) above."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    return cast(_reduce(_huber(diff, delta, divide=False), reduction), self.dtype)


@register_decomposition(aten.huber_loss_backward.default)
def huber_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int, delta: float) -> torch.Tensor:
    """d below delta, delta * sign(d) above, times grad."""
    diff = aten.sub.Tensor(upcast(self), upcast(target))
    g = _grad_scale(upcast(grad_output), self, reduction)
    outer = aten.mul.Tensor(aten.sign.default(diff), delta)
    local = aten.where.self(aten.le.Scalar(aten.abs.default(diff), delta), diff, outer)
    return cast(aten.mul.Tensor(local, g), self.dtype)


@register_decomposition(aten.binary_cross_entropy.default)
def binary_cross_entropy(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, reduction: int = MEAN) -> torch.Tensor:
    """-(t * log(x) + (1 - t) * log(1 - x)), each log clamped at -100 as eager."""
    x, t = upcast(self), upcast(target)
    log_x = aten.clamp.default(aten.log.default(x), -100, None)
    log_1mx = aten.clamp.default(aten.log1p.default(aten.neg.default(x)), -100, None)
    loss = aten.neg.default(aten.add.Tensor(aten.mul.Tensor(t, log_x), aten.mul.Tensor(aten.rsub.Scalar(t, 1), log_1mx)))
    if weight is not None:
        loss = aten.mul.Tensor(loss, upcast(weight))
    return cast(_reduce(loss, reduction), self.dtype)


@register_decomposition(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(
    grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, reduction: int = MEAN
) -> torch.Tensor:
    """grad * (x - t) / max(x * (1 - x), 1e-12)."""
    x, t = upcast(self), upcast(target)
    denominator = aten.clamp.default(aten.mul.Tensor(x, aten.rsub.Scalar(x, 1)), 1e-12, None)
    local = aten.div.Tensor(aten.sub.Tensor(x, t), denominator)
    if weight is not None:
        local = aten.mul.Tensor(local, upcast(weight))
    g = _grad_scale(upcast(grad_output), self, reduction)
    return cast(aten.mul.Tensor(local, g), self.dtype)


@register_decomposition(aten.binary_cross_entropy_with_logits.default)
def binary_cross_entropy_with_logits(
    self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, pos_weight: torch.Tensor | None = None, reduction: int = MEAN
) -> torch.Tensor:
    """w * (pw * t * softplus(-x) + (1 - t) * (x + softplus(-x))), softplus(-x) computed stably."""
    x, t = upcast(self), upcast(target)
    softplus_neg = aten.add.Tensor(aten.log1p.default(aten.exp.default(aten.neg.default(aten.abs.default(x)))), aten.clamp.default(aten.neg.default(x), 0, None))
    one_minus_t = aten.rsub.Scalar(t, 1)
    if pos_weight is not None:
        positive = aten.mul.Tensor(aten.mul.Tensor(upcast(pos_weight), t), softplus_neg)
    else:
        positive = aten.mul.Tensor(t, softplus_neg)
    loss = aten.add.Tensor(positive, aten.mul.Tensor(one_minus_t, aten.add.Tensor(x, softplus_neg)))
    if weight is not None:
        loss = aten.mul.Tensor(loss, upcast(weight))
    return cast(_reduce(loss, reduction), self.dtype)


