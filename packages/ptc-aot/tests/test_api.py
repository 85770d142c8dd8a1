"""End-to-end: compiled forward outputs, input mutations and gradients equal eager's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from aot_models import MODELS, make_inputs

from ptc_aot import Config, JointRewrite, PtcAotError, aot
from ptc_spec import META_KEY, check, dialect_of, load, trace
from ptc_spec.testing import assert_same, compare_with_eager


@pytest.mark.parametrize("partition", ["min_cut", "save_all"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_outputs_and_grads_match_eager(name: str, partition: str) -> None:
    fn = MODELS[name][0]
    compiled = aot(fn, make_inputs(name), partition=partition)
    compare_with_eager(compiled, fn, *make_inputs(name, seed=1), grads=True)


def test_batch_norm_running_stats_are_updated_like_eager() -> None:
    fn = MODELS["conv_bn_relu"][0]
    compiled = aot(fn, make_inputs("conv_bn_relu"))
    eager_args, compiled_args = make_inputs("conv_bn_relu", 2), make_inputs("conv_bn_relu", 2)
    for _ in range(2):
        fn(*eager_args).sum().backward()
        compiled(*compiled_args).sum().backward()
    assert compiled.programs[0].mutated_inputs == (4, 5)
    torch.testing.assert_close(compiled_args[4], eager_args[4])
    torch.testing.assert_close(compiled_args[5], eager_args[5])
    assert not torch.equal(compiled_args[4], torch.zeros(4))








def test_integer_inputs_are_traced_and_passed_through() -> None:
    def fn(x: torch.Tensor, table: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        return table[x + offset].sum(0)

    args = [torch.tensor([0, 2, 1]), torch.randn(5, 3, requires_grad=True), torch.tensor(1)]
    compare_with_eager(aot(fn, args), fn, *args, grads=True)


def test_seeded_dropout_mask_is_shared_by_forward_and_backward() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, 0.25, training=True)

    x = torch.ones(256, 64, requires_grad=True)
    compiled = aot(fn, [x])
    torch.manual_seed(5)
    out = compiled(x)
    out.backward(torch.ones_like(out))
    assert x.grad is not None
    # d(out)/dx is the scaled mask itself: the backward used the forward's mask.
    torch.testing.assert_close(x.grad, out.detach())
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    torch.testing.assert_close(out[out != 0], torch.full_like(out[out != 0], 1 / 0.75))


def test_dropout_with_same_global_seed_equals_eager() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.dropout(x @ w, 0.3, training=True)

    x, w = torch.randn(16, 8), torch.randn(8, 8, requires_grad=True)
    compiled = aot(fn, [x, w])
    torch.manual_seed(11)
    expected = fn(x, w)
    torch.manual_seed(11)
    torch.testing.assert_close(compiled(x, w), expected)


def test_dropout_with_p_zero_equals_eager() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.dropout(x @ w, 0.0, training=True)

    args = [torch.randn(6, 4), torch.randn(4, 4, requires_grad=True)]
    compare_with_eager(aot(fn, args), fn, *args, grads=True)


def test_compilers_receive_aten_graphs_with_metadata() -> None:
    seen: list[torch.fx.GraphModule] = []
    calls: list[str] = []

    def record(gm: torch.fx.GraphModule) -> Any:
        seen.append(gm)
        kind = "forward" if len(seen) == 1 else "backward"

        def run(*args: Any) -> Any:
            calls.append(kind)
            return gm(*args)

        return run

    fn = MODELS["mlp"][0]
    compare_with_eager(aot(fn, make_inputs("mlp"), record, record), fn, *make_inputs("mlp"), grads=True)
    assert len(seen) == 2 and calls == ["forward", "backward"]
    for gm in seen:
        assert dialect_of(gm) == "aten"
        check(gm, "aten")
        assert all(META_KEY in n.meta for n in gm.graph.nodes if n.op != "output")


def test_dump_dir_writes_loadable_graphs(tmp_path: Path) -> None:
    fn = MODELS["mlp"][0]
    args = make_inputs("mlp")
    compiled = aot(fn, args, dump_dir=str(tmp_path))
    with torch.no_grad():
        compiled(*args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backward.ptcg", "forward.ptcg", "inference_1.ptcg", "joint.ptcg"]
    forward = load(tmp_path / "forward.ptcg")
    expected = compiled.programs[0].forward(*args)
    torch.testing.assert_close(forward(*args), expected)


def test_check_boundaries_round_trips_graphs_and_still_matches_eager() -> None:
    fn = MODELS["attention"][0]
    compiled = aot(fn, make_inputs("attention"), config=Config(check_boundaries=True))
    compare_with_eager(compiled, fn, *make_inputs("attention", 1), grads=True)


def test_new_shapes_compile_a_new_program() -> None:
    fn = MODELS["mlp"][0]
    compiled = aot(fn, make_inputs("mlp"))
    args = make_inputs("mlp")
    args[0] = torch.randn(3, 16)
    compare_with_eager(compiled, fn, *args, grads=True)
    assert len(compiled.programs) == 2


def test_example_inputs_may_be_none_only_for_graph_modules() -> None:
    with pytest.raises(PtcAotError, match="GraphModule"):
        aot(MODELS["mlp"][0], None)


FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.ptcg"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture_torch_graphs_match_eager(path: Path) -> None:
    gm = load(path)
    assert dialect_of(gm) == "torch"
    metas = [n.meta[META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    args = [meta.example(seed=i) for i, meta in enumerate(metas)]
    compare_with_eager(aot(gm, None), gm, *args, grads=True)


def test_fixture_graphs_survive_boundary_checks() -> None:
    gm = load(FIXTURES[0])
    metas = [n.meta[META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    args = [meta.example(seed=i) for i, meta in enumerate(metas)]
    compare_with_eager(aot(gm, None, config=Config(check_boundaries=True)), gm, *args, grads=True)


def test_unhashable_python_arguments_get_a_clear_error() -> None:
    def fn(x: torch.Tensor, dims: Any) -> torch.Tensor:
        return x.sum(dims)

    compiled = aot(fn, [torch.randn(2, 3), (0,)])
    torch.testing.assert_close(compiled(torch.ones(2, 3), (0,)), torch.full((3,), 2.0))
    with pytest.raises(PtcAotError, match="not hashable"):
        compiled(torch.ones(2, 3), [0])


def test_equal_python_values_of_different_types_get_their_own_programs() -> None:
    # 2 == 2.0, but x * 2 keeps an integer tensor integral and x * 2.0 makes it float.
    def scale(x: torch.Tensor, k: Any) -> torch.Tensor:
        return x * k

    x = torch.arange(4)
    compiled = aot(scale, [x, 2])
    for k in (2, 2.0, 2):
        assert_same(compiled(x, k), scale(x, k))
    assert len(compiled.programs) == 2


def test_guarded_calls_pick_programs_by_grad_mode_and_storage_offset_without_the_layout_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import ptc_aot.api

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sin()

    base, w = torch.randn(10), torch.randn(4, requires_grad=True)
    compiled = aot(fn, [base[:4], w], guarded=True)
    layouts = []
    real = ptc_aot.api._layout_of
    monkeypatch.setattr(ptc_aot.api, "_layout_of", lambda v: layouts.append(v) or real(v))
    for _ in range(3):
        assert_same(compiled(base[:4], w), fn(base[:4], w))
    assert len(layouts) == 2, "one full layout key for the first call of this grad mode and offset, none after"
    # Another storage offset and no grad: each a new dispatch through the full key, right results.
    assert_same(compiled(base[3:7], w), fn(base[3:7], w))
    with torch.no_grad():
        out = compiled(base[:4], w)
        assert not out.requires_grad
        assert_same(out, fn(base[:4], w))
    assert len(layouts) == 6
    out = compiled(base[:4], w)
    out.sum().backward()
    assert_same(w.grad, torch.autograd.grad(fn(base[:4], w).sum(), w)[0])


def test_training_graphs_say_how_many_values_cross_from_forward_to_backward() -> None:
    from ptc_aot.api import SAVED_INPUTS_KEY, SAVED_OUTPUTS_KEY

    seen: dict[str, torch.fx.GraphModule] = {}

    def keep(kind: str) -> Any:
        def compiler(gm: torch.fx.GraphModule) -> Any:
            seen[kind] = gm
            return gm

        return compiler

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = (x @ w).tanh()
        return h.sum(), h * 2

    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    compiled = aot(fn, [x, w], fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    out = compiled(x, w)
    (out[0] + out[1].sum()).backward()
    forward, backward = seen["forward"], seen["backward"]
    saved = forward.meta[SAVED_OUTPUTS_KEY]
    outputs = next(n for n in forward.graph.nodes if n.op == "output").args[0]
    assert saved >= 1 and len(outputs) == 2 + saved
    assert backward.meta[SAVED_INPUTS_KEY] == saved
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == saved + 2  # then one tangent per output
    expected = torch.autograd.grad(fn(x, w)[0] + fn(x, w)[1].sum(), w)[0]
    assert_same(w.grad, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_output_nobody_differentiates_gets_zeros_made_in_the_backward_graph(dtype: torch.dtype) -> None:
    # A language model's logits beside its loss: the backward is compiled for the loss's tangent
    # alone, with constant zeros for the logits', instead of reading a tensor of zeros.
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule) -> Any:
        graphs.append(gm)
        return gm

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = x @ w
        return logits, F.cross_entropy(logits.float(), torch.arange(3) % 5)

    x, w = torch.randn(3, 4, dtype=dtype), torch.randn(4, 5, dtype=dtype, requires_grad=True)
    compiled = aot(fn, [x, w], bw_compiler=keep)
    assert graphs == [], "the backward is compiled when it is first called"
    for which in ("loss", "loss", "both"):
        got = torch.autograd.grad(compiled(x, w)[1] if which == "loss" else sum(o.float().sum() for o in compiled(x, w)), w)[0]
        want = torch.autograd.grad(fn(x, w)[1] if which == "loss" else sum(o.float().sum() for o in fn(x, w)), w)[0]
        assert_same(got, want)
    # One graph per set of tangents: the loss's alone (its zeros a constant), then both.
    tangents = [[n.name for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")] for gm in graphs]
    assert [len(t) for t in tangents] == [1, 2]
    assert [n.target for n in graphs[0].graph.nodes if n.target is torch.ops.aten.full.default] == [torch.ops.aten.full.default]


@pytest.mark.parametrize("hooks", ["recording", "save_on_cpu"])
def test_a_callers_saved_tensor_hooks_see_only_real_saved_values(hooks: str) -> None:
    # Tracing ran the caller's pack hook on traced tensors (a pack hook that reads a storage
    # failed; one that makes tensors would be recorded into the graph).
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).tanh().sum(1)

    packed: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        t.untyped_storage().data_ptr()  # fails on a traced tensor
        packed.append(t)
        return t

    def context() -> Any:
        if hooks == "save_on_cpu":
            return torch.autograd.graph.save_on_cpu()
        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    x, w = torch.randn(8, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    with context():
        compiled = aot(fn, [x, w])
        compare_with_eager(compiled, fn, x, w, grads=True)
    graph_ops = {str(n.target) for p in compiled.programs for n in p.forward.graph.nodes}
    assert not any("pin_memory" in op or "_to_copy" in op for op in graph_ops), graph_ops
    if hooks == "recording":
        # Eager's run and the compiled program's both saved through the hook, with real tensors.
        assert packed and all(type(t) is torch.Tensor for t in packed)


def _log_softmax_by_hand(joint: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A JointRewrite for the test: each _log_softmax becomes x - amax - log(sum(exp(x - amax)))."""
    graph = joint.graph
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten._log_softmax.default:
            continue
        x, dim = node.args[0], node.args[1]
        with graph.inserting_before(node):
            amax = graph.call_function(torch.ops.aten.amax.default, (x, [dim], True))
            shifted = graph.call_function(torch.ops.aten.sub.Tensor, (x, amax))
            total = graph.call_function(torch.ops.aten.sum.dim_IntList, (graph.call_function(torch.ops.aten.exp.default, (shifted,)), [dim], True))
            out = graph.call_function(torch.ops.aten.sub.Tensor, (shifted, graph.call_function(torch.ops.aten.log.default, (total,))))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
    joint.recompile()
    # Traced again so that every new node carries its TensorMeta, as a rewrite's result must.
    return trace(joint, *(n.meta[META_KEY] for n in graph.nodes if n.op == "placeholder"))


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_a_joint_rewrite_is_applied_to_training_joints_before_partitioning(training: bool) -> None:
    seen: list[int] = []

    def rewrite(joint: torch.fx.GraphModule) -> torch.fx.GraphModule:
        seen.append(sum(1 for n in joint.graph.nodes if n.op == "placeholder"))
        return _log_softmax_by_hand(joint)

    def fn(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x @ w, target)

    args = [torch.randn(6, 4), torch.randn(4, 10, requires_grad=training), torch.randint(0, 10, (6,))]
    compiled = aot(fn, args, config=Config(joint_rewrite=JointRewrite("log_softmax by hand", rewrite)))
    compare_with_eager(compiled, fn, *args, grads=training)
    # The joint graph has the three inputs and one tangent; an inference graph is not rewritten.
    assert seen == ([4] if training else [])
    if training:
        (program,) = compiled.programs
        forward = program.forward
        assert not any(n.target is torch.ops.aten._log_softmax.default for n in forward.graph.nodes)
