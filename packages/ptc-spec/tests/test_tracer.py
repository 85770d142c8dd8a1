"""The reference tracer, checked op by op against eager PyTorch."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import ptc_spec
from ptc_spec import META_KEY, DataDependentError, TensorMeta, TraceError, trace
from ptc_spec.testing import assert_same

from .cases import CASES

aten = torch.ops.aten


def examples(inputs: tuple[Any, ...], seed: int = 0) -> list[Any]:
    """Real tensors for a case's TensorMeta inputs (integer indices stay small and valid)."""
    counter = iter(range(1000))
    return [pytree.tree_map(lambda m: m.example(seed=seed + next(counter)) if isinstance(m, TensorMeta) else m, x) for x in inputs]


@pytest.mark.parametrize(("name", "fn", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_traced_graph_matches_eager(name: str, fn: Any, inputs: tuple[Any, ...]) -> None:
    gm = trace(fn, *inputs)
    args = examples(inputs)
    expected = fn(*args)
    if isinstance(expected, tuple):
        # Graphs return plain tuples; torch.return_types structseqs are tuples with names.
        expected = tuple(expected)
    assert_same(gm(*pytree.tree_leaves(args)), expected)


@pytest.mark.parametrize(("name", "fn", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_every_node_carries_metadata_matching_the_real_run(name: str, fn: Any, inputs: tuple[Any, ...]) -> None:
    gm = trace(fn, *inputs)
    args = pytree.tree_leaves(examples(inputs))
    seen: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            seen[n.name] = out
            return out

    Recorder(gm).run(*args)
    for node in gm.graph.nodes:
        # Unused items of multi-output ops are skipped: torch's meta and CPU kernels disagree
        # on some of them (eval-mode batch norm's save_mean is (C,) on meta, (0,) on CPU).
        if node.op == "output" or not node.users or isinstance(node.meta[META_KEY], (tuple, list)):
            continue
        meta = node.meta[META_KEY]
        real = seen[node.name]
        metas, reals = pytree.tree_leaves(meta), pytree.tree_leaves(real)
        for m, r in zip(metas, reals):
            if isinstance(r, torch.Tensor):
                assert (m.shape, m.dtype, m.device) == (tuple(r.shape), r.dtype, r.device), node.name
                if r.numel() > 1 and r.is_contiguous() == m.is_contiguous():
                    assert m.stride == tuple(r.stride()), node.name


def test_there_are_at_least_sixty_traced_cases() -> None:
    assert len(CASES) >= 60


def test_multiple_outputs_become_getitem_nodes() -> None:
    gm = trace(lambda a: a.max(dim=1), TensorMeta.of((3, 4)))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [aten.max.dim, operator.getitem, operator.getitem]
    values, indices = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert values.meta[META_KEY].dtype == torch.float32
    assert indices.meta[META_KEY].dtype == torch.int64


def test_in_place_ops_are_recorded_and_later_uses_follow_them() -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b.mul_(2)
        b.add_(1)
        return b.exp()

    gm = trace(fn, TensorMeta.of((4,)))
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [aten.clone.default, aten.mul_.Tensor, aten.add_.Tensor, aten.exp.default]
    assert calls[3].args[0] is calls[2]
    x = torch.randn(4)
    assert_same(gm(x), fn(x))


def test_in_place_view_ops_re_view_the_traced_tensor_for_shapes_and_autograd() -> None:
    # transpose_/unsqueeze_ change the tensor's own sizes: Python code and autograd read them.
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b = a * 1
        b.t_()
        b.unsqueeze_(0)
        out = b.sum(dim=2) * torch.ones(b.shape[1])
        return (out, *torch.autograd.grad(out.sum(), a))

    gm = trace(fn, TensorMeta.of((3, 4), requires_grad=True))
    x = torch.randn(3, 4, requires_grad=True)
    assert_same(gm(x), fn(x))


def test_mutation_of_an_input_is_faithful() -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a * 2

    gm = trace(fn, TensorMeta.of((3,)))
    x1, x2 = torch.randn(3), None
    x2 = x1.clone()
    out = gm(x1)
    expected = fn(x2)
    assert_same(out, expected)
    assert_same(x1, x2)


def test_out_variant_is_recorded_with_its_out_argument() -> None:
    def fn(a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.add(a, 1, out=out)
        return out * 3

    gm = trace(fn, TensorMeta.of((3,)), TensorMeta.of((3,)))
    assert any(n.target is aten.add.out for n in gm.graph.nodes)
    a, o1 = torch.randn(3), torch.empty(3)
    o2 = torch.empty(3)
    assert_same(gm(a, o1), fn(a, o2))


def test_logical_device_is_preserved_in_metadata() -> None:
    gm = trace(lambda x, y: (x @ y).relu(), TensorMeta.of((2, 3), device="cuda"), TensorMeta.of((3, 4), device="cuda"))
    devices = {n.meta[META_KEY].device for n in gm.graph.nodes if n.op != "output"}
    assert devices == {torch.device("cuda")}


def test_zero_dim_cpu_tensor_does_not_decide_the_output_device() -> None:
    gm = trace(lambda x, s: x * s, TensorMeta.of((3,), device="cuda"), TensorMeta.of((), device="cpu"))
    out = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert out.meta[META_KEY].device == torch.device("cuda")


def test_backward_is_recorded_through_autograd() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = torch.tanh(x @ w).sum()
        return torch.autograd.grad(loss, (x, w))

    gm = trace(fn, TensorMeta.of((3, 4), requires_grad=True), TensorMeta.of((4, 2), requires_grad=True))
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 2, requires_grad=True)
    assert_same(gm(x, w), fn(x, w))
    assert aten.tanh_backward.default in {n.target for n in gm.graph.nodes}


def test_constants_created_inside_become_get_attr_nodes() -> None:
    const = torch.tensor([1.0, -2.0, 3.0])
    gm = trace(lambda x: x + const, TensorMeta.of((3,)))
    attrs = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert len(attrs) == 1
    assert torch.equal(getattr(gm, attrs[0].target), const)


def test_module_parameters_are_constants_of_the_graph() -> None:
    lin = torch.nn.Linear(3, 2)
    gm = trace(lin, TensorMeta.of((4, 3)))
    assert len([n for n in gm.graph.nodes if n.op == "get_attr"]) == 2
    x = torch.randn(4, 3)
    assert_same(gm(x), lin(x))


def test_python_scalars_and_non_tensor_inputs_are_baked_in() -> None:
    gm = trace(lambda x, k, flag: x * k if flag else x, TensorMeta.of((2,)), 3.5, True)
    x = torch.randn(2)
    assert_same(gm(x), x * 3.5)


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (lambda x: x.sum().item(), "aten._local_scalar_dense.default"),
        (lambda x: x.nonzero(), "aten.nonzero.default"),
        (lambda x: x[x > 0], "aten.index.Tensor"),
        (lambda x: x + 1 if x.sum() > 0 else x, "aten."),
        (lambda x: torch.masked_select(x, x > 0), "aten.masked_select.default"),
    ],
)
def test_data_dependent_ops_raise_naming_the_op(fn: Any, op: str) -> None:
    with pytest.raises(TraceError, match=op.replace(".", r"\.")) as info:
        trace(fn, TensorMeta.of((4,)))
    assert "tensor" in str(info.value)


def test_data_dependent_error_type() -> None:
    with pytest.raises(DataDependentError):
        trace(lambda x: x.nonzero(), TensorMeta.of((4,)))


def test_symbolic_inputs_are_refused_clearly() -> None:
    s = ptc_spec.size_symbol("s0")
    with pytest.raises(TraceError, match="symbolic sizes"):
        trace(torch.exp, TensorMeta.of((s, 3)))


def test_grad_on_a_device_this_build_lacks_is_refused_without_crashing() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so autograd on cuda works")
    with pytest.raises(TraceError, match="cannot run autograd"):
        trace(lambda x: x * 2, TensorMeta.of((3,), device="cuda", requires_grad=True))


def test_traced_graph_records_aten_dialect() -> None:
    gm = trace(torch.exp, TensorMeta.of((3,)))
    assert ptc_spec.dialect_of(gm) == "aten"
    ptc_spec.check(gm, "aten")


def _channels_last(shape: tuple[int, ...]) -> TensorMeta:
    return TensorMeta.from_tensor(torch.empty(shape).to(memory_format=torch.channels_last))


# torch 2.11's meta kernel for 2-d padding keeps no channels-last layout on any device.
_PAD_META_KNOWS_CPU = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)

# Ops whose eager CPU kernels return another layout than their meta kernels assume (CUDA's).
DEVICE_LAYOUT_CASES = [
    pytest.param(torch.linalg.eig, (TensorMeta.of((5, 5)),), id="linalg_eig"),
    pytest.param(lambda a: torch.linalg.svd(a, full_matrices=False), (TensorMeta.of((2, 3)),), id="linalg_svd"),
    pytest.param(torch.fft.rfftn, (TensorMeta.of((5, 6, 4)),), id="rfftn"),
    pytest.param(lambda x: torch.fft.irfftn(torch.fft.rfftn(x)), (TensorMeta.of((5, 6, 4)),), id="irfftn"),
    pytest.param(
        lambda x: aten.reflection_pad2d.default(x, [1, 1, 2, 2]), (_channels_last((2, 3, 4, 5)),), id="reflection_pad2d",
        marks=pytest.mark.skipif(not _PAD_META_KNOWS_CPU, reason="this torch's padding meta kernel ignores the device"),
    ),
    pytest.param(lambda x: aten.pixel_shuffle.default(x, 2), (_channels_last((1, 8, 3, 3)),), id="pixel_shuffle"),
]


@pytest.mark.parametrize(("fn", "inputs"), DEVICE_LAYOUT_CASES)
def test_traced_strides_are_the_eager_kernels_of_the_traced_device(fn: Any, inputs: tuple[TensorMeta, ...]) -> None:
    gm = trace(fn, *inputs)
    # A CPU trace of a linalg or FFT op records eager's column-major or reordered result, not
    # the CUDA layout a bare meta kernel assumes.
    out = next(n for n in gm.graph.nodes if n.op == "output")
    metas = [n.meta[META_KEY] for n in pytree.tree_leaves(out.args[0])]
    eager = pytree.tree_leaves(tuple(fn(*examples(inputs))) if len(metas) > 1 else fn(*examples(inputs)))
    assert [(m.shape, m.stride) for m in metas] == [(tuple(t.shape), t.stride()) for t in eager]


@pytest.mark.parametrize(
    "call",
    [
        lambda x, w, r, lw: aten.native_layer_norm.default(x, [4], lw, None, 1e-5),
        lambda x, w, r, lw: aten.native_batch_norm.default(x, w, None, r, r, True, 0.1, 1e-5),
        lambda x, w, r, lw: aten._native_batch_norm_legit.no_stats(x, None, None, True, 0.1, 1e-5),
        lambda x, w, r, lw: aten._native_batch_norm_legit_functional.default(x, w, None, r, r, True, 0.1, 1e-5),
    ],
    ids=["layer_norm", "batch_norm", "no_stats", "functional"],
)
@pytest.mark.parametrize("params", [torch.bfloat16, torch.float32], ids=["bf16_params", "f32_params"])
def test_norm_statistics_carry_the_traced_devices_dtype(call: Any, params: torch.dtype) -> None:
    # Eager's CPU kernels keep the parameters' dtype; CUDA (and the meta kernel) use float32.
    x, w, r, lw = torch.randn(2, 3, 4, 4, dtype=torch.bfloat16), torch.randn(3, dtype=params), torch.zeros(3, dtype=params), torch.randn(4, dtype=params)

    def dtypes(device: str) -> list[torch.dtype]:
        metas = [TensorMeta.from_tensor(t, device=torch.device(device)) for t in (x, w, r, lw)]
        gm = trace(lambda *a: tuple(call(*a)), *metas)
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        return [a.meta[META_KEY].dtype for a in output.args[0]]

    assert dtypes("cpu") == [t.dtype for t in call(x, w, r, lw)]
    assert dtypes("cuda") == [t.dtype for t in call(*(t.to("meta") for t in (x, w, r, lw)))]
