"""SymbolEnv, SymNode and symbolic meta tensors, checked against Python ints and eager shapes."""

from __future__ import annotations

import itertools
import math
import operator
import timeit
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

from ptc_spec import (
    SymbolEnv,
    SymNode,
    TensorMeta,
    UnbackedSizeError,
    ValueRange,
    dynamic_meta,
    expr_of,
    size_symbol,
    symbolic,
    symbolic_dispatch,
)


def sizes(*hints: int) -> tuple[SymbolEnv, list[sympy.Symbol], list[Any]]:
    """A fresh SymbolEnv with one symbol per hint, and torch.SymInts over them."""
    env = SymbolEnv()
    syms = [env.create_symbol(h) for h in hints]
    return env, syms, [symbolic(s, env) for s in syms]


def decisions(env: SymbolEnv) -> tuple[sympy.Basic, ...]:
    """The guards after the input-range guards every dynamic size starts with."""
    return env.guards[len(env.symbols) :]


# -- SymbolEnv -------------------------------------------------------------------------------
def test_a_dynamic_size_has_a_hint_a_range_and_a_range_guard() -> None:
    env = SymbolEnv()
    s0 = env.create_symbol(8)
    assert s0 == size_symbol("s0") and env.hints[s0] == 8
    assert env.value_range(s0) == ValueRange(2, math.inf)
    assert env.guards == (sympy.Ge(s0, 2),)
    s1 = env.create_symbol(5, name="seq", lower=1, upper=64)
    assert s1.name == "seq" and env.value_range(s1) == ValueRange(1, 64)
    # s >= 1 is true of every positive symbol, but it stays a guard: a size-0 input breaks the trace.
    assert env.guards[1:] == (sympy.Ge(s1, 1, evaluate=False), sympy.Le(s1, 64))
    assert not env.guards_hold({"s0": 8, "seq": 0}) and env.guards_hold({"s0": 8, "seq": 64})


@pytest.mark.parametrize("hint", [0, 1])
def test_sizes_0_and_1_are_never_symbolic(hint: int) -> None:
    env = SymbolEnv()
    with pytest.raises(ValueError, match="keep smaller sizes static"):
        env.create_symbol(hint)
    meta = dynamic_meta(TensorMeta.of((hint, 6)), [0, 1], env)
    assert meta.shape[0] == hint and not isinstance(meta.shape[1], int)


@pytest.mark.parametrize(("hint", "expected"), [(8, "s0 > 4"), (3, "s0 <= 4")])
def test_a_branch_on_a_size_guards_the_side_it_took(hint: int, expected: str) -> None:
    env, (s0,), (x,) = sizes(hint)
    taken = bool(x > 4)
    assert taken == (hint > 4)
    assert [str(g) for g in decisions(env)] == [expected]
    assert env.guards_hold({"s0": hint}) and not env.guards_hold({"s0": 7 if hint == 3 else 3})


@pytest.mark.parametrize(
    ("make", "value"),
    [
        (lambda a, b: sympy.Eq(a, 1), False),
        (lambda a, b: sympy.Ge(a, 1), True),
        (lambda a, b: sympy.Ne(a * b, 0), True),
        (lambda a, b: sympy.Ge(a * b, b), True),
        (lambda a, b: sympy.Lt(a - a**2, 0), True),
        (lambda a, b: sympy.Eq(sympy.Mod(1, a), 1), True),
        (lambda a, b: sympy.Eq(sympy.Max(1, a), a), True),
        (lambda a, b: sympy.And(sympy.Gt(a, 1), sympy.Gt(b, 0)), True),
        (lambda a, b: sympy.Or(sympy.Lt(a, 2), sympy.Eq(b, 0)), False),
    ],
)
def test_conditions_the_ranges_prove_record_no_guard(make: Callable[..., sympy.Basic], value: bool) -> None:
    env, (a, b), _ = sizes(7, 5)
    cond = make(a, b)
    assert env.statically_known(cond) is value
    assert env.guard_bool(cond) is value
    assert decisions(env) == ()


