"""The runtime wrapper: autograd behaviour of compiled programs matches eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from aot_models import MODELS, make_inputs

import ptc_aot
from ptc_aot import aot
from ptc_aot.api import SAVED_INPUTS_KEY
from ptc_spec.testing import compare_with_eager


def test_backward_twice_with_retain_graph_matches_eager() -> None:
    fn = MODELS["mlp"][0]
    compiled = aot(fn, make_inputs("mlp"))
    eager_args, compiled_args = make_inputs("mlp", 4), make_inputs("mlp", 4)
    eager_out, compiled_out = fn(*eager_args).sum(), compiled(*compiled_args).sum()
    for _ in range(2):
        eager_out.backward(retain_graph=True)
        compiled_out.backward(retain_graph=True)
    for e, c in zip(eager_args[1:], compiled_args[1:]):
        torch.testing.assert_close(c.grad, e.grad)


def test_double_backward_raises_a_clear_error() -> None:
    fn = MODELS["mlp"][0]
    args = make_inputs("mlp")
    compiled = aot(fn, args)
    (grad,) = torch.autograd.grad(compiled(*args).pow(2).sum(), [args[1]], create_graph=True)
    with pytest.raises(ptc_aot.DoubleBackwardError, match="double backward"):
        grad.sum().backward()


def test_first_order_grad_with_create_graph_matches_eager() -> None:
    fn = MODELS["mlp"][0]
    args = make_inputs("mlp")
    (expected,) = torch.autograd.grad(fn(*args).pow(2).sum(), [args[1]])
    (got,) = torch.autograd.grad(aot(fn, args)(*args).pow(2).sum(), [args[1]], create_graph=True)
    torch.testing.assert_close(got, expected)


def test_inputs_that_do_not_require_grad_get_none_and_unused_inputs_get_no_grad() -> None:
    def fn(x: torch.Tensor, unused: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sum(0)

    args = [torch.randn(3, 4), torch.randn(2, requires_grad=True), torch.randn(4, requires_grad=True)]
    compiled = aot(fn, args)
    compare_with_eager(compiled, fn, *args, grads=True)
    x, unused, w = (a.detach().clone().requires_grad_(a.requires_grad) for a in args)
    compiled(x, unused, w).sum().backward()
    assert unused.grad is None and w.grad is not None


def test_inputs_reaching_only_outputs_nobody_differentiates_get_no_grad() -> None:
    # BERT's shape: a pooler computed from the hidden states, a loss on the hidden states only.
    def fn(x: torch.Tensor, w: torch.Tensor, pool_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.tanh(x @ w)
        return hidden, hidden[:, 0] * pool_w

    args = [torch.randn(3, 4), torch.randn(4, 4, requires_grad=True), torch.randn(3, requires_grad=True)]
    compiled = aot(fn, args)
    eager = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    ours = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    fn(*eager)[0].pow(2).sum().backward()
    compiled(*ours)[0].pow(2).sum().backward()
    assert eager[2].grad is None and ours[2].grad is None
    torch.testing.assert_close(ours[1].grad, eager[1].grad)
    # Differentiating both outputs still gives both gradients.
    for a in (*eager, *ours):
        a.grad = None
    sum(o.sum() for o in fn(*eager)).backward()
    sum(o.sum() for o in compiled(*ours)).backward()
    for e, o in zip(eager[1:], ours[1:]):
        torch.testing.assert_close(o.grad, e.grad)


def test_non_differentiable_and_integer_outputs_match_eager() -> None:
    def fn(x: torch.Tensor, idx: torch.Tensor) -> tuple[Any, ...]:
        y = x * 2
        return y.argmax(-1), y, idx + 1, y > 0, 3

    args = [torch.randn(4, 3, requires_grad=True), torch.arange(4)]
    out = compare_with_eager(aot(fn, args), fn, *args, grads=True)
    assert out[4] == 3 and not out[0].requires_grad and not out[3].requires_grad and out[1].requires_grad


def test_inference_under_no_grad_uses_a_forward_only_graph() -> None:
    fn = MODELS["mlp"][0]
    compiled = aot(fn, make_inputs("mlp"))
    with torch.no_grad():
        out = compare_with_eager(compiled, fn, *make_inputs("mlp", 3))
    assert not out.requires_grad
    inference = [p for p in compiled.programs if p.backward is None]
    assert len(inference) == 1 and len(compiled.programs) == 2


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_programs_run_as_traced_inside_the_callers_autocast_region(grad: bool) -> None:
    # Traced outside autocast, the graph's matmul is float32; a caller's region must not cast
    # it again, in the forward or in a backward run inside the region.
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).sin()

    args = [torch.randn(4, 8, requires_grad=grad), torch.randn(8, 3, requires_grad=grad)]
    compiled = aot(fn, args)
    x, w = (a.detach().clone().requires_grad_(grad) for a in args)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(x, w)
        if grad:
            out.sum().backward()
    expected = fn(*args)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    if grad:
        expected.sum().backward()
        for got, want in zip((x, w), args):
            assert got.grad is not None and got.grad.dtype == torch.float32
            torch.testing.assert_close(got.grad, want.grad)


class _Boxed:
    """A compiled backward offering call_boxed: it takes its argument list and records which
    saved tensors anyone but itself still holds once it has let go of them."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.alive_after_release: list[bool] = []

    def __call__(self, *args: Any) -> Any:
        return self.gm(*args)

    def call_boxed(self, args: list[Any]) -> Any:
        import weakref

        saved = self.gm.meta[SAVED_INPUTS_KEY]
        refs = [weakref.ref(t) for t in args[:saved]]
        taken = list(args)
        args.clear()
        out = self.gm(*taken)
        del taken
        self.alive_after_release = [r() is not None for r in refs]
        return out


def test_boxed_backward_gets_sole_ownership_of_saved_activations() -> None:
    # A saved intermediate (the matmul's product, which no partitioner recomputes) that only
    # the backward holds can be freed inside the backward as soon as it is used: neither
    # autograd's saved variables nor the runtime keep it.
    boxed: list[_Boxed] = []

    def bw(gm: torch.fx.GraphModule) -> _Boxed:
        boxed.append(_Boxed(gm))
        return boxed[-1]

    def fn(x: torch.Tensor, m: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return ((x @ m) * w).sum(0)

    x, m, w = torch.randn(3, 4), torch.randn(4, 4), torch.randn(4, requires_grad=True)
    compiled = aot(fn, [x, m, w], fw_compiler=lambda gm: gm, bw_compiler=bw)
    compiled(x, m, w).sum().backward()
    torch.testing.assert_close(w.grad, (x @ m).sum(0))
    (b,) = boxed
    assert b.alive_after_release and not any(b.alive_after_release), b.alive_after_release
