"""core/2: the op set grows by attention kernels, and marked fallback nodes call any functional aten op."""

from __future__ import annotations

import pytest
import torch

import ptc_spec
from ptc_spec import DialectError, GraphBuilder, TensorMeta, opset
from ptc_spec.testing import assert_same

aten = torch.ops.aten


def _det_graph(dialect: str = "core/2") -> torch.fx.GraphModule:
    b = GraphBuilder(dialect)
    x = b.input("x", TensorMeta.of((3, 4, 4)))
    y = b.fallback(aten.linalg_det.default, x)
    b.output(b.call(aten.mul.Tensor, y, 2.0))
    return b.build()


def test_core2_is_core1_plus_its_additions_and_allows_fallbacks() -> None:
    core1, core2 = opset("core/1"), opset("core/2")
    assert set(core1.entries) < set(core2.entries)
    added = set(core2.entries) - set(core1.entries)
    assert "aten._scaled_dot_product_cudnn_attention.default" in added
    assert all(core2.entries[name].since == 2 for name in added)
    assert core2.fallbacks and not core1.fallbacks
    assert ptc_spec.LATEST_CORE == "core/2"


def test_a_marked_fallback_node_is_in_core2_and_runs_the_eager_kernel() -> None:
    gm = _det_graph()
    ptc_spec.check(gm, "core/2")
    x = torch.randn(3, 4, 4)
    assert_same(gm(x), torch.linalg.det(x) * 2.0)
    (node,) = [n for n in gm.graph.nodes if n.target is aten.linalg_det.default]
    assert ptc_spec.is_fallback(node)


def test_core1_refuses_a_fallback_node_and_says_why() -> None:
    gm = _det_graph()
    with pytest.raises(DialectError, match=r"fallback aten.linalg_det.default \(fallbacks need core/2 or later\)"):
        ptc_spec.check(gm, "core/1")


def test_an_unmarked_op_outside_the_set_is_still_refused_in_core2() -> None:
    gm = _det_graph()
    for node in gm.graph.nodes:
        node.meta.pop(ptc_spec.FALLBACK_KEY, None)
    with pytest.raises(DialectError, match="aten.linalg_det.default"):
        ptc_spec.check(gm, "core/2")


def test_the_fallback_mark_survives_the_graph_file() -> None:
    gm = _det_graph()
    back = ptc_spec.loads(ptc_spec.dumps(gm))
    marked = [n.target for n in back.graph.nodes if ptc_spec.is_fallback(n)]
    assert marked == [aten.linalg_det.default]
    ptc_spec.check(back, "core/2")
    x = torch.randn(3, 4, 4)
    assert_same(back(x), gm(x))


def test_multi_output_fallbacks_mark_the_call_not_its_items() -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((5, 7)))
    values, indices = b.fallback(aten.kthvalue.default, x, 2, 1)
    b.output(values, indices)
    gm = b.build()
    ptc_spec.check(gm, "core/2")
    t = torch.randn(5, 7)
    assert_same(gm(t), tuple(torch.kthvalue(t, 2, 1)))
    assert [n.target for n in gm.graph.nodes if ptc_spec.is_fallback(n)] == [aten.kthvalue.default]


@pytest.mark.parametrize(
    ("op", "reason"),
    [(aten.add_.Tensor, "writes one of its inputs"), (torch.ops.ptc.rand.default, "only aten and custom")],
)
def test_ops_that_cannot_be_fallbacks_are_refused_with_the_reason(op: torch._ops.OpOverload, reason: str) -> None:
    assert reason in (ptc_spec.fallback_problem(op) or "")
    b = GraphBuilder("core/2")
    b.input("x", TensorMeta.of((2,)))
    with pytest.raises(DialectError, match=reason):
        b.fallback(op)


def test_core1_builders_have_no_fallbacks() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((2, 2)))
    with pytest.raises(DialectError, match="core/1 has no fallbacks"):
        b.fallback(aten.linalg_det.default, x)


def test_the_opset_doc_explains_fallbacks() -> None:
    from ptc_spec.docs import render_opset

    assert "**Fallbacks.**" in render_opset().split("## core/2", 1)[1]


@pytest.mark.parametrize("op", [aten._trilinear.default, aten.linalg_pinv.atol_rtol_tensor, aten.select_copy.int])
def test_ops_whose_only_kernel_is_a_non_functional_composite_can_be_fallbacks(op: torch._ops.OpOverload) -> None:
    # CompositeExplicitAutogradNonFunctional kernels are registered for every backend, meta included.
    assert ptc_spec.fallback_problem(op) is None


def test_a_bilinear_fallback_runs_the_eager_kernel() -> None:
    b = GraphBuilder("core/2")
    x1, x2, w = b.input("x1", TensorMeta.of((2, 3))), b.input("x2", TensorMeta.of((2, 4))), b.input("w", TensorMeta.of((5, 3, 4)))
    b.output(b.fallback(aten._trilinear.default, x1, w, x2, [1, 3], [0], [1, 2], [2, 3]))
    gm = b.build()
    ptc_spec.check(gm, "core/2")
    a, c, weight = torch.randn(2, 3), torch.randn(2, 4), torch.randn(5, 3, 4)
    assert_same(gm(a, c, weight), torch.nn.functional.bilinear(a, c, weight))


@torch.library.custom_op("ptc_spec_tests::halve", mutates_args=())
def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@_halve.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_a_custom_op_of_an_allowed_namespace_is_an_aten_node_and_a_fallback() -> None:
    op = torch.ops.ptc_spec_tests.halve.default
    assert ptc_spec.fallback_problem(op) is None
    with pytest.raises(DialectError, match="must be registered with allow_target"):
        GraphBuilder("aten").call(op, GraphBuilder("aten").input("x", TensorMeta.of((3,))))
    ptc_spec.allow_target(op, "ptc_spec_tests.halve.default")
    b = GraphBuilder("core/2")
    b.output(b.fallback(op, b.input("x", TensorMeta.of((3,)))))
    gm = ptc_spec.loads(ptc_spec.dumps(b.build()))
    ptc_spec.check(gm, "core/2")
    t = torch.randn(3)
    assert_same(gm(t), t / 2)
