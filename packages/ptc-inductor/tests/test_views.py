"""Views as index remapping, cat, padding, gathers and slice scatters, compared with eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import check

aten = torch.ops.aten


def test_views_compose_without_copies_and_match_eager() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, generator=g)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = aten.permute.default(x, [2, 0, 1])
        v = aten.view.default(x, [24, 5])
        s = aten.slice.Tensor(x, 1, 1, 5, 2)
        sel = aten.select.int(x, 2, -1)
        u = aten.unsqueeze.default(sel, 1)
        e = aten.expand.default(u, [4, 3, 6])
        sq = aten.squeeze.dims(u, [1])
        a = aten.as_strided.default(x, [5, 4], [1, 30], 2)
        f = aten.unfold.default(x, 1, 3, 2)
        al = aten.alias.default(x)
        return (
            aten.mul.Tensor(p, 2.0),
            aten.add.Tensor(v, 1.0),
            aten.neg.default(s),
            aten.exp.default(e),
            aten.sub.Tensor(sq, 1.0),
            aten.mul.Tensor(a, 3.0),
            aten.mul.Tensor(f, 1.5),
            aten.clone.default(al),
            aten.view.default(aten.clone.default(aten.permute.default(x, [1, 0, 2]), memory_format=torch.contiguous_format), [6, 20]),
            aten.sum.dim_IntList(aten.view.default(aten.mul.Tensor(x, x), [5, 24]), [1]),
        )

    check(fn, x)


def test_view_outputs_alias_inputs_like_eager() -> None:
    x = torch.randn(3, 8)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten.permute.default(x, [1, 0]), aten.slice.Tensor(x, 1, 2, 6)

    compiled = check(fn, x)
    out = compiled(x)
    assert out[0].data_ptr() == x.data_ptr()
    assert out[1].data_ptr() == x[:, 2:].data_ptr()


def test_reshape_of_noncontiguous_value_remaps_indices() -> None:
    x = torch.randn(6, 4).t()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return aten.view.default(aten.clone.default(x, memory_format=torch.contiguous_format), [2, 12])

    check(fn, x)


def test_cat_and_constant_pad_match_eager() -> None:
    g = torch.Generator().manual_seed(1)
    a, b, c = torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g), torch.randn(5, 3, generator=g).t()
    ints = torch.randint(0, 9, (3, 2), generator=g)

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, ints: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.cat.default([a, b, c], 1),
            aten.cat.default([a, aten.mul.Tensor(a, 2.0)], 0),
            aten.cat.default([b, ints], 1),
            aten.constant_pad_nd.default(a, [1, 2, 0, 1], 0.5),
            aten.constant_pad_nd.default(a, [-1, 1]),
            aten.constant_pad_nd.default(ints, [2, 0, 1, 1], 7),
        )

    check(fn, a, b, c, ints)


def test_gathers_and_slice_scatters_match_eager() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 6, generator=g)
    idx = torch.randint(-4, 4, (4,), generator=g)
    gidx = torch.randint(0, 6, (5, 3), generator=g)
    emb = torch.randn(10, 4, generator=g)
    tok = torch.randint(0, 10, (2, 3), generator=g)
    src = torch.randn(5, 2, generator=g)
    row = torch.randn(6, generator=g)

    def fn(x: torch.Tensor, idx: torch.Tensor, gidx: torch.Tensor, emb: torch.Tensor, tok: torch.Tensor, src: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.index_select.default(x, 0, aten.abs.default(idx)),
            aten.gather.default(x, 1, gidx),
            aten.index.Tensor(emb, [tok]),
            aten.index.Tensor(x, [None, gidx]),
            aten.index.Tensor(x, [idx, aten.slice.Tensor(idx, 0, 0, 4)]),
            aten.slice_scatter.default(x, src, 1, 2, 6, 2),
            aten.select_scatter.default(x, row, 0, 3),
        )

    check(fn, x, idx, gidx, emb, tok, src, row)


def test_creation_ops_match_eager() -> None:
    x = torch.randn(3, 4)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.add.Tensor(x, aten.full.default([3, 4], 2.5, dtype=torch.float32, device=torch.device("cpu"))),
            aten.arange.start_step(2, 20, 3, dtype=torch.int64, device=torch.device("cpu")),
            aten.arange.start_step(0.5, 3.0, 0.25, dtype=torch.float32, device=torch.device("cpu")),
            aten.mul.Tensor(x, aten.scalar_tensor.default(3.0, dtype=torch.float32, device=torch.device("cpu"))),
            aten.full.default([2, 2], True, dtype=torch.bool, device=torch.device("cpu")),
        )

    check(fn, x)


# Views over zero-size and size-1 dims (unfold's and adaptive pooling's reshapes of empty
# batches divided by a zero size), of an input buffer and of a lazy value, with eager's strides.
EMPTY_AND_SIZE_ONE_VIEWS: list[tuple[str, Any, tuple[int, ...]]] = [
    ("view-of-empty-input", lambda x: aten.view.default(x, [0, 3, 2]), (2, 0, 3)),
    ("view-of-empty-permuted", lambda x: aten.view.default(aten.permute.default(x, [1, 0]), [0, 1, 3]), (0, 3)),
    ("view-of-empty-lazy", lambda x: aten.view.default(aten.exp.default(x), [0, 3, 2]), (2, 0, 3)),
    ("sum-of-empty-view", lambda x: aten.sum.dim_IntList(aten.view.default(x, [3, 0]), [1]), (0, 3)),
    ("view-of-empty-slice", lambda x: aten.view.default(aten.slice.Tensor(x, 1, 2, 2), [0, 3]), (3, 4)),
    ("view-of-empty-expand", lambda x: aten.view.default(aten.expand.default(x, [0, 3]), [3, 0]), (1, 3)),
    ("view-with-size-one-dims", lambda x: aten.view.default(aten.permute.default(x, [1, 0, 2]), [1, 6]), (2, 1, 3)),
    ("view-of-size-one-dims", lambda x: aten.view.default(aten.permute.default(x, [2, 1, 0]), [3, 1, 1]), (1, 1, 3)),
    ("unsqueeze-inside", lambda x: aten.unsqueeze.default(aten.permute.default(x, [1, 0]), 1), (3, 4)),
    ("unsqueeze-front", lambda x: aten.unsqueeze.default(x, 0), (3, 4)),
]


def _index_by_0_dim(x: torch.Tensor) -> torch.Tensor:
    positions = aten.arange.start_step(0, 5, 1, dtype=torch.int64, device=torch.device("cpu"))
    return aten.index.Tensor(x, [aten.select.int(positions, 0, 2)])


@pytest.mark.parametrize(("name", "fn", "shape"), EMPTY_AND_SIZE_ONE_VIEWS, ids=[c[0] for c in EMPTY_AND_SIZE_ONE_VIEWS])
def test_views_over_empty_and_size_one_dims_match_eager(name: str, fn: Any, shape: tuple[int, ...]) -> None:
    check(fn, torch.randn(shape))


def test_indexing_by_a_0_dim_tensor_gives_a_0_dim_result() -> None:
    check(_index_by_0_dim, torch.randn(5))
