"""Symbolic graphs decompose into symbolic core graphs: no guard added, eager's values at every admitted size.

Each case traces a function (forward, or forward and backward) over inputs whose sizes are
named symbols, decomposes it, and checks that the decomposition recorded no guard beyond
the trace's own (no decomposition specialized a dynamic size), then runs the one decomposed
graph at the hint sizes and at other sizes (odd ones, smaller and larger) against eager.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

import ptc_spec
from ptc_decomp import FALLBACKS_KEY, Config, decompose
from ptc_spec import SymbolEnv, TensorMeta, shape_env_of
from ptc_spec.testing import compare_with_eager

Dim = int | str


@dataclass(frozen=True)
class In:
    """One input: its shape (ints, or names of size symbols), dtype and kind of values."""

    shape: tuple[Dim, ...]
    dtype: torch.dtype = torch.float32
    grad: bool = False
    kind: str = "randn"  # "randn", "positive", "index:<high>" (int64 in [0, high)), "bool"

    @property
    def value_dtype(self) -> torch.dtype:
        """The dtype of the values: int64 indices, bools, else ``dtype``."""
        return torch.int64 if self.kind.startswith("index:") else torch.bool if self.kind == "bool" else self.dtype


@dataclass(frozen=True)
class Case:
    fn: Callable[..., Any]
    inputs: tuple[In, ...]
    hints: Mapping[str, int]
    sizes: tuple[Mapping[str, int], ...]
    backward: bool = False
    range_guards: bool = False
    """The decomposition may add range guards (never an equality: no size is specialized);
    the case's comment says why."""


def _resolve(shape: Sequence[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(values[d] if isinstance(d, str) else d for d in shape)


def _metas(case: Case, env: SymbolEnv) -> list[TensorMeta]:
    symbols = {name: env.create_symbol(hint, name=name) for name, hint in case.hints.items()}
    metas = []
    for spec in case.inputs:
        shape = tuple(symbols[d] if isinstance(d, str) else d for d in spec.shape)
        metas.append(TensorMeta.of(shape, spec.value_dtype, requires_grad=spec.grad))
    return metas


def _value(spec: In, values: Mapping[str, int], seed: int) -> torch.Tensor:
    shape = _resolve(spec.shape, values)
    gen = torch.Generator().manual_seed(seed)
    if spec.kind.startswith("index:"):
        high = int(spec.kind.split(":")[1])
        return torch.randint(0, high, shape, generator=gen)
    if spec.kind == "bool":
        return torch.randint(0, 2, shape, generator=gen).bool()
    t = torch.randn(shape, generator=gen)
    if spec.kind == "positive":
        t = t.abs() + 0.5
    return t.to(spec.dtype).requires_grad_(spec.grad)


def _with_backward(fn: Callable[..., Any]) -> Callable[..., Any]:
    def step(*args: torch.Tensor) -> Any:
        out = fn(*args)
        wrt = [a for a in args if a.requires_grad]
        # Squares make every gradient depend on the forward values, not only on shapes.
        loss = (out.float() ** 2).sum() / 2
        return out, tuple(torch.autograd.grad(loss, wrt))

    return step


def _prepare(case: Case) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, Callable[..., Any]]:
    env = SymbolEnv()
    fn = _with_backward(case.fn) if case.backward else case.fn
    gm = ptc_spec.trace(fn, *_metas(case, env), shape_env=env)
    return gm, decompose(gm, config=Config(check_boundaries=True)), fn


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) / 4.0
    n = q.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def _views(x: torch.Tensor) -> torch.Tensor:
    b, s, d = x.shape
    y = x.view(b * s, d).t().contiguous().view(d, b, s).permute(1, 2, 0)
    z = y.reshape(b, -1).unflatten(1, (s, d)).flatten(0, 1)
    return z.unsqueeze(0).expand(2, -1, -1).narrow(2, 1, d - 1).movedim(0, -1).squeeze(-1) + x.diagonal(0, 1, 2).sum()


def _cat_split_pad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    joined = torch.cat([x, y], 0)
    a, b = joined.split([2, 3], dim=1)
    c = torch.stack([a, b[:, 1:]], 0).sum(0)
    padded = F.pad(a, (1, 2, 0, 1)).sum() + F.pad(b, (1, 1), mode="reflect").sum() + F.pad(b, (2, 2), mode="replicate").sum()
    return padded + c.roll(3, 0).flip(1).repeat(2, 1).sum(0)


