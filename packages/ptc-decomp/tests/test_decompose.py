"""decompose() on real layers' aten graphs (fixtures), on hand-built graphs, and on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ptc_spec
from ptc_decomp import (
    FALLBACKS_KEY,
    KEPT_KEY,
    SOURCE_KEY,
    Config,
    DecompositionError,
    InPlaceOpError,
    NoDecompositionError,
    WrongDialectError,
    decompose,
    table,
)
from ptc_spec import META_KEY, GraphBuilder, TensorMeta
from ptc_spec.testing import assert_same

aten = torch.ops.aten
FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.ptcg"))


def example_inputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """Seeded inputs for a fixture graph (running variances made positive, as real ones are)."""
    values = []
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        value = node.meta[META_KEY].example(seed=i)
        if node.name.endswith("running_var"):
            value = value.abs() + 0.5
        values.append(value)
    return values


def test_fixtures_cover_every_model_family() -> None:
    names = {p.stem.rsplit("_", 1)[0] for p in FIXTURES}
    assert {"gpt2_sdpa", "gpt2_manual", "bert", "resnet", "vit", "convnext", "efficientnet"} <= names
    assert len(FIXTURES) == 14


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_decomposed_fixture_is_core_and_matches_the_original(path: Path) -> None:
    gm = ptc_spec.load(path)
    assert ptc_spec.offending_nodes(gm, "core/1"), "the fixture should need decomposing"
    out = decompose(gm)
    # Every op of these models decomposes: no fallbacks, so the result is core/1 as well.
    assert ptc_spec.dialect_of(out) == ptc_spec.LATEST_CORE and FALLBACKS_KEY not in out.meta
    ptc_spec.check(out, "core/1")
    before = [n.meta[META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    after = [n.meta[META_KEY] for n in out.graph.nodes if n.op == "placeholder"]
    assert before == after
    assert all(META_KEY in n.meta for n in out.graph.nodes if n.op != "output")
    inputs = example_inputs(gm)
    torch.manual_seed(0)
    expected = gm(*inputs)
    torch.manual_seed(0)
    actual = out(*inputs)
    assert_same(actual, expected)


def test_decomposed_graph_survives_serialization() -> None:
    gm = ptc_spec.load(next(p for p in FIXTURES if p.stem == "resnet_train"))
    out = decompose(gm)
    again = ptc_spec.loads(ptc_spec.dumps(out))
    ptc_spec.check(again, "core/1")
    inputs = example_inputs(gm)
    assert_same(again(*inputs), out(*inputs))


def _gelu_graph() -> torch.fx.GraphModule:
    return ptc_spec.trace(lambda x: F.gelu(x) * 2, TensorMeta.of((4, 8)))


def test_new_nodes_record_their_source_op_and_inherit_metadata() -> None:
    gm = _gelu_graph()
    gelu = next(n for n in gm.graph.nodes if n.target is aten.gelu.default)
    gelu.meta["stack_trace"] = "model.py:12"
    out = decompose(gm)
    made = [n for n in out.graph.nodes if n.meta.get(SOURCE_KEY) == "aten.gelu.default"]
    assert {n.target for n in made} >= {aten.erf.default, aten.mul.Tensor}
    assert all(n.meta["stack_trace"] == "model.py:12" for n in made)


def test_a_table_without_gelu_keeps_gelu() -> None:
    subset = {op: fn for op, fn in table("core/1").items() if op is not aten.gelu.default}
    out = decompose(_gelu_graph(), table=subset)
    targets = [n.target for n in out.graph.nodes if n.op == "call_function"]
    assert aten.gelu.default in targets and aten.erf.default not in targets
    assert out.meta[KEPT_KEY] == ["aten.gelu.default"]
    assert ptc_spec.dialect_of(out) == "aten"


def test_torch_dialect_graph_is_refused() -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x))
    ptc_spec.set_dialect(gm, "torch")
    with pytest.raises(WrongDialectError, match="needs an aten-dialect graph, but this graph is in the torch dialect"):
        decompose(gm)


def test_ops_without_decomposition_are_listed_together() -> None:
    gm = ptc_spec.trace(lambda x: (torch.cholesky(x @ x.mT + torch.eye(3)), torch.linalg.qr(x)[0]), TensorMeta.of((3, 3)))
    with pytest.raises(NoDecompositionError) as info:
        decompose(gm, "core/1")
    message = str(info.value)
    assert "not in core/1 and have no decomposition" in message
    assert "aten.cholesky.default" in message and "aten.linalg_qr.default" in message


def test_in_place_ops_are_refused() -> None:
    gm = ptc_spec.trace(lambda x: x.clone().add_(1), TensorMeta.of((3,)))
    with pytest.raises(InPlaceOpError, match=r"mutate a tensor: aten\.add_\.Tensor at node"):
        decompose(gm)


def test_training_batch_norm_with_running_stats_is_refused() -> None:
    b = GraphBuilder("aten")
    x = b.input("x", TensorMeta.of((2, 3, 4, 4)))
    mean, var = b.input("mean", TensorMeta.of((3,))), b.input("var", TensorMeta.of((3,)))
    out = b.call(aten.native_batch_norm.default, x, None, None, mean, var, True, 0.1, 1e-5)
    b.output(out[0])
    with pytest.raises(InPlaceOpError, match="updates running_mean/running_var in place"):
        decompose(b.build())


def test_a_wrong_decomposition_is_reported_with_its_node() -> None:
    broken = dict(table("core/1"))
    broken[aten.gelu.default] = lambda self, approximate="none": aten.sum.dim_IntList(self, None)
    with pytest.raises(DecompositionError, match=r"returned shape \(\) torch.float32, but the op gives \(4, 8\)"):
        decompose(_gelu_graph(), "core/1", table=broken)


def test_result_keeps_the_recorded_layout() -> None:
    # zeros_like of a channels-last tensor is channels-last in eager; so must the rewrite be.
    gm = ptc_spec.trace(lambda x: torch.zeros_like(x) + x, TensorMeta.of((2, 3, 4, 5)).replace(stride=(60, 1, 15, 3)))
    out = decompose(gm)
    node = next(n for n in out.graph.nodes if n.op == "call_function" and n.target is aten.add.Tensor)
    assert node.meta[META_KEY].stride == (60, 1, 15, 3)


def test_restride_copies_into_the_recorded_layout() -> None:
    # A decomposition that returns a contiguous result where eager gives a transposed one.
    gm = ptc_spec.trace(lambda x: torch.ops.aten.t.default(x) * 1, TensorMeta.of((3, 5)))
    odd = dict(table("core/1"))
    odd[aten.t.default] = lambda self: aten.clone.default(aten.permute.default(self, [1, 0]), memory_format=torch.contiguous_format)
    out = decompose(gm, table=odd)
    mul = next(n for n in out.graph.nodes if n.target is aten.mul.Tensor)
    assert mul.meta[META_KEY].stride == (1, 5)
    x = torch.randn(3, 5)
    assert_same(out(x), gm(x), check_stride=True)
    unstrided = decompose(gm, table=odd, config=Config(restride=False))
    assert next(n for n in unstrided.graph.nodes if n.target is aten.mul.Tensor).meta[META_KEY].stride == (3, 1)


def test_boundary_check_round_trips_the_input_first() -> None:
    gm = ptc_spec.load(next(p for p in FIXTURES if p.stem == "convnext_eval"))
    out = decompose(gm, config=Config(check_boundaries=True))
    inputs = example_inputs(gm)
    assert_same(out(*inputs), gm(*inputs))


def test_already_core_graph_passes_through() -> None:
    b = GraphBuilder("core/1")
    x = b.input("x", TensorMeta.of((3, 4)))
    b.output(b.call(aten.exp.default, x))
    gm = b.build()
    out = decompose(gm, "core/1")
    assert [n.target for n in out.graph.nodes if n.op == "call_function"] == [aten.exp.default]
    assert ptc_spec.dialect_of(out) == "core/1"


def test_tensor_constants_are_carried_over() -> None:
    table_values = torch.tensor([[1.0, -2.0, 3.0]])
    gm = ptc_spec.trace(lambda x: F.gelu(x * table_values), TensorMeta.of((2, 3)))
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    out = decompose(gm)
    assert any(n.op == "get_attr" for n in out.graph.nodes)
    x = torch.randn(2, 3)
    assert_same(out(x), gm(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_layer_norm_statistics_have_the_devices_dtype(dtype: torch.dtype) -> None:
    # CUDA (and the meta kernel) keep mean/rstd in float32, eager's CPU kernel in the weight's
    # dtype; the graph records the traced device's, and the decomposition must give exactly
    # that (rounding them to bf16 on the GPU failed every bfloat16 model there).
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.ops.aten.native_layer_norm.default(x, [8], w, None, 1e-5))

    on_gpu = decompose(ptc_spec.trace(fn, TensorMeta.of((4, 8), dtype, device="cuda"), TensorMeta.of((8,), dtype, device="cuda")))
    (output,) = [n for n in on_gpu.graph.nodes if n.op == "output"]
    assert [a.meta[META_KEY].dtype for a in output.args[0]] == [dtype, torch.float32, torch.float32]
    out = decompose(ptc_spec.trace(fn, TensorMeta.of((4, 8), dtype), TensorMeta.of((8,), dtype)))
    ptc_spec.check(out, "core/1")
    x, w = torch.randn(4, 8, dtype=dtype), torch.randn(8, dtype=dtype)
    result, expected = out(x, w), fn(x, w)
    assert [t.dtype for t in result] == [t.dtype for t in expected] == [dtype, dtype, dtype]
    assert_same(result, expected, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("target", ["core/1", "core/2"])
def test_promoting_decompositions_trace_without_promote_types_nodes(target: str) -> None:
    # lerp/addcmul/addcdiv call eager's type promotion, which dispatches aten.promote_types
    # under the rewriter's mode; it was reported as an op outside the set with no decomposition.
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.lerp(x, y, 0.3), torch.lerp(x, y, y.sigmoid()), torch.addcmul(x, x, y, value=0.5), torch.addcdiv(x, y, y.abs() + 1)

    gm = ptc_spec.trace(fn, TensorMeta.of((4, 6), torch.bfloat16), TensorMeta.of((6,), torch.bfloat16))
    out = decompose(gm, target, strict=True)
    assert all(n.target is not aten.promote_types.default for n in out.graph.nodes)
    x, y = torch.randn(4, 6).bfloat16(), torch.randn(6).bfloat16()
    assert_same(out(x, y), fn(x, y))


def test_add_scalar_with_a_positional_alpha_decomposes() -> None:
    # Traced graphs pass add.Scalar's alpha positionally; add.Tensor takes it by keyword only.
    gm = ptc_spec.trace(lambda x: aten.add.Scalar(x, 3, 2), TensorMeta.of((4,), torch.int64))
    out = decompose(gm, strict=True)
    x = torch.arange(4)
    assert_same(out(x), x + 6)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_eval_batch_norm_saves_the_statistics_its_device_saves(device: str) -> None:
    # Eager's CPU kernel saves none in eval mode (empty tensors), CUDA's the ones used (C,):
    # the graph records the traced device's, and the decomposition gives exactly that.
    def fn(x: torch.Tensor, w: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.ops.aten.native_batch_norm.default(x, w, None, rm, rv, False, 0.1, 1e-5))

    shapes = [(2, 3, 4), (3,), (3,), (3,)]
    out = decompose(ptc_spec.trace(fn, *[TensorMeta.of(s, device=device) for s in shapes]))
    (output,) = [n for n in out.graph.nodes if n.op == "output"]
    assert [a.meta[META_KEY].shape for a in output.args[0]] == [(2, 3, 4), (0,) if device == "cpu" else (3,), (0,) if device == "cpu" else (3,)]
    if device == "cpu":
        args = [torch.randn(2, 3, 4), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5]
        assert_same(out(*args), fn(*args))


@pytest.mark.parametrize("ignore_index", [-100, 2], ids=["ignore -100", "ignore a class"])
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "unweighted"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 7, 3, 4)], ids=["one item", "items", "2d"])
def test_nll_loss_backward_is_a_comparison_with_the_class_index(
    shape: tuple[int, ...], reduction: int, dtype: torch.dtype, weighted: bool, ignore_index: int
) -> None:
    # A scatter into zeros wrote the (N, C) gradient twice more than needed; the comparison fuses.
    op = aten.nll_loss_backward.default if len(shape) <= 2 else aten.nll_loss2d_backward.default
    torch.manual_seed(0)
    logp = torch.randn(shape).log_softmax(1 if len(shape) > 1 else 0).to(dtype)
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = torch.randint(0, shape[1 if len(shape) > 1 else 0], target_shape)
    if target.dim():
        target.view(-1)[0] = ignore_index  # an ignored item: its row of the gradient is 0
        target.view(-1)[1] = 3 if ignore_index == 2 else 2
    weight = torch.rand(shape[1 if len(shape) > 1 else 0]).to(dtype) if weighted else None
    grad_shape = target_shape if reduction == 0 else ()
    grad = torch.randn(grad_shape).to(dtype)
    total = torch.tensor(3.5, dtype=dtype)

    def fn(g: torch.Tensor, x: torch.Tensor, t: torch.Tensor, tw: torch.Tensor) -> torch.Tensor:
        return op(g, x, t, weight, reduction, ignore_index, tw)

    args = (grad, logp, target, total)
    gm = decompose(ptc_spec.trace(fn, *(TensorMeta.from_tensor(a) for a in args)))
    assert not [n for n in gm.graph.nodes if "scatter" in str(n.target)]
    assert_same(gm(*args), fn(*args))
