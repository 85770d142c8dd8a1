"""Memory planning: buffers are freed after last use and their storage reused."""

from __future__ import annotations

import torch
from conftest import check

aten = torch.ops.aten


def test_peak_intermediate_bytes_of_a_long_chain_stays_bounded() -> None:
    n, layers = 64, 12

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(layers):
            h = aten.tanh.default(aten.mm.default(h, w))
        return h

    g = torch.Generator().manual_seed(0)
    compiled = check(fn, torch.randn(n, n, generator=g), torch.randn(n, n, generator=g) / 8)
    one = n * n * 4
    plan = compiled.memory_plan
    # Each step needs its input, the extern result and the activation: never more than three.
    assert plan.peak_bytes <= 3 * one
    assert plan.reused > 0


def test_reuse_can_be_switched_off() -> None:
    from conftest import trace_core

    import ptc_inductor

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(4):
            h = aten.tanh.default(aten.mm.default(h, w))
        return h

    gm = trace_core(fn, torch.randn(8, 8), torch.randn(8, 8))
    plan = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env(reuse_buffers=False)).memory_plan
    assert plan.reused == 0
