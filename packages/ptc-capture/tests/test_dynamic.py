"""Dynamic shapes: symbolic input sizes, automatic dynamic, mark_dynamic/mark_static, size guards.

Every test compares with eager at sizes other than the first one captured, and counts the
graphs the (eager) counting backend was given.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.cache import cache_of
from ptc_capture.guards import Source
from ptc_spec import META_KEY, SHAPE_ENV_KEY, TensorMeta, shape_env_of
from ptc_spec.testing import assert_same, compare_with_eager

pytestmark = needs_hook


def _sym_sizes(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.sym_size.int)


def _entries(fn):
    return [e for e in cache_of(fn.__code__).entries if e.capture.graph is not None or e.capture.runner is not None]


# -- a small GPT block -------------------------------------------------------------------------


class _Attention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, block: int = 64) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class _Block(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.pos = nn.Embedding(64, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        T = x.shape[1]
        assert T <= self.pos.num_embeddings, f"sequence of {T} is too long"
        x = x + self.pos(torch.arange(T, device=x.device))
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


@pytest.mark.parametrize(("dynamic", "graphs"), [(None, 2), (True, 1)])
def test_gpt_block_over_sixteen_sequence_lengths(dynamic, graphs):
    torch.manual_seed(0)
    model = _Block().eval()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=dynamic)(model)
    with torch.no_grad():
        for length in range(3, 19):
            compare_with_eager(compiled, model, torch.randn(2, length, 32))
    assert backend.count == graphs
    last = backend.graphs[-1]
    assert _sym_sizes(last) >= 1
    env = shape_env_of(last)
    assert env is not None and env.symbols


def test_gpt_block_graph_carries_symbolic_metadata_and_real_examples():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    model = _Block().eval()
    compiled = ptc_capture.optimize(backend, dynamic=True)(model)
    with torch.no_grad():
        compiled(torch.randn(2, 5, 32))
    gm, examples = seen[0]
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in examples)
    x_meta = next(iter(gm.graph.nodes)).meta[META_KEY]
    assert isinstance(x_meta, TensorMeta) and x_meta.is_symbolic
    assert SHAPE_ENV_KEY in gm.meta
    # Parameters and buffers stay static even with dynamic=True.
    weights = [n.meta[META_KEY] for n in gm.graph.nodes if n.op == "placeholder"][1:]
    assert weights and not any(m.is_symbolic for m in weights)


# -- a conv net over batch sizes ---------------------------------------------------------------


def test_conv_net_over_batch_sizes_compiles_twice():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).eval()  # fmt: skip
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(net)
    with torch.no_grad():
        for batch in (2, 3, 5, 8, 13):
            compare_with_eager(compiled, net, torch.randn(batch, 3, 16, 16))
    assert backend.count == 2


# -- branches on sizes -------------------------------------------------------------------------


def _branch_on_size(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_branch_on_size_guards_the_side_taken_and_recompiles_for_the_other(caplog):
    caplog.set_level(logging.DEBUG, logger="ptc.capture.recompiles")
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_branch_on_size)
    for n in (6, 7, 9, 12):
        compare_with_eager(compiled, _branch_on_size, torch.randn(n, 3))
    assert backend.count == 2
    env = _entries(_branch_on_size)[-1].capture.shape_env
    assert any(str(g) == "s0 > 4" for g in env.guards)
    for n in (3, 2):
        compare_with_eager(compiled, _branch_on_size, torch.randn(n, 3))
    assert backend.count == 3
    assert "guard s0 > 4 failed with s0 = 3 (s0 is x.size(0))" in caplog.text
    assert "size of x dim 0 changed 6 -> 7" in caplog.text
    # Both sides stay cached.
    compare_with_eager(compiled, _branch_on_size, torch.randn(10, 3))
    compare_with_eager(compiled, _branch_on_size, torch.randn(4, 3))
    assert backend.count == 3


def _loop_over_size(x):
    out = x
    for _ in range(x.shape[0]):
        out = out + 1
    return out


def test_range_over_a_size_specializes_it():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_loop_over_size)
    for n in (3, 4, 3):
        compare_with_eager(compiled, _loop_over_size, torch.randn(n, 2))
    assert backend.count == 2
    env = _entries(_loop_over_size)[0].capture.shape_env
    assert any(str(g) == "Eq(s0, 3)" for g in env.guards)


# -- several dims ------------------------------------------------------------------------------


def _two_dims(x, y):
    return x.sum(1, keepdim=True) * y.mean(0) + x[:, :1]


def test_two_independent_dynamic_dims_share_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_two_dims)
    for n, m in ((4, 6), (7, 6), (4, 11), (9, 3)):
        compare_with_eager(compiled, _two_dims, torch.randn(n, 5), torch.randn(2, m))
    assert backend.count == 1
    env = shape_env_of(backend.graphs[0])
    assert env is not None and len(env.symbols) == 4  # every dim of size >= 2 (n, 5, 2, m)
    assert not env.replacements


def _broadcast(x, bias):
    return x * bias + bias.sum()


def test_broadcasting_with_a_size_one_input():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_broadcast)
    bias = torch.randn(1, 8)
    for n in (3, 5, 9):
        compare_with_eager(compiled, _broadcast, torch.randn(n, 8), bias)
    assert backend.count == 2
    # A dynamic dim never takes size 1: that is its own (static) entry.
    compare_with_eager(compiled, _broadcast, torch.randn(1, 8), bias)
    assert backend.count == 3
    compare_with_eager(compiled, _broadcast, torch.randn(1, 8), torch.randn(5, 8))
    compare_with_eager(compiled, _broadcast, torch.randn(6, 8), torch.randn(6, 8))


def _elementwise(x, y):
    return x + y


def test_equal_sizes_become_one_symbol():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_elementwise)
    compare_with_eager(compiled, _elementwise, torch.randn(4, 3), torch.randn(4, 3))
    compare_with_eager(compiled, _elementwise, torch.randn(7, 2), torch.randn(7, 2))
    assert backend.count == 1
    env = shape_env_of(backend.graphs[0])
    assert env is not None and env.replacements
    compare_with_eager(compiled, _elementwise, torch.randn(7, 2), torch.randn(1, 2))
    assert backend.count == 2


# -- the dynamic= policy, mark_dynamic and mark_static -------------------------------------------


def _scale(x):
    return x * x.shape[0]


def test_dynamic_false_is_always_static(caplog):
    caplog.set_level(logging.DEBUG, logger="ptc.capture.recompiles")
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=False)(_scale)
    for n in (2, 3, 4, 5):
        compare_with_eager(compiled, _scale, torch.randn(n, 16))
    assert backend.count == 4
    assert all(_sym_sizes(g) == 0 and SHAPE_ENV_KEY not in g.meta for g in backend.graphs)
    assert "size of x dim 0 changed 2 -> 3" in caplog.text


def test_mark_dynamic_is_honoured_by_the_next_capture():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=False)(_scale)
    x = torch.randn(4, 16)
    ptc_capture.mark_dynamic(x, 0)
    torch.testing.assert_close(compiled(x), _scale(x))  # compare_with_eager's copies carry no marks
    for n in (3, 7, 12):
        compare_with_eager(compiled, _scale, torch.randn(n, 16))
    assert backend.count == 1
    assert _sym_sizes(backend.graphs[0]) == 1


def test_mark_dynamic_range_is_guarded():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=False)(_scale)
    x = torch.randn(4, 16)
    ptc_capture.mark_dynamic(x, 0, min=3, max=8)
    torch.testing.assert_close(compiled(x), _scale(x))
    compare_with_eager(compiled, _scale, torch.randn(8, 16))
    assert backend.count == 1
    compare_with_eager(compiled, _scale, torch.randn(9, 16))
    assert backend.count == 2


def test_mark_static_wins_over_dynamic_true():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_two_dims)
    x, y = torch.randn(4, 5), torch.randn(2, 6)
    ptc_capture.mark_static(x, 0)
    torch.testing.assert_close(compiled(x, y), _two_dims(x, y))
    compare_with_eager(compiled, _two_dims, torch.randn(4, 5), torch.randn(2, 9))
    assert backend.count == 1
    compare_with_eager(compiled, _two_dims, torch.randn(5, 5), torch.randn(2, 9))
    assert backend.count == 2


def test_mark_dynamic_of_a_dim_the_code_specializes_raises():
    compiled = ptc_capture.optimize(CountingBackend())(_loop_over_size)
    x = torch.randn(4, 2)
    ptc_capture.mark_dynamic(x, 0)
    with pytest.raises(ptc_capture.ShapeConstraintError, match=r"x dim 0 was marked dynamic .* specialized it to 4"):
        compiled(x)


def test_mark_dynamic_of_a_size_one_dim_raises():
    compiled = ptc_capture.optimize(CountingBackend())(_scale)
    x = torch.randn(1, 2)
    ptc_capture.mark_dynamic(x, 0)
    with pytest.raises(ptc_capture.ShapeConstraintError, match="0 or 1"):
        compiled(x)


def test_automatic_dynamic_is_remembered_per_code_object_and_reset_forgets_it():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_scale)
    compiled(torch.randn(3, 4))
    compiled(torch.randn(5, 4))
    assert cache_of(_scale.__code__).frame_sizes[Source("local", "x")] == (None, 4)
    ptc_capture.reset()
    compiled(torch.randn(6, 4))
    assert _sym_sizes(backend.graphs[-1]) == 0


# -- sizes as op arguments -----------------------------------------------------------------------


def _views(x):
    b, t, c = x.shape
    y = x.reshape(b * t, c).view(b, -1, c // 2, 2)
    z = y.flatten(2)[:, : t // 2 + 1]
    return z.permute(0, 2, 1).reshape(b, c, -1), x.new_zeros(b, t).expand(2, -1, -1)


def _cat_split_pad(x):
    n = x.size(1)
    first, second = x.split([n - 2, 2], dim=1)
    halves = torch.chunk(x, 2, dim=0)
    padded = F.pad(second, (0, 0, n, max(n, 3)))
    return torch.cat([first, x, second], dim=1), torch.cat(halves, 1), padded, torch.stack([x, x]).sum(0)


def _factories(x):
    n = len(x)
    m = x.numel() // n
    ramp = torch.arange(n, dtype=x.dtype) / n
    grid = torch.ones(n, m, dtype=x.dtype).cumsum(1) * float(m)
    full = torch.full((n, 1), math.floor(n / 3) + int(n / 2), dtype=x.dtype)
    return x.view(n, m) * ramp[:, None] + grid + full


def _indexing(x):
    n = x.shape[0]
    y = x.clone()
    y[: n // 2] = 0
    return y[1:], x[-n // 2 :], x[::2], x[n - 1], x.narrow(0, 1, n - 2)


@pytest.mark.parametrize("fn", [_views, _cat_split_pad, _factories, _indexing], ids=lambda f: f.__name__)
def test_sizes_reaching_ops_are_recomputed_by_the_graph(fn):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(fn)
    for shape in ((4, 6, 8), (6, 10, 8), (8, 4, 8)):
        compare_with_eager(compiled, fn, torch.randn(*shape))
    assert backend.count == 1
    assert _sym_sizes(backend.graphs[0]) >= 1


# -- sizes leaving the graph -------------------------------------------------------------------


class _Record:
    pass


RECORD = _Record()


def _sizes_out(x):
    n, m = x.shape
    RECORD.rows = n * 2
    RECORD.ratio = m / n
    return x * 2, n, m - 1, x.numel() / 4, x.size(), len(x) > 5, max(n, m), [n // 3], float(m), int(m / n)


def test_sizes_returned_and_stored_are_rebuilt_from_the_actual_sizes():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_sizes_out)
    for shape in ((3, 4), (7, 2), (12, 5)):
        x = torch.randn(*shape)
        compare_with_eager(compiled, _sizes_out, x)
        compiled(x)
        assert (RECORD.rows, RECORD.ratio) == (shape[0] * 2, shape[1] / shape[0])
    # len(x) > 5 is returned, not decided: a SymBool the runner computes, so no guard.
    assert backend.count == 1


def _size_only(x):
    return x.shape[0] * x.shape[1] + 1


def test_a_frame_computing_only_sizes_is_correct():
    compiled = ptc_capture.optimize(CountingBackend(), dynamic=True)(_size_only)
    for shape in ((3, 4), (5, 6)):
        assert compiled(torch.randn(*shape)) == _size_only(torch.randn(*shape))


# -- graph breaks ------------------------------------------------------------------------------


@ptc_capture.disable
def _opaque(value):
    return value


def _break_with_sizes(x):
    n = x.shape[1]
    half = n // 2
    y = x[:, :half] * n
    _opaque(y)
    return y.sum(1) + half, n, y.shape[1]


def test_graph_break_carries_symbolic_locals_as_their_values():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_break_with_sizes)
    for n in (4, 6, 8, 10, 7, 12):
        compare_with_eager(compiled, _break_with_sizes, torch.randn(3, n))
    # The frame and its resume function each compile twice (static, then dynamic): the sizes
    # carried over the break are int arguments of the resume function, symbolic from its
    # second capture on, and `half` is read in its graph from y's dim of the same size.
    assert len(_entries(_break_with_sizes)) == 2
    assert backend.count == 4
    assert all(_sym_sizes(g) >= 1 for g in backend.graphs[2:])


def _int_argument(x, n):
    return x * (n // 2), n + 1, x.shape[0] > n


def test_int_arguments_become_symbolic_once_they_change():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_int_argument)
    for n in (2, 3, 5, 8):
        compare_with_eager(compiled, _int_argument, torch.randn(5, 2), n)
    # n // 2 is a graph argument without a tensor dim of its value: the graph specializes it
    # (guarded) while the returned n + 1 stays symbolic.
    assert backend.count == 4
    env = _entries(_int_argument)[-1].capture.shape_env
    assert env is not None and [str(g) for g in env.guards] == ["s0 >= 2", "Eq(s0, 8)"]


def _int_size(x, n):
    return x.view(n, -1).sum(0) + n


def test_int_argument_equal_to_a_dynamic_dim_is_read_from_it():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_int_size)
    for n in (3, 6, 7):
        compare_with_eager(compiled, _int_size, torch.randn(n, 4), n)
    assert backend.count == 1
    compare_with_eager(compiled, _int_size, torch.randn(6, 4), 3)
    assert backend.count == 2


# -- dtypes, layouts, autograd, autocast -------------------------------------------------------


def _norm_scale(x):
    b, t = x.shape[0], x.shape[-1]
    return F.layer_norm(x, (t,)) * math.sqrt(t) + x.mean(0, keepdim=True) / b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_dtypes(dtype):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_norm_scale)
    for shape in ((3, 8), (5, 12), (2, 6)):
        compare_with_eager(compiled, _norm_scale, torch.randn(*shape, dtype=dtype))
    assert backend.count == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda n: torch.randn(n, 6).t(),
        lambda n: torch.randn(2, 3, n, n + 1).to(memory_format=torch.channels_last),
        lambda n: torch.randn(n, 12)[:, ::2],
    ],
    ids=["transposed", "channels_last", "strided_slice"],
)
def test_input_layouts(make):
    def fn(x):
        return x.sum(0) * x.shape[-1] + 1

    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(fn)
    for n in (3, 5, 9):
        x = make(n)  # called directly: compare_with_eager's copies would be contiguous
        assert_same(compiled(x), fn(x))
    dense = make(3).stride()[-1] != 2
    # A dense layout's strides follow its symbolic sizes; a strided slice stays static.
    assert backend.count == (1 if dense else 3)


def _train_step(x, w):
    return (x.view(-1, x.shape[-1]) @ w).tanh().reshape(x.shape[0], -1)


def test_gradients_flow_through_symbolic_graphs():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_train_step)
    for b, t in ((2, 3), (5, 4), (3, 7)):
        x = torch.randn(b, t, 8, requires_grad=True)
        compare_with_eager(compiled, _train_step, x, torch.randn(8, 4, requires_grad=True), grads=True)
    assert backend.count == 1


def _autocast_matmul(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y.float().view(x.shape[0], -1, 2).sum(-1)


def test_autocast_regions_with_symbolic_sizes():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, dynamic=True)(_autocast_matmul)
    for n in (4, 6, 9):
        compare_with_eager(compiled, _autocast_matmul, torch.randn(n, 8), torch.randn(8, 6))
    assert backend.count == 1


# -- explain and guards --------------------------------------------------------------------------


def test_explain_lists_the_shape_guards():
    def fn(x):
        return x.view(x.shape[0] // 2, -1)

    x = torch.randn(8, 3)
    ptc_capture.mark_dynamic(x, 0)
    report = ptc_capture.explain(fn)(x)
    text = str(report)
    assert "SHAPE_ENV: s0 >= 2 and " in text
    assert "size=[s0, 3]" in text
