"""meta_rules: the fast answers for common ops over symbolic meta tensors equal torch's reference
kernels' answers (shapes, strides, dtypes) and never skip a guard the reference would record."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

import ptc_spec.meta_rules as meta_rules
from ptc_spec import SymbolEnv, TensorMeta, dynamic_meta, symbolic_dispatch

Spec = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]

EMB = torch.randn(10, 4, device="meta")
W16 = torch.randn(8, device="meta", dtype=torch.bfloat16)
f32, bf16, f16, i64 = torch.float32, torch.bfloat16, torch.float16, torch.int64

# (name, fn, [(shape, dims made dynamic, dtype)], answered by a rule?)
CASES: list[tuple[str, Callable[..., Any], list[Spec], bool]] = [
    ("add_broadcast", lambda a, b: a + b, [((6, 5, 8), (0, 1), f32), ((8,), (), f32)], True),
    ("mul_bf16_f32", lambda a, b: a * b, [((6, 8), (0,), bf16), ((6, 8), (0,), f32)], True),
    ("int_times_float_scalar", lambda a: a * 2.5, [((6, 3), (0,), i64)], True),
    ("fp16_plus_0dim_f32", lambda a, b: a + b, [((6, 3), (0,), f16), ((), (), f32)], True),
    ("where", lambda a, b: torch.where(a > 0, a, b), [((6, 5), (0, 1), f32), ((1, 5), (1,), f32)], True),
    ("gelu_bf16", F.gelu, [((6, 7), (0, 1), bf16)], True),
    ("scalar_from_size", lambda a: a * a.shape[0], [((6, 7), (0,), f32)], True),
    ("layer_norm", lambda a: F.layer_norm(a, (8,)), [((3, 6, 8), (0, 1), f32)], True),
    ("layer_norm_bf16_weight", lambda a: F.layer_norm(a, (8,), W16), [((3, 6, 8), (0, 1), bf16)], True),
    ("native_layer_norm_stats", lambda a: torch.ops.aten.native_layer_norm(a, [8], None, None, 1e-5), [((6, 8), (0,), f16)], True),
    ("mm", lambda a, b: a @ b, [((6, 5), (0,), f32), ((5, 3), (), f32)], True),
    ("addmm_transposed_weight", lambda x, w, b: torch.addmm(b, x, w.t()), [((6, 5), (0,), f32), ((3, 5), (), f32), ((3,), (), f32)], True),
    ("bmm", torch.bmm, [((3, 6, 5), (0, 1), f32), ((3, 5, 4), (0,), f32)], True),
    ("sum_dims", lambda a: a.sum((0, -1)), [((6, 5, 7), (0, 2), f32)], True),
    ("mean_keepdim_dtype", lambda a: a.mean(-1, keepdim=True, dtype=f32), [((6, 7), (0, 1), bf16)], True),
    ("embedding", lambda i: F.embedding(i, EMB), [((3, 6), (0, 1), i64)], True),
    ("view_infer", lambda a: a.view(-1, 5), [((6, 10), (0,), f32)], True),
    ("view_split_dim", lambda a: a.view(a.shape[0], 2, 5), [((6, 10), (0,), f32)], True),
    # The reference kernel decides these (and records its guards):
    ("broadcast_two_symbols", lambda a, b: a + b, [((6, 5), (0,), f32), ((5,), (0,), f32)], False),
    ("transposed_operand", lambda a, b: a.t() + b, [((5, 6), (1,), f32), ((6, 5), (0,), f32)], False),
    ("mm_symbol_against_constant", lambda a, b: a @ b, [((6, 5), (1,), f32), ((5, 3), (), f32)], False),
    ("view_needs_divisibility", lambda a: a.view(-1, 4), [((6, 10), (0,), f32)], False),
]


def _run(fn: Callable[..., Any], specs: list[Spec], fast: bool) -> tuple[list[TensorMeta], SymbolEnv]:
    # Dynamic dims with equal example sizes share one symbol, as the sizes of one model's
    # activations do (they derive from the same inputs).
    env = SymbolEnv()
    by_hint: dict[int, sympy.Symbol] = {}
    metas = []
    for shape, dims, dtype in specs:
        sizes = [by_hint.setdefault(n, env.create_symbol(n)) if d in dims and n not in by_hint else by_hint[n] if d in dims else n
                 for d, n in enumerate(shape)]  # fmt: skip
        metas.append(TensorMeta.of(tuple(sizes), dtype))
    tensors = [m.to_meta_tensor(env=env) for m in metas]
    context = symbolic_dispatch(env) if fast else torch._C._EnablePythonDispatcher()
    with context:
        out = fn(*tensors)
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [TensorMeta.from_tensor(t) for t in outs], env


@contextlib.contextmanager
def _counting_rules() -> Iterator[list[int]]:
    answered = [0]
    lifted, view = meta_rules._lifted, meta_rules._RULES[torch.ops.aten.view.default]

    def counted(*args: Any) -> Any:
        out = lifted(*args)
        answered[0] += out is not meta_rules._NOT_HANDLED
        return out

    def counted_view(*args: Any) -> Any:
        out = view(*args)
        answered[0] += out is not meta_rules._NOT_HANDLED
        return out

    meta_rules._lifted = counted  # type: ignore[assignment]
    meta_rules._RULES[torch.ops.aten.view.default] = counted_view
    try:
        yield answered
    finally:
        meta_rules._lifted = lifted  # type: ignore[assignment]
        meta_rules._RULES[torch.ops.aten.view.default] = view


@pytest.mark.parametrize(("name", "fn", "specs", "ruled"), CASES, ids=[c[0] for c in CASES])
def test_rules_give_the_reference_kernels_results_and_guards(name: str, fn: Callable[..., Any], specs: list[Spec], ruled: bool) -> None:
    with _counting_rules() as answered:
        fast, fast_env = _run(fn, specs, fast=True)
    reference, reference_env = _run(fn, specs, fast=False)
    assert (answered[0] > 0) == ruled
    assert len(fast) == len(reference)
    for got, want in zip(fast, reference):
        assert got.dtype == want.dtype
        assert tuple(map(sympy.sympify, got.shape)) == tuple(reference_env.simplify(sympy.sympify(s)) for s in want.shape)
        assert tuple(map(sympy.sympify, got.stride)) == tuple(reference_env.simplify(sympy.sympify(s)) for s in want.stride)
    # A rule never skips a guard: what the reference kernel guarded, the fast path guarded too
    # (or its own operands' rules proved it without one).
    missing = [g for g in reference_env.guards if g not in fast_env.guards and fast_env.statically_known(g) is not True]
    assert not missing, missing


def test_a_view_rule_result_is_a_view_of_its_operand() -> None:
    env = SymbolEnv()
    meta = dynamic_meta(TensorMeta.of((6, 10), f32), (0,), env)
    x = meta.to_meta_tensor(env=env)
    with symbolic_dispatch(env):
        y = x.view(-1, 5)
    assert y._base is x and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
