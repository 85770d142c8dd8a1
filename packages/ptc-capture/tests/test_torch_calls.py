"""Calls of torch functions and Tensor methods in forms other than ``torch.f(tensor)`` and ``tensor.m()``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _unbound_methods(x, y):
    z = torch.Tensor.mul(x, 2)
    torch.Tensor.add_(z, y)
    return torch.Tensor.sum(z, dim=1), z


def test_unbound_tensor_method_is_the_bound_call():
    backend = CountingBackend()
    compare_with_eager(
        ptc_capture.optimize(backend, fullgraph=True)(_unbound_methods),
        _unbound_methods,
        torch.randn(3, 4),
        torch.randn(3, 4),
    )
    assert backend.ops() == ["mul", "add_", "sum"]


@pytest.mark.parametrize("method", [torch.Tensor.cauchy_, torch.Tensor.uniform_, torch.Tensor.exponential_])
def test_unbound_random_in_place_method_matches_eager(method):
    def fn(x):
        return method(x) * 2

    def seeded(run):
        def call(x):
            torch.manual_seed(0)
            return run(x)

        return call

    backend = CountingBackend()
    compare_with_eager(seeded(ptc_capture.optimize(backend, fullgraph=True)(fn)), seeded(fn), torch.empty(5, 3))
    assert backend.ops()[0] == method.__name__


class _Manhattan(torch.nn.Module):
    def forward(self, a, b):
        return (a - b).abs().sum(-1)


_MANHATTAN = _Manhattan()


def _with_module_distance(a, p, n):
    return F.triplet_margin_with_distance_loss(a, p, n, distance_function=_MANHATTAN, swap=True)


def _with_function_distance(a, p, n):
    return F.triplet_margin_with_distance_loss(a, p, n, distance_function=lambda u, v: (u - v).pow(2).sum(-1))


@pytest.mark.parametrize("fn", [_with_module_distance, _with_function_distance], ids=["module", "function"])
def test_torch_python_function_taking_a_callable_is_traced_through(fn):
    backend = CountingBackend()
    a, p, n = torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 6)
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(fn), fn, a, p, n)
    assert "triplet_margin_with_distance_loss" not in backend.ops()


def _broadcast_shapes(x, y):
    shape = torch.broadcast_shapes(x.shape, y.shape, (1, 1))
    return x.expand(shape) + y, shape


def test_broadcast_shapes_folds_at_trace_time():
    backend = CountingBackend()
    compare_with_eager(
        ptc_capture.optimize(backend, fullgraph=True)(_broadcast_shapes),
        _broadcast_shapes,
        torch.randn(3, 1),
        torch.randn(4),
    )
    assert backend.ops() == ["expand", "add"]


def _parts(z, x):
    return z.real * 2, z.imag + 1, x.real + 1


def test_real_and_imag_attributes_are_graph_ops():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_parts)
    compare_with_eager(compiled, _parts, torch.randn(3, 4, dtype=torch.complex64), torch.randn(3))
    assert backend.count == 1


@pytest.mark.skipif(not hasattr(F, "linear_cross_entropy"), reason="torch has no F.linear_cross_entropy")
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_chunked_linear_cross_entropy_is_one_graph(reduction):
    # Its options are a frozen slotted dataclass resolved against a dict keyed by
    # (device type, dtype), then replaced; the chunked kernels are torch.library custom ops.
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    options = LinearCrossEntropyOptions(allow_retain_graph=True, batch_chunk_size=2)

    def fn(x, w, t):
        return F.linear_cross_entropy(x, w, t, reduction=reduction, options=options)

    backend = CountingBackend()
    x, w, t = torch.randn(8, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True), torch.randint(0, 4, (8,))
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(fn), fn, x, w, t, grads=True)
    assert backend.count == 1


def _as_tensor_of_tensors(x, index):
    same = torch.as_tensor(index, device=index.device)  # transformers' Tapas IndexMap
    wider = torch.as_tensor(x, dtype=torch.float64)
    return same * 2, wider, same is index, torch.as_tensor(x) is x, torch.as_tensor([1.0, 2.0]) + x[:2]


def test_as_tensor_of_a_tensor_is_that_tensor_or_its_conversion_in_one_graph():
    # Its meta run copied a meta tensor to the CPU and failed: the call ran after the graph and
    # every use of its result broke the graph.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_as_tensor_of_tensors)
    compare_with_eager(compiled, _as_tensor_of_tensors, torch.randn(3), torch.arange(3))
    assert backend.count == 1


def _chunked(x, window):
    # Longformer's sizes: torch.div of Python ints is a 0-d tensor whose value the sizes need.
    chunks = torch.div(x.size(1), window * 2, rounding_mode="trunc")
    y = x.view(x.size(0), chunks, window * 2)[:, : chunks - 1]
    count = torch.div(x.size(1), window, rounding_mode="trunc") - 1
    z = y.new_zeros((x.size(0), count + 1, window))
    steps = int((count * 2).item()) + int(chunks)
    return y * 2, z + steps, count, chunks.dtype


@pytest.mark.parametrize("window", [2, 4])
def test_sizes_computed_as_tensors_of_python_numbers_are_one_graph(window):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_chunked)
    for _ in range(2):
        compare_with_eager(compiled, _chunked, torch.randn(2, 16), window)
    assert backend.count == 1
    report = ptc_capture.explain(_chunked)(torch.randn(2, 16), window)
    assert report.graph_break_count == 0, str(report)


def test_tensors_of_python_numbers_follow_new_numbers_on_later_calls():
    compiled = ptc_capture.optimize(CountingBackend())(_chunked)
    for window in (2, 4, 8, 2):
        compare_with_eager(compiled, _chunked, torch.randn(2, 16), window)


def _written_after(x):
    t = torch.div(8, 2, rounding_mode="trunc")
    t.add_(2)
    return x.view(int(t), -1), t * 2


def _written_through_view(x):
    t = torch.div(8, 2, rounding_mode="trunc")
    t.view(1).mul_(2)
    return x.view(t.item(), -1)


@pytest.mark.parametrize("fn", [_written_after, _written_through_view])
def test_tensor_of_python_numbers_written_in_place_gives_its_new_value(fn):
    # The trace's kept value is stale after any write; the sizes must be the written ones.
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    compare_with_eager(compiled, fn, torch.randn(24))


@torch.jit.script
def _scripted_bucket(positions: torch.Tensor, buckets: int) -> torch.Tensor:
    sign = torch.sign(positions)
    return sign * torch.clamp(positions.abs(), max=buckets) + (buckets // 2)


def _calls_scripted(x):
    positions = torch.arange(x.size(-1)) - 3
    return x * _scripted_bucket(positions, 4)


def test_torch_jit_script_function_is_traced_through_in_one_graph():
    # DeBERTa's position buckets are torch.jit.script functions; eager runs TorchScript's build
    # of the same Python code.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_calls_scripted)
    compare_with_eager(compiled, _calls_scripted, torch.randn(2, 7))
    assert backend.count == 1


def test_tensors_of_python_numbers_over_dynamic_sizes_give_eager_results():
    # With the sequence length symbolic, torch.div(x.size(1), ...) has no single value: the
    # trace must not keep one (a break is allowed, a stale size is not).
    compiled = ptc_capture.optimize(CountingBackend(), dynamic=True)(_chunked)
    for length in (16, 24, 32):
        compare_with_eager(compiled, _chunked, torch.randn(2, length), 2)
