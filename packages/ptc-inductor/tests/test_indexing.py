"""Index simplification: reshapes that round-trip through more dims leave plain affine indices."""

from __future__ import annotations

import itertools
import random

import pytest
import sympy
import torch
from conftest import check

from ptc_inductor.indexing import floordiv, merge_runs, mod, run_symbol, simplify_with_ranges, view_index, xvar

aten = torch.ops.aten


def test_unravel_then_relinearize_gives_the_flat_index() -> None:
    x0, x1 = xvar(0), xvar(1)
    # [512, 1024] read through a [4, 128, 1024] view: the leading dim is (1024*x0 + x1) // 131072.
    index = x1 + 1024 * mod(x0, 128) + 131072 * floordiv(1024 * x0 + x1, 131072)
    assert simplify_with_ranges(index, {x0: 512, x1: 1024}) == 1024 * x0 + x1


def test_floor_drops_terms_below_a_common_divisor_only_when_they_are_bounded() -> None:
    x0, x1 = xvar(0), xvar(1)
    assert simplify_with_ranges(floordiv(1024 * x0 + x1, 131072), {x0: 512, x1: 1024}) == floordiv(x0, 128)
    # x1 may reach 1024 here, which carries into x0's place: the division must stay.
    kept = simplify_with_ranges(floordiv(1024 * x0 + x1, 131072), {x0: 512, x1: 2048})
    assert kept.has(sympy.floor) and kept.has(x1)


def test_a_chunk_of_aligned_rows_keeps_its_row_under_a_modulus() -> None:
    # Partial sums over chunks of 32 tokens of a (8, 256) grid of rows: token 32*x0 + r0 is
    # row (32*x0 + r0) % 256 of batch (32*x0 + r0) // 256, which is the flat token again.
    x0, r0 = xvar(0), sympy.Symbol("r0", integer=True, nonnegative=True)
    ranges = {x0: 64, r0: 32}
    assert simplify_with_ranges(mod(32 * x0 + r0, 256), ranges) == 32 * mod(x0, 8) + r0
    index = 100 * mod(32 * x0 + r0, 256) + 25600 * floordiv(32 * x0 + r0, 256)
    assert simplify_with_ranges(index, ranges) == 3200 * x0 + 100 * r0
    # r0 may reach 32 here and carry into x0's place: the modulus must stay, and stay right.
    wide = {x0: 64, r0: 40}
    kept = simplify_with_ranges(mod(32 * x0 + r0, 256), wide)
    assert kept.has(sympy.Mod)
    for a, b in itertools.product(range(64), range(40)):
        assert kept.subs({x0: a, r0: b}) == (32 * a + b) % 256


def test_pointwise_between_reshapes_loads_contiguously() -> None:
    # A transformer MLP: matmul, reshape to [batch, seq, dim], activation, reshape back for the
    # next matmul. The activation's loads must be affine in the loop variables, or the inner
    # loop cannot vectorize (a division per element made GELU 7x slower).
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = aten.view.default(aten.mm.default(x, w), [4, 32, 96])
        a = aten.mul.Tensor(h, aten.sigmoid.default(h))
        return aten.mm.default(aten.view.default(a, [128, 96]), aten.permute.default(w, [1, 0]))

    g = torch.Generator().manual_seed(5)
    compiled = check(fn, torch.randn(128, 64, generator=g), torch.randn(64, 96, generator=g))
    (kernel,) = compiled.schedule.kernels
    for node in kernel.nodes:
        for _, index in compiled.schedule.accesses[node.name].loads:
            assert not index.has(sympy.floor, sympy.Mod), index


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_of_head_merging_views_reads_each_part_along_its_own_dims(dtype: torch.dtype) -> None:
    # Attention's backward: the q, k and v gradients, [batch, heads, seq, dim] each, are
    # transposed to [batch, seq, heads, dim], merged to [batch, seq, heads*dim] and
    # concatenated. Each part is read at the channel index minus its offset; a view that
    # linearized the whole index made the seq index a modulus of that offset sum (GPT-2's
    # kernel ran 4.6x slower than torch.compile's). Only the channel may be split.
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        parts = [aten.view.default(aten.clone.default(aten.permute.default(t, [0, 2, 1, 3]), memory_format=torch.contiguous_format), [2, 6, 12]) for t in (q, k, v)]
        return aten.cat.default(parts, 2)

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g).to(dtype) for _ in range(3))
    compiled = check(fn, q, k, v)
    (kernel,) = compiled.schedule.kernels
    loads = [index for node in kernel.nodes for _, index in compiled.schedule.accesses[node.name].loads]
    assert len(loads) == 3
    for index in loads:
        for part in index.atoms(sympy.floor, sympy.Mod):
            assert part.free_symbols == {xvar(2)}, index