def _indexing(x: torch.Tensor, idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    picked = x[idx] + x.index_select(0, idx)
    gathered = x.gather(1, idx.unsqueeze(1).expand(-1, x.shape[1]) % x.shape[1])
    scattered = torch.zeros_like(x).scatter_add(0, idx.unsqueeze(1).expand(-1, x.shape[1]), gathered)
    written = x.index_put((idx,), picked, accumulate=True)
    emb = F.embedding(idx, table)
    return scattered.sum(0) + written.masked_fill(written > 1, 0.5).sum(0) + emb.sum(0)[: x.shape[1]] + torch.where(x > 0, x, -x).sum(0)


def _reductions(x: torch.Tensor) -> torch.Tensor:
    # (std and norm are checked forward only: their backward traces an in-place masked_fill_,
    # which only functionalization, ptc-aot's job, removes.)
    total = x.sum(1) + x.mean((0, 1), keepdim=True).squeeze(0) + x.var(1, correction=1) + x.detach().std(1)
    extremes = x.amax(1) + x.amin(1, keepdim=True).squeeze(1) + x.argmax(1).float() + torch.logsumexp(x, 1)
    return total + extremes + x.detach().norm(dim=1) + x.prod(1) + x.sum()


def _matmuls(x: torch.Tensor, w: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batched = x @ w + torch.baddbmm(x, x, w.expand(x.shape[0], -1, -1))
    flat = F.linear(x.flatten(0, 1), w.t(), v).view(x.shape[0], x.shape[1], 6)
    return batched + flat + torch.bmm(x, x.transpose(1, 2)).sum(-1, keepdim=True) + (m @ v).sum() + torch.outer(v, v).sum()


def _losses(logits: torch.Tensor, target: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    probs = logits.sigmoid()
    terms = [
        F.cross_entropy(logits, target),
        F.nll_loss(logits.log_softmax(-1), target, reduction="sum"),
        F.mse_loss(logits, y),
        F.smooth_l1_loss(logits, y),
        F.huber_loss(logits, y, delta=0.5),
        F.binary_cross_entropy(probs, y.sigmoid()),
        # (forward only: its backward traces an in-place div_, which functionalization removes)
        F.binary_cross_entropy_with_logits(logits.detach(), y.sigmoid()),
        F.kl_div(logits.log_softmax(-1), y.softmax(-1), reduction="batchmean"),
    ]
    return torch.stack(terms).sum()


def _conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = F.conv2d(x, w, b, padding=1) + F.conv2d(x, w, None, stride=1, padding=1, dilation=1)
    z = F.conv2d(y, w.transpose(0, 1)[:, :3].contiguous(), stride=2)
    return z.sum((2, 3)).unsqueeze(-1) + F.conv1d(x.flatten(2), w[:, :, 0], padding=2).mean(-1, keepdim=True)


def _batch_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    train = F.batch_norm(x, None, None, w, b, training=True)
    return train + F.batch_norm(x, mean, var, w, b, training=False)


def _group_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.group_norm(x, 3, w, b) + F.instance_norm(x)


def _resampling(x: torch.Tensor) -> torch.Tensor:
    pooled = F.adaptive_avg_pool2d(x, (3, 2)).sum() + F.interpolate(x, scale_factor=0.5) + F.adaptive_avg_pool2d(x, 1)
    return pooled + F.interpolate(x, scale_factor=2, mode="bilinear").mean((2, 3), keepdim=True)


def _windows(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2) + F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)[:, :, :-1, :-1]


def _softmaxes(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1) + x.log_softmax(0) * 0.5 + F.gelu(x) * F.silu(x).softmax(1)


N_D = {"n": 6, "d": 10}
CASES: dict[str, Case] = {
    "softmax": Case(_softmaxes, (In(("n", "d"), grad=True),), N_D, ({"n": 3, "d": 7}, {"n": 11, "d": 4}), backward=True),
    "softmax_bf16": Case(_softmaxes, (In(("n", "d"), torch.bfloat16),), N_D, ({"n": 3, "d": 7},)),
    "layer_norm": Case(
        _layer_norm, (In(("n", "s", 16), grad=True), In((16,), grad=True), In((16,), grad=True)),
        {"n": 2, "s": 10}, ({"n": 3, "s": 7}, {"n": 5, "s": 2}), backward=True,
    ),
    "layer_norm_dynamic_width": Case(lambda x: F.layer_norm(x, (x.shape[-1],)), (In(("n", "d"), grad=True),), N_D, ({"n": 3, "d": 7},), backward=True),
    "batch_norm": Case(
        _batch_norm,
        (In(("n", 4, "h", "w"), grad=True), In((4,), grad=True), In((4,), grad=True), In((4,)), In((4,), kind="positive")),
        {"n": 2, "h": 6, "w": 10}, ({"n": 3, "h": 5, "w": 7},), backward=True,
    ),
    "group_norm": Case(_group_norm, (In(("n", 6, "l"), grad=True), In((6,), grad=True), In((6,), grad=True)), {"n": 2, "l": 10}, ({"n": 3, "l": 7},), backward=True),
    "reductions": Case(_reductions, (In(("a", "b", "c"), grad=True),), {"a": 4, "b": 6, "c": 8}, ({"a": 3, "b": 5, "c": 7}, {"a": 9, "b": 3, "c": 2}), backward=True),
    "views": Case(_views, (In(("b", "s", "s"), grad=True),), {"b": 2, "s": 6}, ({"b": 3, "s": 5}, {"b": 7, "s": 3}), backward=True),
    "cat_split_pad": Case(_cat_split_pad, (In(("n", 5), grad=True), In(("m", 5), grad=True)), {"n": 4, "m": 6}, ({"n": 3, "m": 7}, {"n": 9, "m": 2}), backward=True),
    "indexing": Case(
        _indexing, (In(("n", "d"), grad=True), In(("n",), kind="index:2"), In((8, "e"), grad=True)),
        {"n": 6, "d": 4, "e": 12}, ({"n": 3, "d": 7, "e": 8}, {"n": 2, "d": 3, "e": 3}), backward=True,
    ),
    "matmul": Case(
        _matmuls, (In(("b", "s", 6), grad=True), In((6, 6), grad=True), In(("r", 6), grad=True), In((6,), grad=True)),
        {"b": 2, "s": 10, "r": 4}, ({"b": 3, "s": 7, "r": 5},), backward=True,
    ),
    "losses": Case(
        _losses, (In(("n", "c"), grad=True), In(("n",), kind="index:2"), In(("n", "c"))),
        {"n": 6, "c": 10}, ({"n": 3, "c": 7}, {"n": 13, "c": 2}), backward=True,
    ),
    "conv": Case(
        _conv, (In(("n", 3, "h", "w"), grad=True), In((3, 3, 3, 3), grad=True), In((3,), grad=True)),
        {"n": 2, "h": 8, "w": 10}, ({"n": 3, "h": 7, "w": 9}, {"n": 2, "h": 5, "w": 14}), backward=True,
    ),
    "attention": Case(
        _attention, (In(("b", 2, "t", 8), grad=True), In(("b", 2, "t", 8), grad=True), In(("b", 2, "t", 8), grad=True)),
        {"b": 2, "t": 10}, ({"b": 3, "t": 7}, {"b": 2, "t": 3}), backward=True,
    ),
    "sdpa": Case(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (In(("b", 2, "t", 8), grad=True), In(("b", 2, "t", 8), grad=True), In(("b", 2, "t", 8), grad=True)),
        {"b": 2, "t": 10}, ({"b": 3, "t": 7},), backward=True,
    ),
    "resampling": Case(_resampling, (In(("n", 3, "h", "w"), grad=True),), {"n": 2, "h": 12, "w": 16}, ({"n": 3, "h": 10, "w": 14}, {"n": 2, "h": 7, "w": 5}), backward=True),
    # Window pooling folds sizes through floor(h/2): the core view/reduction meta kernels guard
    # that those pooled sizes are not 1, and slicing by them guards bounds the SymbolEnv cannot
    # prove from floor (2*floor(h/2) <= h + 1). Every such guard holds at every size >= 4.
    "pooling": Case(_windows, (In(("n", 3, "h", "w"), grad=True),), {"n": 2, "h": 12, "w": 16}, ({"n": 3, "h": 10, "w": 14}, {"n": 2, "h": 7, "w": 5}), backward=True, range_guards=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_graph_decomposes_without_new_guards(name: str) -> None:
    case = CASES[name]
    gm, out, _ = _prepare(case)
    traced, decomposed = shape_env_of(gm), shape_env_of(out)
    assert traced is not None and decomposed is not None
    added = [g for g in decomposed.guards if g not in traced.guards]
    if case.range_guards:
        assert not [g for g in added if isinstance(g, sympy.Eq)], f"the decomposition specialized: {added}"
    else:
        assert not added, f"the decomposition added guards: {added}"
    assert FALLBACKS_KEY not in out.meta
    # Size arithmetic (sym_size.int, operator) is part of the core op sets.
    ptc_spec.check(out, "core/1")


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_decomposition_matches_eager_at_every_size(name: str) -> None:
    case = CASES[name]
    _, out, fn = _prepare(case)
    env = shape_env_of(out)
    assert env is not None
    loaded = ptc_spec.roundtrip(out)
    for values in (dict(case.hints), *case.sizes):
        assert env.guards_hold(values), f"{values} is not admitted by {env.guards}"
        args = [_value(spec, values, seed) for seed, spec in enumerate(case.inputs)]
        compare_with_eager(loaded, fn, *args)


def test_a_decomposition_fast_path_on_sizes_is_taken_only_where_it_holds_everywhere() -> None:
    # adaptive_avg_pool2d reshapes when the sizes divide; on a symbolic size that would guard
    # the divisibility, so the general path runs and the graph stays valid at odd sizes.
    env = SymbolEnv()
    x = TensorMeta.of((2, 3, env.create_symbol(12), 8))
    out = decompose(ptc_spec.trace(lambda t: F.adaptive_avg_pool2d(t, (3, 2)), x, shape_env=env))
    guards = shape_env_of(out)
    assert guards is not None and not any(isinstance(g, sympy.Eq) for g in guards.guards)
    value = torch.randn(2, 3, 13, 8)
    compare_with_eager(out, lambda t: F.adaptive_avg_pool2d(t, (3, 2)), value)
