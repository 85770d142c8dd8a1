"""Functions of tensors captured through the frame hook give eager's results in the expected graphs."""

from __future__ import annotations

import math
import operator
import types

import pytest
import torch
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.capture import capture_function
from ptc_spec import META_KEY, TensorMeta, check
from ptc_spec.testing import compare_with_eager

SCALE = 3.0


def helper(a, b):
    return a * b + 1


def _arith(x, y):
    return x + y * 2 - x / 3


def _torch_fns(x, y):
    return torch.sin(x) + torch.cat([x, y], dim=0).sum(0) + F.relu(y).mean()


def _methods(x, y):
    return x.relu().view(-1).reshape(4, 3).t().contiguous() + y.T.T


def _constants_and_globals(x, y):
    return x * SCALE + math.pi + y.pow(2)


def _tuple_list(x, y):
    pair = (x, y)
    items = [x, y, x * y]
    a, b = pair
    return items[2] + a - b, len(items)


def _range_loop(x, y):
    acc = x
    for i in range(4):
        acc = acc * 0.5 + i
    return acc + y


def _inlined_call(x, y):
    return helper(x, y) + helper(y, x)


def _python_if(x, y):
    if x.shape[0] > 2 and x.dtype == torch.float32:
        return x + 1
    return y - 1


def _kwargs_call(x, y):
    return torch.sum(x, dim=1, keepdim=True) + y.mean(dim=-1, keepdim=True)


def _comprehension(x, y):
    parts = [x * i for i in range(3)]
    return sum(parts) + y


def _dict_values(x, y):
    d = {"a": x, "b": y}
    d["c"] = d["a"] * d["b"]
    return d["c"] + d.get("a")


def _enumerate_zip(x, y):
    out = x
    for i, (a, b) in enumerate(zip([x, y], [y, x])):
        out = out + a * b * i
    return out


def _fstring_and_isinstance(x, y):
    name = f"x{x.dim()}"
    if isinstance(x, torch.Tensor) and name == "x2":
        return x + y
    return x - y


def _closure_fn(x, y):
    k = 2

    def inner(t):
        return t * k

    return inner(x) + inner(y)


def _no_grad_block(x, y):
    with torch.no_grad():
        z = x * 2
    return z + y


def _slicing(x, y):
    return x[1:, :2] + y[:-1, None, 1:3].squeeze(1) + x[1:, ..., 0:2]


def _setitem(x, y):
    z = x.clone()
    z[0] = y[1]
    return z


def _inplace(x, y):
    z = x.clone()
    z += y
    z.mul_(2)
    return z


def _while_loop(x, y):
    n = 0
    while n < 3:
        x = x + y
        n += 1
    return x


def _min_max_abs(x, y):
    return x * max(2, 3) + y * min(1.5, 4) + abs(-2)


def _factory(x, y):
    return x + torch.ones(3, 4) * torch.arange(4.0)


def _unpack_star(x, y):
    first, *rest = [x, y, x]
    return first + rest[0] + rest[1]


def _operator_module(x, y):
    return operator.add(x, y) * operator.mul(2, 3)


def _size_arith(x, y):
    n, m = x.shape
    return x.reshape(n * m) + y.flatten() * x.size(0) + x.numel()


def _nested_tuple_return(x, y):
    return (x, (y, x + y)), {"k": x * 2}


CASES = [
    (_arith, 1), (_torch_fns, 1), (_methods, 1), (_constants_and_globals, 1), (_tuple_list, 1),
    (_range_loop, 1), (_inlined_call, 1), (_python_if, 1), (_kwargs_call, 1), (_comprehension, 1),
    (_dict_values, 1), (_enumerate_zip, 1), (_fstring_and_isinstance, 1), (_closure_fn, 1),
    (_no_grad_block, 1), (_slicing, 1), (_setitem, 1), (_inplace, 1), (_while_loop, 1),
    (_min_max_abs, 1), (_factory, 1), (_unpack_star, 1), (_operator_module, 1), (_size_arith, 1),
    (_nested_tuple_return, 1),
]  # fmt: skip


def _inputs(shape=(3, 4)):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


@needs_hook
@pytest.mark.parametrize("fn,graphs", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_function_matches_eager_in_expected_graphs(fn, graphs):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    compare_with_eager(compiled, fn, *_inputs())
    assert backend.count == graphs
    compare_with_eager(compiled, fn, *_inputs())
    assert backend.count == graphs, "the second call must hit the cache"


@pytest.mark.parametrize("fn,graphs", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_captured_graph_is_torch_dialect_with_metadata(fn, graphs):
    x, y = _inputs()
    capture = capture_function(fn, x, y)
    assert capture.graph is not None
    check(capture.graph, "torch")
    for node in capture.graph.graph.nodes:
        if node.op == "placeholder":
            assert isinstance(node.meta[META_KEY], TensorMeta)
    expected = fn(x.clone(), y.clone())
    from ptc_spec.testing import assert_same

    replaced = types.FunctionType(capture.replacement, fn.__globals__, fn.__name__, None, fn.__closure__)
    assert_same(replaced(x.clone(), y.clone()), expected)
