"""Index simplification: reshapes that round-trip through more dims leave plain affine indices."""

from __future__ import annotations

import sympy
import torch
from conftest import check

from ptc_inductor.indexing import floordiv, mod, simplify_with_ranges, xvar

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
