"""The reference tracer, checked op by op against eager PyTorch."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

import ptc_spec
from ptc_spec import META_KEY, DataDependentError, SymbolEnv, TensorMeta, TraceError, dynamic_meta, trace
from ptc_spec.device_meta import norm_statistics_dtype
from ptc_spec.testing import assert_same, compare_with_eager

from .cases import CASES, SYMBOLIC_CASES

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


def test_symbolic_inputs_outside_the_tracers_shape_env_are_refused_clearly() -> None:
    s = ptc_spec.size_symbol("s0")
    with pytest.raises(TraceError, match=r"symbolic sizes \(s0, 3\), but the tracer's SymbolEnv has no symbol s0"):
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


@pytest.mark.parametrize("functional", [True, False], ids=["functional", "in_place"])
@pytest.mark.parametrize("params", [torch.bfloat16, torch.float32], ids=["bf16_params", "f32_params"])
def test_batch_norm_with_update_statistics_carry_the_dtypes_its_kernels_return(functional: bool, params: torch.dtype) -> None:
    # Its functional form updates clones of the running statistics and returns them in their
    # own dtype on every device, where the meta kernel promotes them with float32: a compiled
    # graph that read them at the meta kernel's dtype read bf16 memory as float32.
    op = aten._batch_norm_with_update_functional.default if functional else aten._batch_norm_with_update.default
    x, w = torch.randn(2, 3, 4, 4, dtype=torch.bfloat16), torch.randn(3, dtype=params)

    def call(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(op(x, w, w, mean, var, 0.1, 1e-5))

    def dtypes(device: str) -> list[torch.dtype]:
        metas = [TensorMeta.from_tensor(t, device=torch.device(device)) for t in (x, w, torch.zeros(3, dtype=params), torch.ones(3, dtype=params))]
        gm = trace(call, *metas)
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        return [a.meta[META_KEY].dtype for a in output.args[0]]

    assert dtypes("cpu") == [t.dtype for t in call(x, w, torch.zeros(3, dtype=params), torch.ones(3, dtype=params))]
    stats = norm_statistics_dtype("cuda", torch.bfloat16, params, params)
    assert dtypes("cuda") == [torch.bfloat16, stats, stats, torch.uint8, *([params, params] if functional else [])]


# -- symbolic sizes ---------------------------------------------------------------------------
def _dynamic_inputs(specs: tuple[Any, ...], env: SymbolEnv) -> list[TensorMeta]:
    return [dynamic_meta(TensorMeta.of(shape, dtype), dims, env) for shape, dims, dtype in specs]


def _real_inputs(specs: tuple[Any, ...], grow: int, seed: int = 0) -> list[torch.Tensor]:
    """Inputs with every dynamic dim grown by ``grow`` (integer inputs stay valid indices)."""
    out = []
    for i, (shape, dims, dtype) in enumerate(specs):
        actual = tuple(s + grow if d in dims else s for d, s in enumerate(shape))
        meta = TensorMeta.of(actual, dtype)
        out.append(meta.example(seed=seed + i) % 3 if dtype == torch.int64 else meta.example(seed=seed + i))
    return out


@pytest.mark.parametrize(("name", "fn", "specs"), SYMBOLIC_CASES, ids=[c[0] for c in SYMBOLIC_CASES])
def test_a_symbolic_trace_runs_like_eager_at_other_sizes(name: str, fn: Any, specs: tuple[Any, ...]) -> None:
    env = SymbolEnv()
    metas = _dynamic_inputs(specs, env)
    gm = ptc_spec.roundtrip(trace(fn, *metas, shape_env=env))
    for grow in (0, 2, 4, 6):
        args = _real_inputs(specs, grow)
        values = ptc_spec.symbol_values(metas, args)
        assert values is not None and env.guards_hold(values), (grow, env.guards)
        compare_with_eager(gm, lambda *a: pytree.tree_map(lambda r: tuple(r) if isinstance(r, tuple) else r, fn(*a)), *args)


def test_every_node_of_a_symbolic_trace_has_symbolic_metadata_matching_eager() -> None:
    env = SymbolEnv()
    fn = lambda a, b: (a @ b).softmax(-1).reshape(-1)  # noqa: E731
    metas = [dynamic_meta(TensorMeta.of((6, 5)), [0, 1], env), dynamic_meta(TensorMeta.of((5, 4)), [0, 1], env)]
    gm = trace(fn, *metas, shape_env=env)
    s0, s1, s2, s3 = env.symbols
    assert env.replacements == {s2: s1}
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert out.meta[META_KEY].shape == (s0 * s3,)
    x, w = torch.randn(9, 7), torch.randn(7, 3)
    seen: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            seen[n.name] = super().run_node(n)
            return seen[n.name]

    Recorder(gm).run(x, w)
    values = {s0: 9, s1: 7, s2: 7, s3: 3}
    for node in gm.graph.nodes:
        meta = node.meta.get(META_KEY)
        if isinstance(meta, TensorMeta):
            real = seen[node.name]
            assert meta.concrete_shape(values) == tuple(real.shape), node.name
            assert meta.concrete_stride(values) == real.stride(), node.name
        elif isinstance(meta, sympy.Expr):
            assert int(meta.xreplace(values)) == seen[node.name], node.name


def test_sizes_computed_in_python_become_size_nodes_not_guards() -> None:
    env = SymbolEnv()
    x = dynamic_meta(TensorMeta.of((6, 8)), [0, 1], env)
    gm = trace(lambda a: a.view(a.shape[0] * 2, a.size(1) // 2), x, shape_env=env)
    view = next(n for n in gm.graph.nodes if n.target is aten.view.default)
    size_ops = [n.target for n in gm.graph.nodes if n.op == "call_function" and n is not view]
    assert size_ops.count(aten.sym_size.int) == 2
    assert {operator.mul, operator.floordiv} <= set(size_ops)
    assert all(isinstance(a, torch.fx.Node) for a in view.args[1])
    s0, s1 = env.symbols
    assert view.meta[META_KEY].shape == (2 * s0, sympy.floor(s1 / 2))
    assert [str(g) for g in env.guards] == ["s0 >= 2", "s1 >= 2", "Eq(Mod(s1, 2), 0)", "Ne(s1, 2)"]
    compare_with_eager(gm, lambda a: a.view(a.shape[0] * 2, a.size(1) // 2), torch.randn(5, 12))


@pytest.mark.parametrize(("rows", "expected"), [(8, "s0 > 4"), (3, "s0 <= 4")])
def test_a_branch_on_a_size_in_traced_code_is_a_guard(rows: int, expected: str) -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        return a * 2 if a.shape[0] > 4 else a - 1

    env = SymbolEnv()
    gm = trace(fn, dynamic_meta(TensorMeta.of((rows, 3)), [0], env), shape_env=env)
    assert [str(g) for g in env.guards] == ["s0 >= 2", expected]
    same_side = rows + 3 if rows > 4 else rows - 1
    assert env.guards_hold({"s0": same_side}) and not env.guards_hold({"s0": 11 - rows})
    compare_with_eager(gm, fn, torch.randn(same_side, 3))


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.LayerNorm(8))


class _Attention(torch.nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.mlp = _mlp() if dim == 8 else torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x)


@pytest.mark.parametrize("model", [_mlp(), _Attention()], ids=["mlp", "attention"])
def test_a_model_traced_with_symbolic_batch_and_sequence_runs_like_eager_at_three_other_sizes(model: torch.nn.Module) -> None:
    dim = 8 if isinstance(model, torch.nn.Sequential) else 16
    env = SymbolEnv()
    x = dynamic_meta(TensorMeta.of((3, 10, dim)), [0, 1], env)

    def run(a: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = model(a)
        return out

    gm = ptc_spec.roundtrip(trace(run, x, shape_env=env))
    assert [str(g) for g in env.guards] == ["s0 >= 2", "s1 >= 2"]
    for batch, seq in ((2, 5), (4, 17), (7, 3)):
        assert env.guards_hold({"s0": batch, "s1": seq})
        compare_with_eager(gm, run, torch.randn(batch, seq, dim))


def test_a_backward_traced_with_a_symbolic_batch_runs_like_eager() -> None:
    lin = torch.nn.Linear(6, 4)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = lin(x).relu().sum()
        return (loss, *torch.autograd.grad(loss, x))

    env = SymbolEnv()
    gm = trace(fn, dynamic_meta(TensorMeta.of((5, 6), requires_grad=True), [0], env), shape_env=env)
    for rows in (2, 9):
        x = torch.randn(rows, 6, requires_grad=True)
        assert_same(gm(x), fn(x))


def test_a_symbolic_graph_file_keeps_its_symbols_and_guards() -> None:
    env = SymbolEnv()
    x = dynamic_meta(TensorMeta.of((8, 6)), [0, 1], env)
    gm = trace(lambda a: a.view(a.shape[0], 2, -1).sum(1) + (1 if a.shape[0] > 4 else 0), x, shape_env=env)
    loaded = ptc_spec.loads(ptc_spec.dumps(gm))
    restored = ptc_spec.shape_env_of(loaded)
    assert restored is not None and restored.guards == env.guards == ptc_spec.shape_env_of(gm).guards  # type: ignore[union-attr]
    assert restored.hints == env.hints and restored.symbols == env.symbols
    assert [str(g) for g in restored.guards] == ["s0 >= 2", "s1 >= 2", "Eq(Mod(s1, 2), 0)", "Ne(s1, 2)", "s0 > 4"]
    for rows, cols in ((5, 4), (12, 10)):
        assert restored.guards_hold({"s0": rows, "s1": cols})
        a = torch.randn(rows, cols)
        assert_same(loaded(a), a.view(rows, 2, -1).sum(1) + 1)


def test_a_graph_of_static_sizes_records_no_shape_env() -> None:
    gm = trace(torch.exp, TensorMeta.of((3,)))
    assert ptc_spec.SHAPE_ENV_KEY not in gm.meta and ptc_spec.shape_env_of(gm) is None
