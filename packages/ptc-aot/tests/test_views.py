"""View facts from schemas, and view chains."""

from __future__ import annotations

import torch

from ptc_aot.views import alias_roots, replay, view_source
from ptc_spec import TensorMeta, trace

aten = torch.ops.aten


def test_view_source_finds_the_viewed_argument() -> None:
    assert view_source(aten.view.default) == 0
    assert view_source(aten.split.Tensor) == 0
    assert view_source(aten.add.Tensor) is None
    assert view_source(aten.add_.Tensor) is None


def test_alias_roots_follow_views_and_in_place_results() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x.view(-1)[1:3]
        w = v.mul_(2)
        return w, x + 1

    gm = trace(fn, TensorMeta.of((2, 3)))
    roots = alias_roots(gm.graph)
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    mul = next(n for n in gm.graph.nodes if n.target is aten.mul_.Tensor)
    add = next(n for n in gm.graph.nodes if n.target is aten.add.Tensor)
    root, chain = roots[mul]
    assert root is x and [s.target for s in chain] == [aten.view.default, aten.slice.Tensor]
    assert roots[add] == (add, ())


def test_replayed_chain_equals_the_original_view() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.t()[1].unsqueeze(0)

    gm = trace(fn, TensorMeta.of((3, 4)))
    out = list(gm.graph.nodes)[-1].args[0]
    _, chain = alias_roots(gm.graph)[out]
    x = torch.randn(3, 4)
    view = replay(chain, x)
    assert torch.equal(view, fn(x)) and view._base is x
