"""torch.autograd.Function.apply: forward inlined where no gradient flows; a graph break (run
eagerly, with the user's backward) where one does. Never a wrong gradient."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.errors import GraphBreakError
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


class _TanhGelu(torch.autograd.Function):
    # As transformers' Bloom GeLUFunction: the saved input read back in backward.
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        ctx.mark_non_differentiable()
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))) * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3.0 * ctx.scale, None  # deliberately not the forward's derivative


class _SortWithIndex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, index = x.sort(dim=-1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(index)
        flags = ctx.needs_input_grad
        return values + float(flags[0]), index

    @staticmethod
    def backward(ctx, grad_values, grad_index):
        (index,) = ctx.saved_tensors
        return torch.zeros_like(grad_values).scatter(-1, index, grad_values)


class _ScaledWithSetup(torch.autograd.Function):
    # The forward-without-ctx style: setup_context sees the inputs (defaults bound) and output.
    @staticmethod
    def forward(x, factor=2.0):
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


_WEIGHT = torch.nn.Parameter(torch.randn(4))


class _UsesParameter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        # Forward runs with grad mode off: its result never requires grad through _WEIGHT.
        return x * _WEIGHT

    @staticmethod
    def backward(ctx, grad):
        return grad


def _inference(x):
    y = _TanhGelu.apply(x, 2.0)
    values, index = _SortWithIndex.apply(y)
    return (values.sum(-1) + index[..., 0] + _ScaledWithSetup.apply(x).mean())[:, None] + _UsesParameter.apply(x)


def test_function_apply_without_gradients_is_one_graph_equal_to_eager():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_inference)
    with torch.no_grad():
        compare_with_eager(compiled, _inference, torch.randn(3, 4))
    # Grad mode on, but nothing passed to apply requires grad (the parameter is read inside).
    out = compare_with_eager(compiled, _inference, torch.randn(3, 4))
    assert not out.requires_grad
    assert backend.count == 2  # one graph per grad mode


def _training(x, w):
    h = x * w
    return _TanhGelu.apply(h, 2.0).sum(-1) + h.mean()


def test_function_apply_with_gradients_breaks_and_keeps_the_users_backward():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_training)
    # The custom backward (3 * scale) is not autograd of the forward; eager's gradient is.
    compare_with_eager(compiled, _training, torch.randn(3, 4), torch.randn(4, requires_grad=True), grads=True)
    explained = ptc_capture.explain(_training)(torch.randn(3, 4), torch.randn(4, requires_grad=True))
    (record,) = explained.break_reasons
    assert "_TanhGelu.apply on tensors that require grad" in record.reason
    assert "test_autograd_function.py" in str(record.stack[-1]) and "_training" in str(record.stack[-1])
    with pytest.raises(GraphBreakError, match="custom backward"):
        ptc_capture.optimize(CountingBackend(), fullgraph=True)(_training)(torch.randn(3, 4), torch.randn(4, requires_grad=True))


class _Passthrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        y.add_(1)
        ctx.mark_dirty(y)
        return x, y

    @staticmethod
    def backward(ctx, gx, gy):
        return gx, gy


def _passthrough(x, y):
    a, b = _Passthrough.apply(x, y)
    return a is x, b is y, a + b


def test_function_apply_returns_a_new_view_of_an_input_forward_hands_back_as_eager_does():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_passthrough)
    compare_with_eager(compiled, _passthrough, torch.randn(3), torch.randn(3))
    assert backend.count == 1
