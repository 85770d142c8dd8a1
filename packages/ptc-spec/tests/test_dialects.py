"""Dialect checks: one error naming every offending node."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import ptc_spec
from ptc_spec import DialectError, TensorMeta, UnsupportedDialectError, check

aten = torch.ops.aten


def _graph(*targets: object) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    for t in targets:
        x = g.call_function(t, (x,))
    g.output(x)
    return torch.fx.GraphModule({}, g)


def test_core_check_lists_every_offender_with_counts() -> None:
    gm = _graph(aten.gelu.default, aten.exp.default, aten.gelu.default, aten.var_mean.correction)
    with pytest.raises(DialectError) as info:
        check(gm, "core/1")
    assert str(info.value) == (
        "3 nodes are not in core/1: aten.gelu.default (x2), aten.var_mean.correction — run ptc_decomp.decompose first"
    )


def test_single_offender_message_is_singular() -> None:
    with pytest.raises(DialectError, match=r"^1 node is not in core/1: aten.relu.default — "):
        check(_graph(aten.relu.default), "core/1")


def test_core_graph_passes() -> None:
    check(_graph(aten.exp.default, aten.neg.default), "core/1")


def test_aten_dialect_refuses_torch_level_calls() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.relu, (x,))
    z = g.call_method("add", (y, 1))
    g.output(z)
    with pytest.raises(DialectError, match=r"2 nodes are not in the aten dialect: torch.relu, method add — trace"):
        check(torch.fx.GraphModule({}, g), "aten")


def test_torch_dialect_accepts_symbolic_trace_of_functional_code() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x).sum(dim=-1) + torch.sin(x).mean()

    gm = torch.fx.symbolic_trace(fn)
    check(gm, "torch")


def test_torch_dialect_refuses_modules_and_unknown_functions() -> None:
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(DialectError, match=r"1 node is not in the torch dialect: module 0"):
        check(gm, "torch")
    with pytest.raises(DialectError, match="builtins.print"):
        check(_graph(print), "torch")


def test_unknown_dialect_names_the_known_ones() -> None:
    with pytest.raises(UnsupportedDialectError, match=r"unknown dialect 'tosa': expected one of torch, aten, core/1"):
        check(_graph(), "tosa")


def test_require_dialect_explains_version_mismatch() -> None:
    gm = ptc_spec.trace(torch.exp, TensorMeta.of((2,)))
    assert ptc_spec.require_dialect(gm, ["aten", "core/1"], "ptc-decomp") == "aten"
    with pytest.raises(UnsupportedDialectError, match=r"ptc-inductor supports core/1, but the graph is in aten; upgrade ptc-inductor or produce core/1"):
        ptc_spec.require_dialect(gm, ["core/1"], "ptc-inductor")
    bare = _graph()
    with pytest.raises(UnsupportedDialectError, match="records no dialect"):
        ptc_spec.require_dialect(bare, ["core/1"], "ptc-inductor")


def test_getitem_and_size_arithmetic_are_allowed_in_core() -> None:
    gm = ptc_spec.trace(lambda a: a.max(dim=0), TensorMeta.of((3, 2)))
    check(gm, "aten")
    offenders = ptc_spec.offending_nodes(gm, "core/1")
    assert [n.target for n in offenders] == [aten.max.dim]
