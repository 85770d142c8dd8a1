"""Memory planning: buffers are freed after last use and their storage reused."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import check, trace_core

os.environ.setdefault("TRITON_INTERPRET", "1")

import ptc_inductor  # noqa: E402
from ptc_inductor.ir import ExternNode  # noqa: E402
from ptc_spec import GraphBuilder, TensorMeta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

aten = torch.ops.aten


def test_peak_intermediate_bytes_of_a_long_chain_stays_bounded() -> None:
    n, layers = 64, 12

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(layers):
            h = aten.tanh.default(aten.mm.default(h, w))
        return h

    g = torch.Generator().manual_seed(0)
    compiled = check(fn, torch.randn(n, n, generator=g), torch.randn(n, n, generator=g) / 8)
    one = n * n * 4
    plan = compiled.memory_plan
    # Each step needs its input, the extern result and the activation: never more than three.
    assert plan.peak_bytes <= 3 * one
    assert plan.reused > 0


def test_reuse_can_be_switched_off() -> None:
    import ptc_inductor

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(4):
            h = aten.tanh.default(aten.mm.default(h, w))
        return h

    gm = trace_core(fn, torch.randn(8, 8), torch.randn(8, 8))
    plan = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env(reuse_buffers=False)).memory_plan
    assert plan.reused == 0


# Four extern results freed by one kernel, then kernels that take their storage: which freed
# storage each takes is decided by the order of the kernel's read set.
_MANY_FREED = """
import torch, ptc_spec, ptc_inductor
aten = torch.ops.aten
def fn(x, w1, w2, w3, w4):
    a, b, c, d = (aten.mm.default(x, w) for w in (w1, w2, w3, w4))
    k = aten.add.Tensor(aten.add.Tensor(aten.tanh.default(a), aten.tanh.default(b)), aten.add.Tensor(aten.tanh.default(c), aten.tanh.default(d)))
    s = aten.sum.dim_IntList(k, [1], True)
    e = aten.mm.default(aten.mul.Tensor(k, s), w1)
    f = aten.mm.default(aten.maximum.default(aten.sub.Tensor(k, s), aten.neg.default(k)), w2)
    return aten.add.Tensor(aten.sigmoid.default(e), aten.exp.default(f))
