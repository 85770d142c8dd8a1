"""Class statements in traced code: the body is traced, the class made at trace time stays in the graph."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.errors import GraphBreakError
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _helper_class(x, k):
    scale = k * 2

    class Acc:
        base = 3
        names: list[str] = ["a", "b"]

        def __init__(self, t):
            self.t = t

        def add(self, u):
            return self.t + u * scale + self.base + len(self.names)

        @staticmethod
        def twice(u):
            return u * 2

        @classmethod
        def make(cls, t):
            return cls(t)

        @property
        def neg(self):
            return -self.t

    acc = Acc.make(x)
    return acc.add(x) + Acc.twice(x) + acc.neg


def _zero_arg_super(x):
    class Base:
        def f(self, t):
            return t + 1

    class Child(Base):
        def f(self, t):
            return super().f(t) * 2

    return Child().f(x)


def _method_closes_over_tensor(x):
    y = x.exp()

    class Shift:
        def __call__(self, t):
            return t + y

    return Shift()(x)


def _unused_autograd_function(x):
    # torch.masked's _combine_input_and_mask defines this on every call and uses it only for
    # MaskedTensor inputs.
    class Combine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    return Combine.apply(x) if isinstance(x, list) else x.sin()


def _cell_written_after_class(x):
    factor = 1

    class Scale:
        def apply(self, t):
            return t * factor

    factor = 5
    return Scale().apply(x)


@pytest.mark.parametrize(
    "fn",
    [_zero_arg_super, _method_closes_over_tensor, _unused_autograd_function, _cell_written_after_class],
    ids=["super", "closes_over_tensor", "unused_autograd_function", "cell_written_after"],
)
def test_class_defined_in_traced_function_matches_eager(fn):
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(fn), fn, torch.randn(3, 4))
    assert backend.count == 1


def test_class_closure_constants_are_guarded():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_helper_class)
    x = torch.randn(3)
    for k in (2, 2, 3):
        compare_with_eager(compiled, _helper_class, x, k)
    assert backend.count == 2  # k=3 fails the guard on k and recompiles


def test_masked_reduction_defines_its_autograd_function_in_the_graph():
    backend = CountingBackend()
    fn = torch.masked.sum
    x, mask = torch.randn(4, 5), torch.rand(4, 5) > 0.5

    def masked_sum(t, m):
        return fn(t, 1, mask=m)

    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(masked_sum), masked_sum, x, mask)
    assert backend.count == 1


def _returns_class(x):
    class Local:
        pass

    return Local, x + 1


def _returns_instance(x):
    class Box:
        def __init__(self, t):
            self.t = t

    return Box(x + 1)


@pytest.mark.parametrize("fn", [_returns_class, _returns_instance], ids=["class", "instance"])
def test_class_made_while_tracing_cannot_leave_the_graph(fn):
    with pytest.raises(GraphBreakError, match="created while tracing and cannot leave the graph"):
        ptc_capture.optimize(CountingBackend(), fullgraph=True)(fn)(torch.randn(2))
    # Without fullgraph the frame runs eagerly: a new class on every call, as in eager.
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    first, second = compiled(torch.randn(2)), compiled(torch.randn(2))
    first_class = first[0] if isinstance(first, tuple) else type(first)
    second_class = second[0] if isinstance(second, tuple) else type(second)
    assert first_class is not second_class


class _Registering(type):
    created: list[str] = []

    def __init__(cls, name, bases, namespace):
        _Registering.created.append(name)
        super().__init__(name, bases, namespace)


def _custom_metaclass(x):
    class Registered(metaclass=_Registering):
        pass

    return x + len(_Registering.created)


def test_metaclass_with_effects_is_a_graph_break():
    with pytest.raises(GraphBreakError, match="metaclass _Registering"):
        ptc_capture.optimize(CountingBackend(), fullgraph=True)(_custom_metaclass)(torch.randn(2))


def _break_in_class_body(x):
    class Noisy:
        print("class body runs")
        k = 2

    return x * Noisy.k


def test_graph_break_in_class_body_runs_the_class_statement_eagerly(capsys):
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend)(_break_in_class_body), _break_in_class_body, torch.randn(3))
    assert capsys.readouterr().out == "class body runs\n" * 2
