"""Random ops become ptc.seed/ptc.rand/ptc.randn with the right distributions and dtypes."""

from __future__ import annotations

import torch

import ptc_spec
from ptc_decomp import decompose
from ptc_spec import TensorMeta

aten = torch.ops.aten
ptc = torch.ops.ptc


def test_dropout_graph_uses_explicit_seeds_and_keeps_the_right_fraction() -> None:
    gm = ptc_spec.trace(lambda x: aten.native_dropout.default(x, 0.3, True), TensorMeta.of((200, 100)))
    out = decompose(gm)
    targets = {n.target for n in out.graph.nodes if n.op == "call_function"}
    assert ptc.seed.default in targets and ptc.rand.default in targets
    assert aten.native_dropout.default not in targets
    x = torch.ones(200, 100)
    y, mask = out(x)
    assert mask.dtype == torch.bool and y.dtype == torch.float32
    kept = mask.float().mean().item()
    assert abs(kept - 0.7) < 0.02
    torch.testing.assert_close(y[mask], torch.full_like(y[mask], 1 / 0.7))
    assert (y[~mask] == 0).all()


def test_dropout_in_eval_is_identity() -> None:
    gm = ptc_spec.trace(lambda x: aten.native_dropout.default(x, 0.5, False), TensorMeta.of((4, 4)))
    x = torch.randn(4, 4)
    y, mask = decompose(gm)(x)
    torch.testing.assert_close(y, x)
    assert mask.all()


def test_rand_randn_and_bernoulli_have_eager_dtypes_and_moments() -> None:
    def draw(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.rand(50_000, dtype=torch.float64),
            torch.randn_like(x),
            torch.bernoulli(torch.full_like(x, 0.25)),
            torch.randint(3, 7, (50_000,)),
        )

    out = decompose(ptc_spec.trace(draw, TensorMeta.of((50_000,), torch.bfloat16)))
    uniform, normal, coin, ints = out(torch.zeros(50_000, dtype=torch.bfloat16))
    assert (uniform.dtype, normal.dtype, coin.dtype, ints.dtype) == (torch.float64, torch.bfloat16, torch.bfloat16, torch.int64)
    assert 0 <= uniform.min() and uniform.max() < 1 and abs(uniform.mean().item() - 0.5) < 0.01
    assert abs(normal.float().mean().item()) < 0.02 and abs(normal.float().std().item() - 1) < 0.02
    assert abs(coin.float().mean().item() - 0.25) < 0.01
    assert ints.min() == 3 and ints.max() == 6


def test_each_random_op_draws_its_own_seed() -> None:
    out = decompose(ptc_spec.trace(lambda x: (torch.rand_like(x), torch.rand_like(x)), TensorMeta.of((1000,))))
    a, b = out(torch.zeros(1000))
    assert not torch.equal(a, b)
    assert sum(1 for n in out.graph.nodes if n.target is ptc.seed.default) == 2
