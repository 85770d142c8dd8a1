"""Every core/1 op has a lowering or an extern mapping; anything else fails clearly."""

from __future__ import annotations

import pytest
import torch

import ptc_inductor
import ptc_spec
from ptc_inductor.lowering import EXTERN_OPS, LOWERINGS
from ptc_spec import GraphBuilder, TensorMeta

aten = torch.ops.aten


def test_every_core1_op_has_a_lowering_or_an_extern_mapping() -> None:
    missing = [str(op) for op in ptc_spec.opset("core/1").ops if op not in LOWERINGS and op not in EXTERN_OPS]
    assert missing == []
    report = ptc_inductor.coverage()
    assert not report.missing and len(report.lowered) + len(report.extern) == len(ptc_spec.opset("core/1").ops)


def test_op_outside_core1_names_the_op_and_points_to_decomp() -> None:
    b = GraphBuilder("aten")
    x = b.input("x", TensorMeta.of((4,)))
    b.output(b.call(aten.gelu.default, x))
    gm = b.build()
    ptc_spec.set_dialect(gm, "core/1")
    with pytest.raises(ptc_inductor.UnsupportedOpError, match=r"aten\.gelu\.default.*ptc_decomp\.decompose"):
        ptc_inductor.compile(gm)


def test_graph_in_another_dialect_is_refused_in_one_sentence() -> None:
    b = GraphBuilder("aten")
    x = b.input("x", TensorMeta.of((4,)))
    b.output(b.call(aten.gelu.default, x))
    with pytest.raises(ptc_spec.UnsupportedDialectError, match="ptc-inductor"):
        ptc_inductor.compile(b.build())


def test_sizes_over_symbols_the_graph_does_not_define_are_refused_clearly() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((3, 4)))
    b.output(b.call(aten.exp.default, x))
    gm = b.build()
    # A symbolic size with no shape env on the graph (gm.meta["ptc_shape_env"]) says nothing
    # about where the symbol comes from or which values it takes.
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    placeholder.meta[ptc_spec.META_KEY] = TensorMeta.of((ptc_spec.size_symbol("n"), 4))
    with pytest.raises(ptc_inductor.LoweringError, match="sizes over n, which the graph's shape env"):
        ptc_inductor.compile(gm)
