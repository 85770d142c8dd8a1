"""TensorMeta: layouts, symbolic sizes, meta tensors and examples."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ptc_spec import TensorMeta, contiguous_strides, size_symbol


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(3, 4),
        lambda: torch.randn(3, 4).t(),
        lambda: torch.randn(2, 3, 4)[:, 1:, ::2],
        lambda: torch.randn(5)[2:],
        lambda: torch.randn(1, 3).expand(4, 3),
        lambda: torch.zeros(0, 3),
        lambda: torch.tensor(2.5),
        lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        lambda: torch.randint(0, 5, (3,)),
        lambda: torch.randn(3, requires_grad=True),
    ],
)
def test_from_tensor_and_back_keeps_the_layout(make: object) -> None:
    t = make()  # type: ignore[operator]
    meta = TensorMeta.from_tensor(t)
    m = meta.to_meta_tensor()
    assert (tuple(m.shape), m.stride(), m.storage_offset(), m.dtype) == (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)
    assert m.device.type == "meta" and m.requires_grad == t.requires_grad
    ex = meta.example(seed=3)
    assert (tuple(ex.shape), ex.stride(), ex.storage_offset(), ex.dtype) == (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)
    assert ex.requires_grad == t.requires_grad and ex.is_leaf


def test_contiguous_strides_match_eager() -> None:
    for shape in [(2, 3, 4), (1,), (), (4, 1, 3), (0, 5)]:
        assert contiguous_strides(shape) == torch.empty(shape).stride()


def test_examples_are_seeded_and_typed() -> None:
    meta = TensorMeta.of((64,), torch.int64)
    a, b, c = meta.example(seed=1), meta.example(seed=1), meta.example(seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert int(a.min()) >= -8 and int(a.max()) < 8
    assert TensorMeta.of((8,), torch.bool).example().dtype == torch.bool
    assert TensorMeta.of((8,), torch.bfloat16).example().dtype == torch.bfloat16


def test_symbolic_sizes() -> None:
    s0, s1 = size_symbol("s0"), size_symbol("s1")
    meta = TensorMeta.of((s0, 3, s1))
    assert meta.is_symbolic and meta.symbols == {s0, s1}
    assert meta.stride == (3 * s1, s1, 1)
    assert meta.numel({s0: 2, s1: 5}) == 30
    assert meta.example({s0: 2, s1: 5}).shape == (2, 3, 5)
    with pytest.raises(ValueError, match=r"size s0 needs hints for s0: pass hints"):
        meta.to_meta_tensor()
    assert TensorMeta.of((s0 - s0 + 4,)).shape == (4,)


def test_metadata_is_frozen_and_validated() -> None:
    meta = TensorMeta.of((2, 3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.dtype = torch.float64  # type: ignore[misc]
    assert meta.replace(dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="differ in rank"):
        TensorMeta((2, 3), (1,), torch.float32, torch.device("cpu"))
    with pytest.raises(TypeError, match="torch.dtype"):
        TensorMeta((2,), (1,), "float32", torch.device("cpu"))  # type: ignore[arg-type]


def test_contiguity() -> None:
    assert TensorMeta.of((2, 3)).is_contiguous()
    assert not TensorMeta.from_tensor(torch.randn(3, 4).t()).is_contiguous()
    assert TensorMeta.from_tensor(torch.randn(1, 4).expand(1, 4)).is_contiguous()
