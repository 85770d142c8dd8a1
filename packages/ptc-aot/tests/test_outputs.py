"""Graph outputs in every arrangement equal eager's: values, dtypes, and which outputs alias what."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from ptc_aot import aot
from ptc_spec.testing import compare_with_eager


def _sort(x: torch.Tensor) -> Any:
    return torch.sort(x, 1)


def _topk(x: torch.Tensor) -> Any:
    return torch.topk(x, 2)


def _max_dim(x: torch.Tensor) -> Any:
    return torch.max(x, 1)


def _max_pool_indices(x: torch.Tensor) -> Any:
    return F.max_pool2d(x.reshape(1, 1, 4, 6), 2, return_indices=True)


def _var_mean(x: torch.Tensor) -> Any:
    return torch.var_mean(x, 1)


def _std_mean(x: torch.Tensor) -> Any:
    return torch.std_mean(x, 0)


def _aminmax(x: torch.Tensor) -> Any:
    return torch.aminmax(x, dim=1)


def _sort_then_use_indices(x: torch.Tensor) -> Any:
    values, indices = torch.sort(x, 1, descending=True)
    return indices, values * 2, values


def _same_twice(x: torch.Tensor) -> Any:
    y = x * 2
    return y, y


def _output_and_its_views(x: torch.Tensor) -> Any:
    y = x + 1
    return y, y.t(), y[1:], y.view(-1)


def _views_only(x: torch.Tensor) -> Any:
    y = x.exp()
    return y[0], y[1:]


def _input_unchanged(x: torch.Tensor) -> Any:
    return x, x * 3


def _input_as_views(x: torch.Tensor) -> Any:
    return x.t(), x[:, 1], x.sum()


def _none_and_python_values(x: torch.Tensor) -> Any:
    return None, x.sin(), 3, "tag", (2.5, None)


def _dict_output(x: torch.Tensor) -> Any:
    values, indices = x.max(0)
    return {"values": values, "indices": indices, "both": [values, indices]}


def _mutated_input_returned(x: torch.Tensor, buf: torch.Tensor) -> Any:
    buf.add_(x)
    return buf, buf[0], x * 2


def _split_outputs(x: torch.Tensor) -> Any:
    return x.cos().split(2, dim=1)


def _unbind_and_sort(x: torch.Tensor) -> Any:
    a, b, c, d = (x * 2).unbind(0)
    return torch.sort(a), b, c.sort(descending=True).indices, d


def _fresh_tensor_lists(x: torch.Tensor) -> Any:
    # Ops returning a list of fresh tensors (not views), used whole and in part.
    pieces = torch.unsafe_split(x * 2, 2, dim=1)
    rows = torch.unbind_copy(x.cos(), 0)
    return pieces, rows[1], torch.split_with_sizes_copy(x, [1, 5], dim=1)


CASES: dict[str, Callable[..., Any]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _sort, _topk, _max_dim, _max_pool_indices, _var_mean, _std_mean, _aminmax, _sort_then_use_indices,
        _same_twice, _output_and_its_views, _views_only, _input_unchanged, _input_as_views,
        _none_and_python_values, _dict_output, _split_outputs, _unbind_and_sort, _fresh_tensor_lists,
    )
}  # fmt: skip


def _aliasing(outputs: Any, inputs: list[Any]) -> list[tuple[int, int, bool, bool]]:
    """For each pair of tensor leaves (inputs first): (i, j, same object, same storage)."""
    leaves = [t for t in (*inputs, *pytree.tree_leaves(outputs)) if isinstance(t, torch.Tensor)]
    found = []
    for i, a in enumerate(leaves):
        for j in range(i + 1, len(leaves)):
            b = leaves[j]
            same_storage = a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.numel() > 0
            found.append((i, j, a is b, same_storage))
    return found


def _check(fn: Callable[..., Any], args: list[torch.Tensor], grads: bool) -> None:
    compiled = aot(fn, args)
    compare_with_eager(compiled, fn, *args, grads=grads)
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    compiled_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    expected = fn(*eager_args)
    actual = compiled(*compiled_args)
    assert _aliasing(actual, compiled_args) == _aliasing(expected, eager_args)


@pytest.mark.parametrize("grads", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", list(CASES))
def test_outputs_match_eager_in_values_dtypes_and_aliasing(name: str, grads: bool) -> None:
    x = torch.randn(4, 6, requires_grad=grads)
    _check(CASES[name], [x], grads)


def test_an_output_aliasing_a_mutated_input_sees_the_new_values() -> None:
    x, buf = torch.randn(3, 4), torch.randn(3, 4)
    _check(_mutated_input_returned, [x, buf], grads=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["sort", "var_mean", "aminmax", "max_pool_indices"])
def test_multi_output_ops_in_reduced_precision_match_eager(name: str, dtype: torch.dtype) -> None:
    x = torch.randn(4, 6).to(dtype)
    _check(CASES[name], [x], grads=False)