def _shape_pairs() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    pairs = [((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((24,), (2, 3, 4)), ((2, 1, 3), (6,)), ((6,), (1, 2, 1, 3, 1)),
             ((4, 6), (3, 8)), ((2, 12, 5), (4, 6, 5)), ((), (1,)), ((1,), ()), ((3, 4, 1), (12,)), ((2, 3), (3, 2))]  # fmt: skip
    rng = random.Random(0)
    for _ in range(40):
        old = tuple(rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(1, 4)))
        factors = [f for n in old for f in ((2, n // 2) if n == 4 and rng.random() < 0.5 else (n,))]
        rng.shuffle(factors)
        pairs.append((old, tuple(factors)))
    return pairs


@pytest.mark.parametrize("old,new", _shape_pairs())
def test_view_index_reads_what_a_reshape_reads(old: tuple[int, ...], new: tuple[int, ...]) -> None:
    base = torch.arange(max(1, int(torch.tensor(old).prod()))).reshape(old)
    viewed = base.reshape(new)
    exprs = view_index([xvar(i) for i in range(len(new))], list(new), list(old))
    for at in itertools.product(*[range(n) for n in new]):
        values = {xvar(i): p for i, p in enumerate(at)}
        assert base[tuple(int(sympy.sympify(e).subs(values)) for e in exprs)] == viewed[at]


def test_contiguous_runs_of_loop_variables_merge_into_one() -> None:
    x0, x1, x2 = xvar(0), xvar(1), xvar(2)
    dims = (8, 1024, 3072)
    # A contiguous [8, 1024, 3072] access is its flat index; a broadcast over the batch keeps
    # the inner two as one run, offset included.
    assert merge_runs(3145728 * x0 + 3072 * x1 + x2, dims) == (run_symbol(0, 2), ((0, 2),))
    assert merge_runs(3072 * x1 + x2 + 5, dims) == (run_symbol(1, 2) + 5, ((1, 2),))
    # Scaled runs keep their scale (a column of a wider row).
    assert merge_runs(2 * (3072 * x1 + x2), dims) == (2 * run_symbol(1, 2), ((1, 2),))


@pytest.mark.parametrize("index", ["3072*x0 + x2", "x0 + 8*x1 + 8192*x2", "1000*x0 + 3*x1 + x2"])
def test_accesses_that_are_not_contiguous_runs_are_left_alone(index: str) -> None:
    # A broadcast dim between two others, a transpose, and a coefficient off by the dim's size.
    names = {f"x{i}": xvar(i) for i in range(3)}
    expr = sympy.sympify(index, locals=names)
    assert merge_runs(expr, (8, 1024, 3072)) == (expr, ())


def test_a_run_is_the_flat_index_of_its_variables() -> None:
    # Every point of the loop nest gives the same address merged as unmerged.
    dims = (3, 4, 5, 6)
    strides = (0, 30, 6, 1)  # broadcast over the first dim
    index = sum(s * xvar(i) for i, s in enumerate(strides))
    merged, runs = merge_runs(index, dims)
    assert runs == ((1, 3),)
    for flat, point in enumerate(itertools.product(*(range(d) for d in dims))):
        run = flat % (4 * 5 * 6)
        assert merged.subs({run_symbol(1, 3): run}) == sum(s * p for s, p in zip(strides, point))
