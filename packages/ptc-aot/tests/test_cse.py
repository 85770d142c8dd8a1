"""Common subexpressions: repeated pure calls merged, random and returned values left apart."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from ptc_aot import functionalize, trace_program
from ptc_aot.cse import eliminate_common_subexpressions
from ptc_spec import TensorMeta

aten = torch.ops.aten


def _graph(fn, *args) -> torch.fx.GraphModule:
    program = trace_program(fn, [TensorMeta.from_tensor(a) for a in args], joint=False)
    return functionalize(program.gm).gm


def _count(gm: torch.fx.GraphModule, target) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is target)


def _run(gm: torch.fx.GraphModule, *args):
    return gm(*args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mask_built_in_every_layer_is_built_once_and_values_match_eager(dtype: torch.dtype) -> None:
    # A transformer that builds its attention mask in each block (GPT-2 in transformers).
    def fn(x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            mask = torch.where(allowed, torch.scalar_tensor(0.0, dtype=x.dtype), torch.scalar_tensor(-1e4, dtype=x.dtype))
            x = torch.softmax(x + mask, -1)
        return x

    x, allowed = torch.randn(4, 4).to(dtype), torch.rand(4, 4) > 0.3
    gm = _graph(fn, x, allowed)
    before = _count(gm, aten.where.self)
    assert before == 3
    assert eliminate_common_subexpressions(gm) > 0
    assert _count(gm, aten.where.self) == 1
    torch.testing.assert_close(_run(gm, x, allowed)[0], fn(x, allowed))


def test_random_calls_are_never_merged() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.dropout(x, 0.5, True) * 1.0, torch.nn.functional.dropout(x, 0.5, True) * 1.0

    gm = _graph(fn, torch.ones(64))
    random_ops = [n for n in gm.graph.nodes if n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]
    eliminate_common_subexpressions(gm)
    after = [n for n in gm.graph.nodes if n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]
    assert len(after) == len(random_ops) >= 2
    first, second = _run(gm, torch.ones(4096))[:2]
    assert not torch.equal(first, second)


def test_returned_values_stay_distinct_tensors() -> None:
    # Eager returns two tensors for two clones (and a view of one of them): a caller may write
    # to one of them without changing the other.
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x.clone(), x.clone(), (x * 2).view(-1)

    x = torch.randn(2, 3)
    gm = _graph(fn, x)
    eliminate_common_subexpressions(gm)
    a, b, _ = _run(gm, x)[:3]
    assert a.data_ptr() != b.data_ptr()
    a.add_(1)
    torch.testing.assert_close(b, x)


def test_arguments_equal_only_as_numbers_are_not_merged() -> None:
    # 0.0 == -0.0 and 1 == 1.0 == True, with equal hashes: the calls still differ (the sign of
    # a zero shows in its reciprocal).
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.reciprocal(torch.mul(x, 0.0)), torch.reciprocal(torch.mul(x, -0.0))

    gm = _graph(fn, torch.randn(3))
    eliminate_common_subexpressions(gm)
    assert _count(gm, aten.mul.Tensor) == 2
    x = torch.tensor([-1.0, 2.0, -3.0])
    for got, want in zip(_run(gm, x)[:2], fn(x)):
        assert torch.equal(got, want)
