"""GraphBuilder: hand-built graphs with metadata, refused ops outside the dialect."""

from __future__ import annotations

import pytest
import torch

import ptc_spec
from ptc_spec import META_KEY, DialectError, GraphBuilder, TensorMeta
from ptc_spec.testing import assert_same

aten = torch.ops.aten


def test_softmax_built_from_core_ops_runs_like_eager() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((4, 8)))
    m = b.call(aten.amax.default, x, [1], True)
    e = b.call(aten.exp.default, b.call(aten.sub.Tensor, x, m))
    s = b.call(aten.sum.dim_IntList, e, [1], True)
    b.output(b.call(aten.div.Tensor, e, s))
    gm = b.build()
    ptc_spec.check(gm, "core/1")
    assert ptc_spec.dialect_of(gm) == "core/1"
    t = torch.randn(4, 8)
    assert_same(gm(t), torch.softmax(t, dim=1))
    for node in gm.graph.nodes:
        if node.op != "output":
            assert node.meta[META_KEY].shape in ((4, 8), (4, 1))


def test_multi_output_ops_return_a_node_per_output() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((3, 5)))
    values, indices = b.call(aten.topk.default, x, 2)
    b.output(values, indices)
    gm = b.build()
    t = torch.randn(3, 5)
    assert_same(gm(t), tuple(torch.topk(t, 2)))
    assert indices.meta[META_KEY].dtype == torch.int64


def test_constants_and_kwargs() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((2, 3), torch.bfloat16))
    c = b.constant(torch.tensor([1.0, 2.0, 3.0]))
    y = b.call(aten._to_copy.default, x, dtype=torch.float32)
    b.output(b.call(aten.mul.Tensor, y, c))
    gm = b.build()
    t = torch.randn(2, 3).to(torch.bfloat16)
    assert_same(gm(t), t.float() * torch.tensor([1.0, 2.0, 3.0]))


def test_ops_outside_the_dialect_are_refused() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((2,)))
    with pytest.raises(DialectError, match="aten.gelu.default is not in core/1"):
        b.call(aten.gelu.default, x)
    with pytest.raises(DialectError, match="is not an ATen overload"):
        b.call(torch.relu, x)  # type: ignore[arg-type]


def test_aten_builder_accepts_any_aten_op() -> None:
    b = GraphBuilder("aten")
    x = b.input("x", TensorMeta.of((2, 3)))
    b.output(b.call(aten.gelu.default, x))
    gm = b.build()
    t = torch.randn(2, 3)
    assert_same(gm(t), torch.nn.functional.gelu(t))


def test_misuse_is_explained() -> None:
    with pytest.raises(DialectError, match="capture torch-dialect graphs"):
        GraphBuilder("torch")
    b = GraphBuilder()
    x = b.input("x", TensorMeta.of((2,)))
    with pytest.raises(ValueError, match="already used"):
        b.input("x", TensorMeta.of((2,)))
    with pytest.raises(ValueError, match="call output"):
        b.build()
    other = GraphBuilder().input("y", TensorMeta.of((2,)))
    with pytest.raises(ValueError, match="does not belong to this builder"):
        b.call(aten.exp.default, other)
    b.output(x)
    b.build()
    with pytest.raises(ValueError, match="already built"):
        b.call(aten.exp.default, x)


def test_a_builder_with_a_shape_env_builds_graphs_of_symbolic_sizes() -> None:
    env = ptc_spec.SymbolEnv()
    b = GraphBuilder("core/1", shape_env=env)
    x = b.input("x", ptc_spec.dynamic_meta(TensorMeta.of((4, 8)), [0], env))
    b.output(b.call(aten.sum.dim_IntList, b.call(aten.exp.default, x), [0]))
    gm = b.build()
    assert ptc_spec.shape_env_of(gm).guards == env.guards  # type: ignore[union-attr]
    for rows in (2, 9):
        t = torch.randn(rows, 8)
        assert_same(gm(t), t.exp().sum(0))