m = ptc_spec.TensorMeta.of((16, 16))
print(ptc_inductor.compile(ptc_spec.trace(fn, m, m, m, m, m, dialect="core/1")).wrapper_source)
"""


def test_plan_and_wrapper_do_not_depend_on_string_hashing() -> None:
    # Read sets used to be Python sets of names, so which storage a buffer reused changed with
    # PYTHONHASHSEED: the same graph compiled to different wrappers in different processes
    # (5 different ones over 6 seeds for the graph above).
    import os
    import subprocess
    import sys

    wrappers = set()
    for seed in ("1", "2", "3", "4"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", _MANY_FREED], env=env, capture_output=True, text=True, timeout=300, check=True)
        wrappers.add(done.stdout)
    assert len(wrappers) == 1 and "kernel" in next(iter(wrappers))


def _residual_ln(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = aten.add.Tensor(x, r)
    mean = aten.div.Tensor(aten.sum.dim_IntList(h, [1], True), h.shape[1])
    c = aten.sub.Tensor(h, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(c, c), [1], True), h.shape[1])
    return h, aten.mul.Tensor(c, aten.rsqrt.default(aten.add.Tensor(var, 1e-5)))


def _big_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    # 512 x 1024 float32: 2 MiB per output, above the recycling size.
    return torch.randn(512, 1024, generator=g), torch.randn(512, 1024, generator=g)


def test_large_outputs_dropped_by_the_caller_are_handed_out_again() -> None:
    x, r = _big_inputs()
    compiled = check(_residual_ln, x, r)
    assert compiled.wrapper_source.count(".take()") == 2
    first = [t.data_ptr() for t in compiled(x, r)]
    # The previous results are dropped: the same storage comes back, pages already mapped.
    for _ in range(3):
        outs = compiled(x, r)
        assert [t.data_ptr() for t in outs] == first
        torch.testing.assert_close(outs, _residual_ln(x, r))
        assert all(t._base is None and t.data_ptr() % 64 == 0 for t in outs)
        del outs


def test_recycled_storage_is_never_shared_with_an_output_still_alive() -> None:
    x, r = _big_inputs()
    compiled = check(_residual_ln, x, r)
    want = _residual_ln(x, r)
    held_view = compiled(x, r)[1][3:, 5:]  # only a view of one output survives
    held_numpy = compiled(x, r)[0].numpy()  # only a NumPy array over another output
    snapshot_view, snapshot_numpy = held_view.clone(), held_numpy.copy()
    ptrs = set()
    for scale in (2.0, 3.0, 4.0):
        outs = compiled(x * scale, r * scale)
        ptrs.update(t.data_ptr() for t in outs)
        torch.testing.assert_close(outs[0], want[0] * scale)
    assert torch.equal(held_view, snapshot_view)
    assert (held_numpy == snapshot_numpy).all()
    assert held_view.data_ptr() not in ptrs and held_numpy.ctypes.data not in ptrs


def test_recycled_outputs_take_in_place_updates_and_gradients_like_eager_ones() -> None:
    x, r = _big_inputs()
    compiled = check(_residual_ln, x, r)
    h, y = compiled(x, r)
    eager_h, eager_y = _residual_ln(x, r)
    y.add_(1.0).mul_(2.0)
    eager_y.add_(1.0).mul_(2.0)
    leaf, eager_leaf = h.requires_grad_(), eager_h.requires_grad_()
    (leaf * y).sum().backward()
    (eager_leaf * eager_y).sum().backward()
    torch.testing.assert_close(leaf.grad, eager_leaf.grad)
    assert leaf.is_leaf and leaf.grad_fn is None


def test_recycling_can_be_switched_off() -> None:
    import ptc_inductor

    x, r = _big_inputs()
    gm = trace_core(_residual_ln, x, r)
    off = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env(env={"PTC_INDUCTOR_RECYCLE_OUTPUTS": "0"}))
    assert ".take()" not in off.wrapper_source
    torch.testing.assert_close(off(x, r), _residual_ln(x, r))


def test_small_outputs_are_not_recycled() -> None:
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    assert ".take()" not in check(_residual_ln, x, r).wrapper_source


def test_an_extern_result_nobody_reads_never_lends_its_storage() -> None:
    # Such a result is taken as the library returned it (any layout, or None on CUDA for a
    # result the kernel was not asked for): a later buffer placed in it would be corrupt.
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((4, 5)))
    low, _high = b.fallback(aten.aminmax.default, b.call(aten.mul.Tensor, x, 3.0), dim=-1)
    twice = b.call(aten.mul.Tensor, low, 2.0)  # float (4,), as the unread maximum
    b.output(b.call(aten.cumsum.default, twice, 0))
    gm = b.build()
    compiled = ptc_inductor.compile(gm)
    (call,) = [s for s in compiled.schedule.steps if getattr(s, "fallback", False)]
    unread = call.outputs[1].name
    assert [buf for buf, s in compiled.memory_plan.storage.items() if s == unread] == [unread]
    compare_with_eager(compiled, gm, torch.randn(4, 5))


# -- in-place reuse: a kernel's output takes the storage of an input that dies in it -------------

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1"))]


def _compile_on(fn: Callable[..., Any], backend: str, *inputs: torch.Tensor) -> ptc_inductor.CompiledGraph:
    """``fn`` compiled with ``backend`` and compared with eager on ``inputs``."""
    if backend == "triton":
        pytest.importorskip("triton")
    compiled = ptc_inductor.compile(trace_core(fn, *inputs), config=ptc_inductor.config_from_env(backend=backend))
    compare_with_eager(compiled, fn, *inputs)
    return compiled


def _made_by(compiled: ptc_inductor.CompiledGraph, op: Any) -> list[str]:
    """The buffers extern calls of ``op`` return, in order."""
    assert compiled.schedule is not None
    return [b.name for s in compiled.schedule.steps if isinstance(s, ExternNode) and s.op == op for b in s.outputs if b is not None]


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = aten.mul.Tensor(aten.bmm.default(q, aten.permute.default(k, [0, 2, 1])), 0.25)
    e = aten.exp.default(aten.sub.Tensor(scores, aten.amax.default(scores, [-1], True)))
    return aten.bmm.default(aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), v)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_writes_over_the_attention_scores_it_reads_last(backend: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    b, L, d = 2, 64, 16
    q, k, v = (torch.randn(b, L, d, generator=g).to(dtype) for _ in range(3))
    compiled = _compile_on(_attention, backend, q, k, v)
    plan = compiled.memory_plan
    assert plan is not None
    scores, _ = _made_by(compiled, aten.bmm.default)
    ((probs, taken),) = plan.in_place
    assert taken == scores and plan.storage[probs] == scores
    # Scores and probabilities share one buffer: the peak is it plus the attention output.
    item = dtype.itemsize
    assert plan.peak_bytes == b * L * L * item + b * L * d * item
    if backend == "cpp":
        # Neither pointer of the pair promises the compiler it aliases nothing.
        ctype = "float" if dtype == torch.float32 else "uint16_t"
        assert f"const {ctype}* {scores}," in compiled.cpp_source and f"{ctype}* {probs})" in compiled.cpp_source


@pytest.mark.parametrize("backend", BACKENDS)
def test_looped_triton_style_softmax_rows_are_written_in_place(backend: str) -> None:
    # Rows longer than a persistent tile: the Triton kernel loops over each row three times
    # (max, sum, then normalize-and-store chunk by chunk).
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 32, generator=g), torch.randn(32, 9000, generator=g) / 8
    w2 = torch.randn(9000, 8, generator=g) / 64

    def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        s = aten.mm.default(x, w)
        e = aten.exp.default(aten.sub.Tensor(s, aten.amax.default(s, [-1], True)))
        return aten.mm.default(aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), w2)

    compiled = _compile_on(fn, backend, x, w, w2)
    assert compiled.memory_plan is not None
    if backend == "triton":
        assert "for roffset in range" in compiled.cpp_source
    (scores, _) = _made_by(compiled, aten.mm.default)
    assert [taken for _, taken in compiled.memory_plan.in_place] == [scores]


def _layer_norm_of_mm(x: torch.Tensor, w: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    h = aten.mm.default(x, w)
    mean = aten.div.Tensor(aten.sum.dim_IntList(h, [1], True), h.shape[1])
    c = aten.sub.Tensor(h, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(c, c), [1], True), h.shape[1])
    y = aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(c, aten.rsqrt.default(aten.add.Tensor(var, 1e-5))), gamma), beta)
    return aten.mm.default(y, w)


def _pointwise_chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = aten.mm.default(x, w)
    return aten.mm.default(aten.add.Tensor(aten.tanh.default(aten.mul.Tensor(h, 2.0)), aten.sigmoid.default(h)), w)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_layer_norm_of_mm, _pointwise_chain], ids=["layer_norm", "pointwise_chain"])
def test_a_kernel_consuming_a_matmul_result_last_writes_over_it(backend: str, fn: Callable[..., Any]) -> None:
    g = torch.Generator().manual_seed(0)
    n = 96
    inputs = [torch.randn(n, n, generator=g), torch.randn(n, n, generator=g) / 8, torch.randn(n, generator=g), torch.randn(n, generator=g)]
    compiled = _compile_on(fn, backend, *inputs[: 4 if fn is _layer_norm_of_mm else 2])
    plan = compiled.memory_plan
    assert plan is not None
    h, out = _made_by(compiled, aten.mm.default)
    (written,) = [b for b, s in plan.storage.items() if s == h and b != h]
    assert plan.in_place == ((written, h),)
    # Nothing of the matmul's size is allocated by the wrapper: the one kernel writes into h.
    assert f"({n}, {n}, )" not in "".join(line for line in compiled.wrapper_source.splitlines() if "_empty(" in line)
    assert plan.peak_bytes <= 2 * n * n * 4 + 2 * n * 4


def _transposed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = aten.mm.default(x, w)
    return aten.mm.default(aten.tanh.default(aten.permute.default(h, [1, 0])), w)


def _rolled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = aten.mm.default(x, w)
    r = aten.cat.default([aten.slice.Tensor(h, 1, 1, None), aten.slice.Tensor(h, 1, 0, 1)], 1)
    return aten.mm.default(aten.add.Tensor(h, r), w)


def _read_by_a_later_kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = aten.mm.default(x, w)
    return aten.add.Tensor(h, aten.mm.default(aten.tanh.default(h), w))


def _graph_input(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return aten.mm.default(aten.tanh.default(x), w)


def _reread_after_the_store(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # One kernel: exp(h) is stored first, then the row sums read h again.
    h = aten.mm.default(x, w)
    e = aten.exp.default(h)
    s = aten.sum.dim_IntList(aten.mul.Tensor(h, 2.0), [1], True)
    return aten.mm.default(e, w), s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [_transposed, _rolled, _read_by_a_later_kernel, _graph_input, _reread_after_the_store],
    ids=["transposed", "rolled", "read_later", "graph_input", "reread_after_store"],
)
def test_no_output_takes_an_input_read_elsewhere_or_after_the_write(backend: str, fn: Callable[..., Any]) -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g) / 8
    compiled = _compile_on(fn, backend, x, w)
    assert compiled.memory_plan is not None and compiled.memory_plan.in_place == ()
    if fn is _reread_after_the_store:
        assert compiled.schedule is not None and len(compiled.schedule.kernels) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_output_takes_a_buffer_a_fallback_view_reads(backend: str) -> None:
    b = GraphBuilder("core/2")
    x, w = b.input("x", TensorMeta.of((64, 64))), b.input("w", TensorMeta.of((64, 64)))
    h = b.call(aten.mm.default, x, w)
    # The kernel reads h at (i, j) and, through the view, at (j, i): writing its sum over h
    # would change elements the view has yet to read.
    ht = b.fallback(aten.transpose.int, h, 0, 1)
    b.output(b.call(aten.mm.default, b.call(aten.add.Tensor, h, ht), w))
    gm = b.build()
    if backend == "triton":
        pytest.importorskip("triton")
    compiled = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env(backend=backend))
    compare_with_eager(compiled, gm, torch.randn(64, 64), torch.randn(64, 64))
    assert compiled.memory_plan is not None and compiled.memory_plan.in_place == ()


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_softmax_rows_are_written_in_place_at_every_size(backend: str) -> None:
    from dynamic_harness import D, compile_dynamic, sizes_of

    def fn(x: Any, w: Any, w2: Any) -> Any:
        s = aten.mm.default(x, w)
        e = aten.exp.default(aten.sub.Tensor(s, aten.amax.default(s, [-1], True)))
        return aten.mm.default(aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), w2)

    dyn = compile_dynamic(fn, D((6, 4), (0,)), D((4, 10), (1,)), D((10, 3), (0,)), backend=backend)
    assert dyn.compiled.memory_plan is not None
    (scores, _) = _made_by(dyn.compiled, aten.mm.default)
    assert [taken for _, taken in dyn.compiled.memory_plan.in_place] == [scores]
    dyn.run_all(sizes_of(s0=[6, 2, 9], s1=[10, 33, 5], s2=[10, 33, 5]))


def test_in_place_reuse_is_off_with_buffer_reuse() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 16, 8, generator=g) for _ in range(3))
    config = ptc_inductor.config_from_env(reuse_buffers=False)
    compiled = ptc_inductor.compile(trace_core(_attention, q, k, v), config=config)
    compare_with_eager(compiled, _attention, q, k, v)
    assert compiled.memory_plan is not None and compiled.memory_plan.in_place == ()
    assert "__restrict__" in compiled.cpp_source


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or _INTERPRET, reason="needs CUDA and TRITON_INTERPRET=0")
def test_autotuning_an_in_place_kernel_leaves_its_first_call_right(tmp_path: Any) -> None:
    # Autotuning launches the kernel once per candidate config: on the input itself, the later
    # launches would read the probabilities written by the earlier ones.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(8, 512, 64, generator=g).cuda() for _ in range(3))
    config = ptc_inductor.config_from_env(triton_autotune="max-autotune", cache_dir=str(tmp_path))
    compiled = ptc_inductor.compile(trace_core(_attention, q, k, v), config=config)
    assert compiled.memory_plan is not None and compiled.memory_plan.in_place
    compare_with_eager(compiled, _attention, q, k, v, rtol=1e-4, atol=1e-4)


def test_boxed_call_frees_each_input_after_its_last_use() -> None:
    # call_boxed empties the list it is given: an input nobody else holds (a backward's saved
    # activation) is freed right after the step that reads it last, before the later extern
    # calls run, and the results are eager's. call(*inputs) gives the same results.
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    def fn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = aten.tanh.default(aten.mm.default(a, w))
        return aten.mm.default(aten.mm.default(h, w), w)

    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    compiled = ptc_inductor.compile(trace_core(fn, a, w))
    assert compiled.call_boxed is not None
    torch.testing.assert_close(compiled(a, w), fn(a, w))
    events: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            events.append(str(func))
            return func(*args, **(kwargs or {}))

    args = [a.clone(), w]
    weakref.finalize(args[0], events.append, "freed a")
    with Log():
        out = compiled.call_boxed(args)
    assert args == []
    mms = [i for i, e in enumerate(events) if e.startswith("aten.mm")]
    assert len(mms) == 3 and mms[0] < events.index("freed a") < mms[1], events
    torch.testing.assert_close(out[0] if isinstance(out, tuple) else out, fn(a, w))


# -- kernel-local values: computed and read inside one Triton kernel, never stored ---------------


def _masked_softmax(s: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    # The masked scores have three readers (the max, the exponent, the all-masked test), so they
    # are realized; every reader sits in the same persistent kernel.
    x = aten.add.Tensor(aten.where.ScalarOther(keep, s, float("-inf")), 0.5)
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
    p = aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))
    none_kept = aten.eq.Scalar(aten.amax.default(aten.ne.Scalar(x, float("-inf")), [-1], True), False)
    return aten.where.ScalarSelf(none_kept, 0.0, p)


def _running_max(x: torch.Tensor) -> torch.Tensor:
    # Each running value is read twice (compared and selected): realized, all in one flat kernel.
    best = x[0]
    for i in range(1, x.shape[0]):
        best = aten.where.self(aten.gt.Tensor(x[i], best), x[i], best)
    return best


@pytest.mark.skipif(not _INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("fn", "shapes"), [(_masked_softmax, [(2, 3, 8, 16), (2, 1, 1, 16)]), (_running_max, [(9, 4, 33)])])
def test_values_read_only_inside_their_triton_kernel_are_never_stored(dtype: torch.dtype, fn: Callable[..., Any], shapes: list[tuple[int, ...]]) -> None:
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shapes[0], generator=g).to(dtype)]
    if len(shapes) > 1:
        keep = torch.rand(shapes[1], generator=g) > 0.3
        keep[0, 0, 0, :] = False  # a row with every score masked: the safe softmax gives zeros
        inputs.append(keep)
    compiled = _compile_on(fn, "triton", *inputs)
    plan = compiled.memory_plan
    assert plan is not None and compiled.schedule is not None
    (kernel,) = compiled.schedule.kernels
    written = [b.name for n in kernel.nodes for b in n.outputs]
    (returned,) = re.findall(r"return \(?(buf\d+)", compiled.wrapper_source)
    # Only the graph's output leaves the kernel: every other value it makes stays in registers,
    # neither allocated by the wrapper nor stored by the kernel.
    assert len(written) > 1 and set(written) - plan.local == {returned}
    assert compiled.cpp_source.count("tl.store(") == 1
    assert not any(f"{name} = _empty" in compiled.wrapper_source for name in plan.local)


def _running_stat(extra_read: bool, returned_twice: bool, dtype: torch.dtype) -> torch.fx.GraphModule:
    """A batch norm's running-mean update as the functional forward ptc-aot hands over: the new
    value of input ``state`` is output 1 (``ptc_input_writes``); with ``extra_read`` the old
    value is also read by a kernel after the update, with ``returned_twice`` the new value is
    returned again (as a value saved for the backward is)."""
    b = GraphBuilder("core/2")
    state, x = b.input("state", TensorMeta.of((8,), dtype)), b.input("x", TensorMeta.of((16, 8), dtype))
    mean = b.call(aten.div.Tensor, b.call(aten.sum.dim_IntList, x, [0]), 16)
    new = b.call(aten.add.Tensor, b.call(aten.mul.Tensor, state, 0.9), b.call(aten.mul.Tensor, mean, 0.1))
    normed = b.call(aten.sub.Tensor, x, mean)
    if extra_read:
        # An extern product reads the old state after the kernel that makes the new one.
        normed = b.call(aten.mm.default, b.call(aten.mm.default, normed, b.call(aten.view.default, new, [8, 1])), b.call(aten.view.default, state, [1, 8]))
    outs = (normed, new, new) if returned_twice else (normed, new)
    b.output(*outs)
    gm = b.build()
    gm.meta["ptc_input_writes"] = ((1, 0),)
    return gm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["written", "read_after", "returned_twice"])
def test_the_new_value_of_an_input_is_stored_over_it_only_when_nothing_reads_it_later(backend: str, case: str, dtype: torch.dtype) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
    gm = _running_stat(case == "read_after", case == "returned_twice", dtype)
    compiled = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env(backend=backend))
    g = torch.Generator().manual_seed(0)
    state, x = torch.randn(8, generator=g).to(dtype), torch.randn(16, 8, generator=g).to(dtype)
    expected = gm(state.clone(), x)
    before = state.clone()
    got = compiled(state, x)
    for e, a in zip(expected, got):
        torch.testing.assert_close(a, e)
    assert compiled.memory_plan is not None
    if case == "written":
        # The caller receives its own tensor, already holding the new value: nothing to copy.
        assert got[1] is state
        assert [taken for _, taken in compiled.memory_plan.in_place] == ["arg0"]
    else:
        assert got[1] is not state
        torch.testing.assert_close(state, before)
        assert "arg0" not in [taken for _, taken in compiled.memory_plan.in_place]