def test_an_equality_guard_substitutes_and_is_not_guarded_again() -> None:
    env, (s0, s1), (x, y) = sizes(6, 6)
    assert bool(x == y)
    assert decisions(env) == (sympy.Eq(s0, s1),)
    assert env.replacements == {s1: s0}
    assert env.simplify(s1 - s0) == 0 and expr_of(y * 2 - x) == s0
    assert bool(y == x) and bool(y * 3 >= x) and len(decisions(env)) == 1


def test_an_equality_to_a_multiple_keeps_integer_coefficients() -> None:
    env, (s0, s1), (x, y) = sizes(8, 4)
    assert bool(x == 2 * y)
    assert decisions(env) == (sympy.Eq(s0, 2 * s1),)
    assert env.replacements == {s0: 2 * s1}
    assert expr_of(x // 2) == s1


def test_a_substituted_symbol_bounds_the_expression_that_replaces_it() -> None:
    # Eq(s1, s0 - 3) with s1 >= 2 means s0 >= 5: a size written s0 - 3 is then provably a size
    # (>= 0), and checking that again (making a meta tensor of it) records no guard.
    env, (s0, s1), (x, y) = sizes(8, 5)
    assert bool(y == x - 3)
    assert env.replacements == {s1: s0 - 3}
    assert env.value_range(s0) == ValueRange(5, math.inf)
    assert bool(x - 3 >= 0) and bool(x != 3) and decisions(env) == (sympy.Eq(s1, s0 - 3),)


def test_a_product_of_positive_factors_compares_with_zero_without_a_guard() -> None:
    env, (s0, s1), (x, y) = sizes(2, 6)
    half = sympy.floor(s1 / 2)
    assert env.statically_known(sympy.Ge(s0 * half, half)) is True
    assert env.statically_known(sympy.Eq(s0 * half, half)) is False
    assert bool(x * (y // 2) >= y // 2) and decisions(env) == ()


def test_a_scale_factor_inside_floor_becomes_an_exact_fraction() -> None:
    # F.interpolate(scale_factor=0.5) sizes its output floor(0.5*h): kept with a float it would
    # lower to a float product (no floor), and differ from floor(h/2) written elsewhere.
    env, (s0,), (x,) = sizes(7)
    assert env.simplify(sympy.floor(sympy.Float(0.5) * s0)) == sympy.floor(s0 / 2)
    assert expr_of(torch.sym_int(x * 0.5)) == sympy.floor(s0 / 2)
    meta = TensorMeta.of((2, 3, 7, 4))
    dyn = dynamic_meta(meta, [2], env)
    with symbolic_dispatch(env):
        out = F.interpolate(dyn.to_meta_tensor(env=env), scale_factor=0.5)
    assert expr_of(out.shape[2]) == sympy.floor(dyn.shape[2] / 2)


@pytest.mark.parametrize(("size", "scale"), [(100, 0.29), (3, 1 / 3), (7, 0.3)])
def test_a_scale_that_is_no_short_binary_fraction_specializes_to_eagers_float_rounding(size: int, scale: float) -> None:
    # Eager sizes interpolate's output floor(float(h) * scale): 100 * 0.29 rounds to
    # 28.999999999999996 (28), where the exact 29/100 or the float's exact value give 29 or
    # differ elsewhere; no expression agrees at every size, so the size is fixed, with a guard.
    env = SymbolEnv()
    dyn = dynamic_meta(TensorMeta.of((1, 2, size)), [2], env)
    with symbolic_dispatch(env):
        out = F.interpolate(dyn.to_meta_tensor(env=env), scale_factor=scale)
    assert out.shape[2] == F.interpolate(torch.randn(1, 2, size), scale_factor=scale).shape[2]
    assert sympy.Eq(dyn.shape[2], size) in env.guards


def test_a_relational_guard_narrows_the_range() -> None:
    env, (s0,), (x,) = sizes(8)
    assert bool(x >= 3)
    assert env.value_range(s0) == ValueRange(3, math.inf)
    assert bool(x > 2) and bool(x != 1) and decisions(env) == (sympy.Ge(s0, 3),)
    assert bool(2 * x < 17)
    assert env.value_range(s0) == ValueRange(3, 8)


def test_a_divisibility_guard_makes_floor_division_exact() -> None:
    env, (s0,), (x,) = sizes(12)
    assert bool(x % 4 == 0)
    assert decisions(env) == (sympy.Eq(sympy.Mod(s0, 4), 0),)
    assert expr_of((x // 4) * 4) == s0
    assert bool((x // 4) * 4 == x) and len(decisions(env)) == 1


def test_an_equality_with_a_quotient_of_sizes_stays_a_guard() -> None:
    # A reshape of (s3*s4, C) to (s0, s1, C) asks whether s0 divides s3*s4, then equates s1
    # with the quotient: substituting s1 -> s3*s4/s0 put "1/s0" into sizes and strides that
    # no code generator can print (a flattened batch of logits with its flattened targets).
    env, (s0, s1, s3, s4), (a, b, c, d) = sizes(2, 3, 2, 3)
    assert bool((c * d) % a == 0)
    assert bool(b == (c * d) // a)
    assert env.replacements == {}
    assert expr_of(b * 2) == 2 * s1


def test_negated_guards_are_canonical_relations() -> None:
    env, (s0, s1), (x, y) = sizes(8, 6)
    assert not bool(x % 8 != 0)
    assert not bool(x < y)
    assert bool(x != y)
    assert decisions(env) == (sympy.Eq(sympy.Mod(s0, 8), 0), sympy.Ge(s0, s1), sympy.Ne(s0, s1))


def test_guard_int_specializes_the_size() -> None:
    env, (s0, s1), (x, y) = sizes(8, 6)
    assert int(x + 1) == 9
    assert decisions(env) == (sympy.Eq(s0, 8),)
    assert env.replacements == {s0: 8}
    assert isinstance(x * y, torch.SymInt) and expr_of(x * y) == 8 * s1
    assert env.guards_hold({"s0": 8, "s1": 3}) and not env.guards_hold({"s0": 9, "s1": 3})


def test_guards_are_deduplicated_and_kept_in_order() -> None:
    env, (s0, s1), (x, y) = sizes(8, 6)
    for _ in range(3):
        bool(x > 5)
        bool(y % 3 == 0)
        bool(x > 5)
    assert decisions(env) == (sympy.Gt(s0, 5), sympy.Eq(sympy.Mod(s1, 3), 0))


def test_guards_hold_agrees_with_the_source_and_with_sympy() -> None:
    env, (s0, s1, s2), (x, y, z) = sizes(12, 6, 7)
    bool(x == 2 * y)
    bool(z % 4 != 0)
    bool(x + z > 15)
    bool(torch.sym_max(y, z) < 9)
    bool((x // 5) >= 2)
    source = env.guards_source()
    for a, b, c in itertools.product(range(0, 20), range(0, 12), range(0, 12)):
        values = {"s0": a, "s1": b, "s2": c}
        by_sympy = all(bool(g.xreplace({s0: a, s1: b, s2: c})) for g in env.guards)
        assert env.guards_hold(values) == by_sympy == eval(source, {}, dict(values))


def test_guards_source_prints_the_given_names() -> None:
    env, _, (x, y) = sizes(8, 6)
    bool(x // 2 > y - 3)
    source = env.guards_source({"s0": "L['x'].size(0)", "s1": "L['y'].size(1)"})
    assert source == (
        "(L['x'].size(0) >= 2) and (L['y'].size(1) >= 2) and ((L['x'].size(0) // 2) > (L['y'].size(1) - 3))"
    )


def test_guard_check_of_five_guards_on_four_inputs_is_fast() -> None:
    env = SymbolEnv()
    a, b, c, d = (symbolic(env.create_symbol(h), env) for h in (8, 4, 6, 16))
    bool(a == 2 * b)
    bool(c % 4 != 0)
    bool(d > 10)
    bool(a + c > 9)
    bool(torch.sym_max(b, c) < 20)
    assert len(decisions(env)) == 5 and len(env.replacements) == 1
    values = {"s0": 8, "s1": 4, "s2": 6, "s3": 16}
    assert env.guards_hold(values) and not env.guards_hold({**values, "s2": 8})
    runs = 20000
    seconds = timeit.timeit(lambda: env.guards_hold(values), number=runs)
    print(f"guards_hold: {len(env.guards)} guards (5 decisions, 4 ranges) on 4 sizes in {seconds / runs * 1e6:.2f} us")


def test_state_round_trips_into_an_equal_environment() -> None:
    env, (s0, s1), (x, y) = sizes(12, 6)
    bool(x == 2 * y)
    bool(y % 3 == 0)
    u = env.create_unbacked_symbol()
    torch._check(symbolic(u, env) >= 2)
    copy = SymbolEnv.from_state(env.state())
    assert copy.guards == env.guards and copy.runtime_asserts == env.runtime_asserts
    assert copy.replacements == env.replacements and copy.hints == env.hints
    assert copy.simplify(sympy.floor(s1 / 3) * 3) == s1
    assert copy.guards_hold({"s0": 18, "s1": 9}) and not copy.guards_hold({"s0": 16, "s1": 8})


# -- unbacked sizes -------------------------------------------------------------------------
def test_a_decision_on_an_unbacked_size_raises_a_clear_error() -> None:
    env = SymbolEnv()
    u0 = env.create_unbacked_symbol()
    n = symbolic(u0, env)
    assert u0.name == "u0" and not env.is_backed(u0) and not n.node.has_hint()
    with pytest.raises(UnbackedSizeError, match=r"needs to know u0 > 3, but u0 is a data-dependent size.*torch._check"):
        bool(n > 3)
    with pytest.raises(UnbackedSizeError):
        int(n * 2)
    assert bool(n >= 0)  # its range proves this


def test_torch_check_on_an_unbacked_size_becomes_a_runtime_assertion() -> None:
    env = SymbolEnv()
    u0 = env.create_unbacked_symbol()
    n = symbolic(u0, env)
    torch._check(n >= 4)
    assert env.runtime_asserts == (sympy.Ge(u0, 4),) and env.value_range(u0) == ValueRange(4, math.inf)
    assert bool(n > 3) and env.guards == ()
    t = torch.empty(n, 3, device="meta")
    with symbolic_dispatch(env):
        assert [expr_of(s) for s in t.sum(0).shape] == [3]
        assert [expr_of(s) for s in t.t().contiguous().stride()] == [u0, 1]


def test_guard_or_false_answers_its_default_for_unbacked_sizes() -> None:
    env = SymbolEnv()
    n = symbolic(env.create_unbacked_symbol(), env)
    assert (n == 5).node.guard_or_false("", 0) is False
    assert (n == 5).node.guard_or_true("", 0) is True
    assert env.guards == ()


# -- SymNode --------------------------------------------------------------------------------
_BINARY: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("truediv", operator.truediv),
    ("max", torch.sym_max),
    ("min", torch.sym_min),
]


@pytest.mark.parametrize(("name", "op"), _BINARY, ids=[n for n, _ in _BINARY])
@pytest.mark.parametrize(("a", "b"), [(7, 3), (12, 5), (4, 9)])
def test_symint_arithmetic_equals_int_arithmetic_and_guards_nothing(name: str, op: Callable[..., Any], a: int, b: int) -> None:
    env, (s0, s1), (x, y) = sizes(a, b)
    for lhs, rhs, expected in ((x, y, op(a, b)), (x, 3, op(a, 3)), (11, y, op(11, b))):
        result = op(lhs, rhs)
        kind = float if isinstance(expected, float) else int
        assert isinstance(result, torch.SymFloat if kind is float else torch.SymInt)
        assert env.size_hint(expr_of(result)) == pytest.approx(expected)
        # The same expression at other sizes is the same Python computation there.
        for other_a, other_b in ((20, 6), (9, 2)):
            at_other = expr_of(result).xreplace({s0: other_a, s1: other_b})
            want = op(other_a if lhs is x else lhs, other_b if rhs is y else rhs)
            assert float(at_other) == pytest.approx(want)
    assert decisions(env) == ()


@pytest.mark.parametrize(
    ("name", "op"),
    [("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)],
)
def test_comparisons_give_symbools_that_guard_when_used(name: str, op: Callable[..., Any]) -> None:
    env, (s0, s1), (x, y) = sizes(6, 4)
    cond = op(x, y + 2)
    assert isinstance(cond, torch.SymBool) and decisions(env) == ()
    assert bool(cond) == op(6, 6)
    assert len(decisions(env)) == 1
    assert env.guards_hold({"s0": 9, "s1": 7}) and env.guards_hold({"s0": 9, "s1": 5}) != (op(9, 7) != op(6, 6))


def test_symbool_logic_and_symfloat_math() -> None:
    env, (s0, s1), (x, y) = sizes(6, 4)
    both = torch.sym_not((x > 3) & (y < 5)) | (x == y)
    assert isinstance(both, torch.SymBool) and not bool(both)
    assert env.guards_hold({"s0": 2, "s1": 3}) is False and env.guards_hold({"s0": 7, "s1": 3}) is True
    f = torch.sym_float(x) / 4
    assert isinstance(f, torch.SymFloat) and float(f) == 1.5
    assert math.floor(f) == 1 and math.ceil(x / 4) == 2
    # Reading the float's value pinned it, and with it s0 (an equality no substitution solves
    # over the float coefficient is specialized).
    assert env.replacements.get(s0) == 6 and expr_of(math.floor(x / y)) == sympy.floor(6 / s1)
    assert isinstance(math.floor(y / 3), torch.SymInt) and expr_of(math.floor(y / 3)) == sympy.floor(s1 / 3)


def test_symnode_answers_the_protocol_torch_calls() -> None:
    env, (s0,), (x,) = sizes(6)
    node = x.node
    assert isinstance(node, SymNode)
    assert (node.is_int(), node.is_float(), node.is_bool(), node.is_nested_int(), node.is_symbolic()) == (True, False, False, False, True)
    assert node.maybe_as_int() is None and node.wrap_int(3).maybe_as_int() == 3
    assert node.has_hint() and node.hint == 6 and node._hint == 6
    assert node.str() == "s0" and repr(x) == "s0"
    assert node.ge(node.wrap_int(2)).statically_known_true("", 0)
    assert not node.gt(node.wrap_int(2)).statically_known_true("", 0)
    assert decisions(env) == ()
    assert node.gt(node.wrap_int(2)).guard_bool("", 0) and len(decisions(env)) == 1


# -- symbolic meta tensors over torch's meta kernels ----------------------------------------
W = torch.randn(4, 3, 3, 3)
EMB = torch.randn(10, 4)

# (name, fn, [(shape, dims made dynamic, dtype)]): every op category a model uses.
META_CASES: list[tuple[str, Callable[..., Any], list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]]] = [
    ("pointwise_broadcast", lambda a, b: a * b + 1, [((6, 1, 5), (0, 2), torch.float32), ((4, 1), (0,), torch.float32)]),
    ("sum", lambda a: a.sum(1), [((6, 5), (0, 1), torch.float32)]),
    ("amax_keepdim", lambda a: a.amax(-1, keepdim=True), [((6, 5), (0, 1), torch.float32)]),
    ("mm", lambda a, b: a @ b, [((6, 5), (0,), torch.float32), ((5, 3), (1,), torch.float32)]),
    ("bmm", torch.bmm, [((3, 6, 5), (0, 1), torch.float32), ((3, 5, 4), (2,), torch.float32)]),
    ("view", lambda a: a.view(-1, 5), [((6, 10), (0,), torch.float32)]),
    ("reshape_transposed", lambda a: a.t().reshape(-1), [((6, 5), (0, 1), torch.float32)]),
    ("permute_contiguous", lambda a: a.permute(2, 0, 1).contiguous(), [((6, 5, 3), (0, 1), torch.float32)]),
    ("expand", lambda a: a.expand(4, -1, -1), [((1, 6, 5), (1, 2), torch.float32)]),
    ("cat", lambda a, b: torch.cat([a, b], 1), [((6, 5), (0, 1), torch.float32), ((6, 3), (1,), torch.float32)]),
    ("split", lambda a: a.split(2, 1), [((6, 7), (0, 1), torch.float32)]),
    ("pad", lambda a: F.pad(a, (1, 2, 3, 0)), [((6, 5), (0, 1), torch.float32)]),
    ("conv2d", lambda a: F.conv2d(a, W.to("meta"), stride=2, padding=1), [((2, 3, 9, 8), (0, 2, 3), torch.float32)]),
    ("softmax", lambda a: a.softmax(-1), [((6, 5), (0, 1), torch.float32)]),
    ("layer_norm", lambda a: F.layer_norm(a, (5,)), [((3, 6, 5), (0, 1), torch.float32)]),
    ("embedding", lambda i: F.embedding(i, EMB.to("meta")), [((3, 6), (0, 1), torch.int64)]),
    (
        "sdpa",
        lambda q, k: F.scaled_dot_product_attention(q, k, k, is_causal=False),
        [((2, 2, 6, 4), (0, 2), torch.float32), ((2, 2, 7, 4), (2,), torch.float32)],
    ),
]


@pytest.mark.parametrize(("name", "fn", "specs"), META_CASES, ids=[c[0] for c in META_CASES])
def test_meta_kernels_over_symbolic_sizes_give_eager_shapes_at_every_size(name: str, fn: Callable[..., Any], specs: list[Any]) -> None:
    env = SymbolEnv()
    metas = [dynamic_meta(TensorMeta.of(shape, dtype), dims, env) for shape, dims, dtype in specs]
    with symbolic_dispatch(env):
        out = fn(*(m.to_meta_tensor(env=env) for m in metas))
    results = [TensorMeta.from_tensor(t) for t in (out if isinstance(out, (tuple, list)) else [out])]
    for grow in (0, 1, 3):
        # Real inputs at other sizes (the dynamic dims grown), and the symbols' values there.
        values: dict[sympy.Symbol, int] = {}
        real = []
        for meta, (shape, dims, dtype) in zip(metas, specs):
            actual = tuple(s + grow if d in dims else s for d, s in enumerate(shape))
            values.update({sym: actual[d] for d, sym in enumerate(meta.shape) if isinstance(sym, sympy.Symbol)})
            real.append(torch.randint(0, 9, actual) if dtype == torch.int64 else torch.randn(actual))
        if not env.guards_hold({s.name: v for s, v in values.items()}):
            continue
        with torch.no_grad():
            expected = fn(*(r.to("meta") for r in real))
        for meta, eager in zip(results, expected if isinstance(expected, (tuple, list)) else [expected]):
            assert meta.concrete_shape(values) == tuple(eager.shape), (grow, meta.shape)
            if eager.is_contiguous() == meta.is_contiguous() and eager.numel() > 1:
                assert meta.concrete_stride(values) == eager.stride(), (grow, meta.stride)
            assert meta.dtype == eager.dtype
    assert all(g.free_symbols for g in env.guards)


# -- dynamic_meta ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda n, m: torch.randn(n, m),
        lambda n, m: torch.randn(m, n).t(),
        lambda n, m: torch.randn(2, 3, n, m).to(memory_format=torch.channels_last),
        lambda n, m: torch.randn(n, 1).expand(n, m),
        lambda n, m: torch.randn(1, n, m),
    ],
    ids=["contiguous", "transposed", "channels_last", "expanded", "leading_one"],
)
def test_dynamic_meta_strides_follow_the_layout_at_every_size(make: Callable[[int, int], torch.Tensor]) -> None:
    env = SymbolEnv()
    example = make(5, 7)
    meta = dynamic_meta(TensorMeta.from_tensor(example), range(example.dim()), env)
    assert meta.concrete_stride(env.hints) == example.stride()
    symbols = [s for s in meta.shape if isinstance(s, sympy.Symbol)]
    for n, m in ((3, 9), (8, 2)):
        other = make(n, m)
        values = dict(zip(symbols, [s for s, e in zip(other.shape, example.shape) if e > 1]))
        assert meta.concrete_shape(values) == tuple(other.shape)
        assert meta.concrete_stride(values) == other.stride()


def test_dynamic_meta_refuses_layouts_that_are_not_dense() -> None:
    with pytest.raises(ValueError, match="not dense"):
        dynamic_meta(TensorMeta.from_tensor(torch.randn(6, 8)[:, ::2]), [0], SymbolEnv())


def test_symbolic_meta_tensors_read_back_into_the_same_metadata() -> None:
    env = SymbolEnv()
    meta = dynamic_meta(TensorMeta.of((6, 5, 4), requires_grad=True), [0, 2], env)
    t = meta.to_meta_tensor(env=env)
    assert all(isinstance(s, torch.SymInt) for s in (t.shape[0], t.shape[2], t.stride(0), t.stride(1)))
    assert TensorMeta.from_tensor(t, device=meta.device) == meta
    with symbolic_dispatch(env):
        view = t.detach()[1:, :, ::2]
    read = TensorMeta.from_tensor(view)
    s0, s1 = env.symbols
    assert read.shape == (s0 - 1, 5, sympy.ceiling(s1 / 2)) or read.shape == (s0 - 1, 5, sympy.floor((s1 + 1) / 2))
    assert read.storage_offset == 5 * s1 and decisions(env) == ()
    with pytest.raises(ValueError, match="not symbols of this SymbolEnv"):
        TensorMeta.of((size_symbol("s9"), 2)).to_meta_tensor(env=env)


# Layouts over s0 = 4, s1 = 6: (sizes, strides) as expressions, and the eager tensor at the hints.
_LAYOUTS: list[tuple[str, Callable[[sympy.Symbol, sympy.Symbol], tuple[list[Any], list[Any]]], Callable[[], torch.Tensor]]] = [
    ("contiguous", lambda a, b: ([2, a, b, 3], [3 * a * b, 3 * b, 3, 1]), lambda: torch.empty(2, 4, 6, 3)),
    (
        "channels_last",
        lambda a, b: ([2, 3, a, b], [3 * a * b, 1, 3 * b, 3]),
        lambda: torch.empty(2, 3, 4, 6).to(memory_format=torch.channels_last),
    ),
    ("transposed", lambda a, b: ([b, a], [1, b]), lambda: torch.empty(4, 6).t()),
    ("strided_slice", lambda a, b: ([a, b], [2 * b, 2]), lambda: torch.empty(4, 12)[:, ::2]),
    ("expanded", lambda a, b: ([a, b], [0, 1]), lambda: torch.empty(1, 6).expand(4, 6)),
]


@pytest.mark.parametrize(("name", "layout", "make"), _LAYOUTS, ids=[c[0] for c in _LAYOUTS])
def test_symnode_layout_predicates_agree_with_eager(name: str, layout: Any, make: Callable[[], torch.Tensor]) -> None:
    env, (s0, s1), _ = sizes(4, 6)
    node = SymNode(s0, env, int)
    dims, steps = layout(s0, s1)
    as_nodes = [SymNode(d, env, int) for d in dims], [SymNode(s, env, int) for s in steps]
    eager = make()
    channels_last = eager.dim() == 4 and eager.is_contiguous(memory_format=torch.channels_last)
    # empty_like keeps a layout exactly when it is non-overlapping and dense.
    dense = torch.empty_like(eager).stride() == eager.stride()
    assert node.is_contiguous(*as_nodes).expr == sympy.sympify(eager.is_contiguous())
    assert node.is_channels_last_contiguous_2d(*as_nodes).expr == sympy.sympify(channels_last)
    assert node.is_non_overlapping_and_dense(*as_nodes).expr == sympy.sympify(dense)
    assert node.is_channels_last_strides_2d(*as_nodes).expr == sympy.sympify(name == "channels_last")


def test_size_terms_are_public_and_compute_what_sympy_says() -> None:
    # Consumers that emit sizes themselves (ptc-capture's guards, runners and size nodes) use the
    # one lowering of sympy to Python operations through ptc_spec's public API.
    import ptc_spec

    s0, s1 = size_symbol("s0"), size_symbol("s1")
    expr = sympy.floor(s0 / 2) * s1 + sympy.Max(s0, s1)
    term: ptc_spec.Term = ptc_spec.to_term(expr)
    source = ptc_spec.term_source(term, {"s0": "a", "s1": "b"})
    for a, b in itertools.product(range(2, 9), repeat=2):
        assert eval(source, {"max": max, "min": min}, {"a": a, "b": b}) == int(expr.subs({s0: a, s1: b}))
    assert sympy.simplify(ptc_spec.term_value(term) - expr) == 0
