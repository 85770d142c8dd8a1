"""Symbolic programs: compiled once over symbolic sizes, run at many sizes, equal to eager.

Each model is compiled from example inputs whose chosen dims are symbols (``dynamic_meta``),
then called at the hint sizes and at others (odd, smaller, larger): outputs, mutated inputs
and gradients must match eager, and every call must reuse the one program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import sympy
import torch
from aot_models import attention_block, conv_bn_relu, embedding_cross_entropy, gpt_block, gpt_block_inputs, mlp

import ptc_spec
from ptc_aot import Config, aot
from ptc_aot.signature import Signature
from ptc_spec import SymbolEnv, TensorMeta, dynamic_meta, shape_env_of
from ptc_spec.testing import compare_with_eager

Inputs = Callable[[torch.Generator, Mapping[str, int]], list[Any]]


def _param(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * 0.2).requires_grad_(True)


def _mlp_inputs(gen: torch.Generator, n: Mapping[str, int]) -> list[Any]:
    return [torch.randn(n["b"], 16, generator=gen), _param(32, 16, gen=gen), _param(32, gen=gen), _param(4, 32, gen=gen), _param(4, gen=gen)]


def _attention_inputs(gen: torch.Generator, n: Mapping[str, int]) -> list[Any]:
    x = torch.randn(n["b"], n["t"], 8, generator=gen).requires_grad_(True)
    return [x, _param(8, gen=gen), _param(8, gen=gen), _param(8, 8, gen=gen), _param(8, 8, gen=gen), _param(8, 8, gen=gen)]


def _conv_bn_inputs(gen: torch.Generator, n: Mapping[str, int]) -> list[Any]:
    x = torch.randn(n["b"], 3, n["h"], n["w"], generator=gen).requires_grad_(True)
    return [x, _param(4, 3, 3, 3, gen=gen), _param(4, gen=gen), _param(4, gen=gen), torch.zeros(4), torch.ones(4)]


def _gpt_inputs(gen: torch.Generator, n: Mapping[str, int]) -> list[Any]:
    return gpt_block_inputs(gen, batch=n["b"], seq=n["t"])


def _embedding_inputs(gen: torch.Generator, n: Mapping[str, int]) -> list[Any]:
    k = n["k"]
    return [torch.randint(0, 10, (k,), generator=gen), torch.randint(0, 7, (k,), generator=gen), _param(10, 6, gen=gen), _param(6, 7, gen=gen)]


# name: (function, inputs at given sizes, dynamic dims per input position, hint sizes, other sizes)
MODELS: dict[str, tuple[Callable[..., Any], Inputs, dict[int, list[int]], dict[str, int], list[dict[str, int]]]] = {
    "mlp": (mlp, _mlp_inputs, {0: [0]}, {"b": 8}, [{"b": 3}, {"b": 11}]),
    "attention": (attention_block, _attention_inputs, {0: [0, 1]}, {"b": 2, "t": 5}, [{"b": 3, "t": 7}, {"b": 4, "t": 2}]),
    "conv_bn_relu": (conv_bn_relu, _conv_bn_inputs, {0: [0, 2, 3]}, {"b": 2, "h": 6, "w": 6}, [{"b": 3, "h": 5, "w": 7}, {"b": 5, "h": 9, "w": 4}]),
    "gpt_block": (gpt_block, _gpt_inputs, {0: [0, 1]}, {"b": 2, "t": 8}, [{"b": 3, "t": 5}, {"b": 2, "t": 13}]),
    "embedding_cross_entropy": (embedding_cross_entropy, _embedding_inputs, {0: [0], 1: [0]}, {"k": 12}, [{"k": 5}, {"k": 17}]),
}


def symbolic_metas(args: Sequence[Any], dims: Mapping[int, Sequence[int]]) -> tuple[list[Any], SymbolEnv]:
    """Example inputs as TensorMetas, the chosen dims made symbolic."""
    env = SymbolEnv()
    metas: list[Any] = []
    for i, a in enumerate(args):
        meta = TensorMeta.from_tensor(a) if isinstance(a, torch.Tensor) else a
        metas.append(dynamic_meta(meta, dims[i], env) if i in dims else meta)
    return metas, env


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_symbolic_program_matches_eager_at_every_size(name: str, training: bool) -> None:
    fn, make, dims, hints, others = MODELS[name]
    metas, env = symbolic_metas(make(torch.Generator().manual_seed(0), hints), dims)
    with torch.set_grad_enabled(training):
        compiled = aot(fn, metas, shape_env=env)
        for seed, sizes in enumerate([hints, *others]):
            args = make(torch.Generator().manual_seed(seed + 1), sizes)
            compare_with_eager(compiled, fn, *args, grads=training)
    assert len(compiled.programs) == 1
    program = compiled.programs[0]
    assert program.shape_env is not None and (program.backward is not None) == training


def test_forward_and_backward_graphs_record_the_shape_env_and_survive_serialization() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule) -> Callable[..., Any]:
        graphs.append(gm)
        return ptc_spec.loads(ptc_spec.dumps(gm))

    fn, make, dims, hints, others = MODELS["gpt_block"]
    metas, env = symbolic_metas(make(torch.Generator().manual_seed(0), hints), dims)
    compiled = aot(fn, metas, keep, keep, shape_env=env, config=Config(check_boundaries=True))
    forward, backward = graphs
    for gm in graphs:
        recorded = shape_env_of(gm)
        assert recorded is not None and {s.name for s in recorded.symbols} == {"s0", "s1"}
        ptc_spec.check(gm, "aten")
    # The backward reads its sizes from its own inputs, never from a forward input it lacks.
    backward_inputs = {n for n in backward.graph.nodes if n.op == "placeholder"}
    assert all(n.args[0] in backward_inputs for n in backward.graph.nodes if n.target is torch.ops.aten.sym_size.int)
    assert len(forward.graph.find_nodes(op="placeholder")) == len(metas)
    for seed, sizes in enumerate(others):
        compare_with_eager(compiled, fn, *make(torch.Generator().manual_seed(seed), sizes), grads=True)


def test_a_symbolic_aten_graph_file_compiles_and_runs_at_other_sizes() -> None:
    # A graph file with symbolic sizes (as a producer hands it over) is the whole input:
    # metadata, symbols and guards come from the file.
    env = SymbolEnv()
    x = dynamic_meta(TensorMeta.of((6, 10), requires_grad=True), [0, 1], env)
    w = TensorMeta.of((10,), requires_grad=True)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b).softmax(-1).view(a.shape[0] * a.shape[1]).cumsum(0)

    gm = ptc_spec.loads(ptc_spec.dumps(ptc_spec.trace(fn, x, w, shape_env=env)))
    assert shape_env_of(gm) is not None
    # Example tensors (as a backend receives them) stand for one admitted size: the graph's
    # own symbolic metadata is what gets compiled.
    examples = [torch.randn(6, 10, requires_grad=True), torch.randn(10, requires_grad=True)]
    for given in (None, examples):
        compiled = aot(gm, given, config=Config(check_boundaries=True))
        for rows, cols in [(6, 10), (3, 10), (9, 10)]:
            a, b = torch.randn(rows, cols, requires_grad=True), torch.randn(cols, requires_grad=True)
            compare_with_eager(compiled, fn, a, b, grads=True)
        assert len(compiled.programs) == 1


def test_a_branch_on_a_size_is_a_guard_and_a_call_outside_it_compiles_again() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] > 4 else x - 1

    metas, env = symbolic_metas([torch.randn(8, 3)], {0: [0]})
    compiled = aot(fn, metas, shape_env=env)
    program = compiled.programs[0]
    assert program.shape_env is not None and sympy.Gt(sympy.Symbol("s0", integer=True, positive=True), 4) in program.shape_env.guards
    for n in (5, 9, 6):
        compare_with_eager(compiled, fn, torch.randn(n, 3))
    assert len(compiled.programs) == 1
    for n in (3, 2, 4):
        compare_with_eager(compiled, fn, torch.randn(n, 3))
    assert len(compiled.programs) == 2
    second = compiled.programs[1].shape_env
    assert second is not None and any(isinstance(g, sympy.Le) for g in second.guards)
    assert env.guards == (sympy.Ge(env.symbols[0], 2),), "tracing must not add guards to the caller's SymbolEnv"


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_outputs_that_view_inputs_are_rebuilt_from_the_actual_sizes(training: bool) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]:
        flat = x.view(x.shape[0] * x.shape[1])
        y = x * 2
        return flat, x[1:].t(), y.view(-1, 2)[: x.shape[0]], x.shape[0] * 3, y.unflatten(0, (1, x.shape[0]))

    def base(rows: int, cols: int) -> torch.Tensor:
        # A non-leaf (x.view of a leaf is an ordinary view then), so its views may be returned.
        return (torch.randn(rows, cols, requires_grad=training) * 1).clone()

    metas, env = symbolic_metas([base(6, 4)], {0: [0, 1]})
    compiled = aot(fn, metas, shape_env=env)
    for rows, cols in [(6, 4), (3, 8), (7, 6)]:
        out = compare_with_eager(compiled, fn, base(rows, cols), grads=training)
        fresh = base(rows, cols)
        flat, sliced, _, size, _ = compiled(fresh)
        assert flat._base is fresh and sliced._base is fresh and size == rows * 3
    assert len(compiled.programs) == 1 and out[3] == 21


def test_input_mutations_through_symbolic_views_are_copied_back() -> None:
    def fn(x: torch.Tensor, buf: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        buf[: x.shape[0]].mul_(2)
        x.add_(1)
        return (x * w).sum(1) + buf.sum()

    metas, env = symbolic_metas([torch.randn(5, 3), torch.randn(9, 3), torch.randn(3, requires_grad=True)], {0: [0], 1: [0]})
    compiled = aot(fn, metas, shape_env=env)
    assert compiled.programs[0].mutated_inputs == (0, 1)
    for rows, extra in [(5, 9), (2, 4), (7, 11)]:
        compare_with_eager(compiled, fn, torch.randn(rows, 3), torch.randn(extra, 3), torch.randn(3, requires_grad=True), grads=True)
    assert len(compiled.programs) == 1


def test_backward_gets_sizes_it_needs_but_no_input_carries() -> None:
    # The backward of sum() expands a scalar gradient to x's shape; only the primal x knows
    # those sizes, so it is saved (a reference, no copy) for them.
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum() * 2, (y * 3).mean()

    metas, env = symbolic_metas([torch.randn(4, 6, requires_grad=True), torch.randn(5, requires_grad=True)], {0: [0, 1], 1: [0]})
    compiled = aot(fn, metas, shape_env=env)
    for shape, n in [((4, 6), 5), ((3, 9), 2), ((8, 2), 13)]:
        compare_with_eager(compiled, fn, torch.randn(*shape, requires_grad=True), torch.randn(n, requires_grad=True), grads=True)
    # Only the first output differentiated: the other's tangent is zeros of this call's shape.
    x, y = torch.randn(3, 7, requires_grad=True), torch.randn(9, requires_grad=True)
    compiled(x, y)[0].backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full((3, 7), 2.0)) and y.grad is None
    assert len(compiled.programs) == 1


def test_zeros_for_undifferentiated_outputs_take_the_call_sizes() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.exp(), x.sin()

    metas, env = symbolic_metas([torch.randn(4, 6, requires_grad=True)], {0: [0, 1]})
    compiled = aot(fn, metas, shape_env=env)
    x = torch.randn(5, 3, requires_grad=True)
    compiled(x)[1].sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_a_layout_seen_before_skips_the_signature_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[int] = []
    original = Signature.matches

    def counting(self: Signature, training: bool, args: Sequence[Any]) -> bool:
        checks.append(1)
        return original(self, training, args)

    monkeypatch.setattr(Signature, "matches", counting)
    metas, env = symbolic_metas([torch.randn(8, 16)] + _mlp_inputs(torch.Generator().manual_seed(0), {"b": 8})[1:], {0: [0]})
    with torch.no_grad():
        compiled = aot(mlp, metas, shape_env=env)
        args = _mlp_inputs(torch.Generator().manual_seed(1), {"b": 5})
        for _ in range(3):
            compiled(*args)
    assert len(checks) == 1


def test_symbolic_example_inputs_need_their_shape_env() -> None:
    metas, _ = symbolic_metas([torch.randn(8, 3)], {0: [0]})
    with pytest.raises(Exception, match="no SymbolEnv was given"):
        aot(lambda x: x + 1, metas)


def test_partition_byte_costs_use_the_hints() -> None:
    from ptc_aot import functionalize, partition, trace_program

    fn, make, dims, hints, _ = MODELS["gpt_block"]
    args = make(torch.Generator().manual_seed(0), hints)
    metas, env = symbolic_metas(args, dims)
    split = partition(functionalize(trace_program(fn, metas, joint=True, shape_env=env).gm), len(metas), "min_cut")
    static = partition(functionalize(trace_program(fn, [TensorMeta.from_tensor(a) for a in args], joint=True).gm), len(args), "min_cut")
    assert split.saved_bytes == static.saved_bytes and split.baseline_bytes == static.baseline_bytes


def test_guards_a_compiler_adds_are_checked_before_its_program_runs() -> None:
    # A compiler that decides on a size records the guard in the graph it returns; a call
    # outside it must not run that program.
    def narrowing(gm: torch.fx.GraphModule) -> Callable[..., Any]:
        env = shape_env_of(gm)
        assert env is not None
        env.guard_bool(sympy.Lt(env.symbols[0], 10))
        ptc_spec.record_shape_env(gm, env)
        return gm

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    metas, env = symbolic_metas([torch.randn(6, 3)], {0: [0]})
    with torch.no_grad():
        compiled = aot(fn, metas, narrowing, shape_env=env)
        compare_with_eager(compiled, fn, torch.randn(7, 3))
        assert len(compiled.programs) == 1
        compare_with_eager(compiled, fn, torch.randn(12, 3))
    assert len(compiled.programs) == 2
