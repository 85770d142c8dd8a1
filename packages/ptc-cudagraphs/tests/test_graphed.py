"""cudagraphify end to end: replays equal eager, trees, output safety, fallbacks, memory."""

from __future__ import annotations

import gc
import logging

import pytest
import torch
from models import mlp

import ptc_cudagraphs as pcg
from ptc_cudagraphs.errors import OverwrittenOutputError

gpu = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh() -> None:
    pcg.reset()


def cuda_randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_calls_run_eagerly_and_say_why(caplog: pytest.LogCaptureFixture) -> None:
    fast = pcg.cudagraphify(lambda x: x * 2, [torch.ones(2)], name="double")
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for _ in range(3):
            torch.testing.assert_close(fast(torch.ones(2)), torch.full((2,), 2.0))
    assert "double runs eagerly because no CUDA device is available" in caplog.text
    assert pcg.stats().fallbacks == {"NOT_CUDA": 3}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_training_keeps_eager_gradients() -> None:
    torch.manual_seed(0)
    model = mlp("cpu")
    fast = pcg.cudagraphify(model, [torch.randn(4, 32)])
    x = torch.randn(4, 32)
    fast(x).sum().backward()  # type: ignore[attr-defined]
    got = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(got, [p.grad for p in model.parameters()])


def test_dump_tree_without_trees() -> None:
    pcg.reset()
    assert isinstance(pcg.dump_tree(), str)


@gpu
def test_inference_replays_match_eager_over_changing_values() -> None:
    model = mlp()
    fast = pcg.cudagraphify(model, [cuda_randn(8, 32)])
    with torch.no_grad():
        for _ in range(20):
            x = cuda_randn(8, 32)
            torch.testing.assert_close(fast(x), model(x))
    snap = pcg.stats()
    assert (snap.recordings, snap.replays, snap.eager_calls) == (1, 19, 0), snap
    assert snap.pinned_output_bytes == 8 * 16 * 4
    assert snap.input_buffer_bytes == 8 * 32 * 4  # x is copied in; the parameters are static


@gpu
def test_static_inputs_are_never_copied_and_in_place_updates_are_seen() -> None:
    w = cuda_randn(32, 32)
    fast = pcg.cudagraphify(lambda x, w: torch.relu(x @ w), [cuda_randn(4, 32), w],
                            static_inputs=[1])
    for _ in range(11):
        x = cuda_randn(4, 32)
        torch.testing.assert_close(fast(x, w), torch.relu(x @ w))
    w.add_(1.0)
    x = cuda_randn(4, 32)
    torch.testing.assert_close(fast(x, w), torch.relu(x @ w))
    (node,) = list(fast.engine.tree.nodes())
    assert node.recording.copies == 11  # type: ignore[union-attr]  # x only, once per replay


@gpu
def test_moved_static_input_records_again() -> None:
    w = cuda_randn(8)
    fast = pcg.cudagraphify(lambda x, w: x * w, [cuda_randn(8), w], static_inputs=[w])
    x = cuda_randn(8)
    fast(x, w)
    fast(x, w)
    w2 = w + 1
    torch.testing.assert_close(fast(x, w2), x * w2)
    torch.testing.assert_close(fast(x, w2), x * w2)
    assert pcg.stats().recordings == 2


@gpu
def test_two_branches_alternate_and_replay() -> None:
    f = pcg.cudagraphify(lambda x: x.sin() + 1, [cuda_randn(16)], name="f")
    g = pcg.cudagraphify(lambda y: y * 3, [cuda_randn(16)], name="g")
    h = pcg.cudagraphify(lambda y: y.cos(), [cuda_randn(16)], name="h")
    for step in range(12):
        x = cuda_randn(16)
        y = f(x)
        if step % 2:
            torch.testing.assert_close(g(y), (x.sin() + 1) * 3)
        else:
            torch.testing.assert_close(h(y), (x.sin() + 1).cos())
        if step == 5:
            settled = pcg.stats().recordings
    snap = pcg.stats()
    assert snap.recordings == settled and snap.replays >= 12
    assert "g [forward]" in pcg.dump_tree() and "h [forward]" in pcg.dump_tree()


@gpu
def test_overwritten_output_raises_and_clones_survive() -> None:
    fast = pcg.cudagraphify(lambda x: x * 2, [cuda_randn(4)], name="double")
    ones, zeros = torch.ones(4, device="cuda"), torch.zeros(4, device="cuda")
    fast(ones)
    held = fast(ones)
    kept = held.clone()  # type: ignore[attr-defined]
    latest = fast(zeros)
    assert torch.equal(held, latest)  # type: ignore[arg-type]  # same memory: held was overwritten
    with pytest.raises(OverwrittenOutputError, match="double received an output of double"):
        fast(held)
    torch.testing.assert_close(kept, torch.full((4,), 2.0, device="cuda"))
    pcg.mark_step_begin()
    torch.testing.assert_close(fast(latest), torch.zeros(4, device="cuda"))


@gpu
def test_outputs_aliasing_inputs_keep_aliasing_them() -> None:
    fast = pcg.cudagraphify(lambda x: (x.t(), x + 1), [cuda_randn(3, 5)])
    for _ in range(4):
        x = cuda_randn(3, 5)
        view, plus = fast(x)  # type: ignore[misc]
        assert view.data_ptr() == x.data_ptr()
        torch.testing.assert_close(view, x.t())
        torch.testing.assert_close(plus, x + 1)


@gpu
def test_several_shapes_each_record_once() -> None:
    model = mlp()
    fast = pcg.cudagraphify(model, [cuda_randn(1, 32)])
    with torch.no_grad():
        for _ in range(3):
            for batch in (1, 2, 4):
                x = cuda_randn(batch, 32)
                torch.testing.assert_close(fast(x), model(x))
    snap = pcg.stats()
    assert (snap.recordings, snap.replays) == (3, 6)


def _syncs(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.sum().item() > 0 else x * 3


def _mutates(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x + 1


@gpu
@pytest.mark.parametrize(
    ("fn", "make_args", "reason", "message"),
    [
        (lambda x: x + 1, lambda: (torch.randn(4),), "CPU_TENSORS",
         "an input tensor is not on the graph's CUDA device"),
        (lambda x, y: x + y, lambda: (cuda_randn(4), torch.tensor(2.0)), "MIXED_DEVICES",
         "input tensors are on more than one device"),
        (_mutates, lambda: (cuda_randn(4),), "INPUT_MUTATION",
         "the callable mutates a non-static input"),
        (_syncs, lambda: (cuda_randn(4),), "CAPTURE_FAILED",
         "the callable cannot be captured"),
    ],
    ids=["cpu", "mixed", "mutation", "sync"],
)
def test_fallbacks_run_eagerly_and_log_why(
    fn: object, make_args: object, reason: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    fast = pcg.cudagraphify(fn, [cuda_randn(4)], name="victim")  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for _ in range(4):
            args = make_args()  # type: ignore[operator]
            expect = fn(*[a.clone() for a in args])  # type: ignore[operator]
            torch.testing.assert_close(fast(*args), expect)
    assert f"victim runs eagerly because {message}" in caplog.text
    snap = pcg.stats()
    assert snap.fallbacks.get(reason, 0) >= 3 and snap.replays == 0
    # The device stays healthy: another callable records and replays afterwards.
    other = pcg.cudagraphify(lambda x: x - 1, [cuda_randn(4)])
    for _ in range(3):
        x = cuda_randn(4)
        torch.testing.assert_close(other(x), x - 1)
    assert pcg.stats().replays == 2


def _fails_in_capture(x: torch.Tensor) -> torch.Tensor:
    noise = torch.rand_like(x)  # random numbers drawn inside the capture that then fails
    if torch.cuda.is_current_stream_capturing():
        x.cpu()  # a copy to the host is not allowed while capturing: the capture breaks
    return x + noise


@gpu
def test_random_numbers_work_after_a_failed_capture(caplog: pytest.LogCaptureFixture) -> None:
    fast = pcg.cudagraphify(_fails_in_capture, [cuda_randn(4)], name="breaks")
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for _ in range(3):
            x = cuda_randn(4)
            assert fast(x).shape == x.shape
    assert "breaks runs eagerly because the callable cannot be captured" in caplog.text
    assert pcg.stats().fallbacks.get("CAPTURE_FAILED", 0) >= 1
    # Eager random numbers still work and still follow the seed.
    torch.manual_seed(7)
    first = torch.rand(8, device="cuda")
    torch.manual_seed(7)
    torch.testing.assert_close(torch.rand(8, device="cuda"), first)
    # And a graph that draws random numbers records, then gives new numbers on every replay.
    noisy = pcg.cudagraphify(lambda x: x + torch.rand_like(x), [cuda_randn(1024)])
    x = torch.zeros(1024, device="cuda")
    draws = [noisy(x).clone() for _ in range(4)]
    assert pcg.stats().replays >= 2
    assert all(not torch.equal(a, b) for a, b in zip(draws, draws[1:]))
    assert all(0 <= float(d.min()) and float(d.max()) < 1 for d in draws)


@gpu
def test_too_many_shapes_warns_and_runs_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    fast = pcg.cudagraphify(lambda x: x * 2, [cuda_randn(1)], name="shapes",
                            config=pcg.Config(max_recordings_per_function=2))
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for n in (1, 2, 3, 4, 1, 2):
            x = cuda_randn(n)
            torch.testing.assert_close(fast(x), x * 2)
    assert any(r.levelno == logging.WARNING and "too many distinct" in r.getMessage()
               for r in caplog.records)
    assert pcg.stats().fallbacks == {"TOO_MANY_SHAPES": 2}


def _allocated_after_collect() -> int:
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def _cycle(fast: pcg.CudaGraphed, x: torch.Tensor) -> None:
    with torch.no_grad():
        for _ in range(3):
            fast(x)


@gpu
def test_reset_frees_the_pool() -> None:
    model = mlp()
    x = cuda_randn(64, 32)
    with torch.no_grad():
        # Eager first: an eager matmul after the baseline would allocate cuBLAS's workspace
        # (32 MiB on Hopper) outside the pool, which captures release.
        expected = model(x)
    # One full cycle first, so that what stays allocated for the process is in the baseline.
    _cycle(pcg.cudagraphify(model, [x]), x)
    pcg.reset()
    base = _allocated_after_collect()
    torch.cuda.empty_cache()
    base_reserved = torch.cuda.memory_reserved()
    fast = pcg.cudagraphify(model, [x])
    with torch.no_grad():
        for _ in range(5):
            out = fast(x)
    del out
    assert _allocated_after_collect() > base
    pcg.reset()
    assert _allocated_after_collect() == base
    with torch.no_grad():  # still usable after reset: records again
        for _ in range(3):
            torch.testing.assert_close(fast(x), expected)
    assert pcg.stats().recordings == 1
    pcg.reset()
    assert torch.cuda.memory_reserved() <= base_reserved


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matmul_workspaces_are_not_held_outside_the_pool_and_replays_stay_right(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, w = cuda_randn(64, 512).to(dtype), (cuda_randn(512, 512) / 16).to(dtype)
    eager = torch.nn.functional.linear(x, w, w[0]) @ w  # the caller's own matmuls, before any graph
    fast = pcg.cudagraphify(lambda x: torch.nn.functional.linear(x, w, w[0]) @ w, [x])
    for _ in range(3):
        out = fast(x)
    torch.testing.assert_close(out, eager)
    del out
    held = pcg.stats().pinned_output_bytes + pcg.stats().input_buffer_bytes
    tensors = sum(t.untyped_storage().nbytes() for t in (x, w, eager))
    # cuBLAS's and cuBLASLt's workspaces are megabytes each (32 MiB on Hopper), per stream.
    assert _allocated_after_collect() - held - tensors < 2**20
    # The graph's workspace is free pool memory now: eager matmuls, other allocations and a
    # second recording in the same pool must not change what a replay computes.
    junk = [torch.full((1024, 1024), 7.0, device="cuda", dtype=dtype) @ w.new_ones(1024, 1024) for _ in range(4)]
    other = pcg.cudagraphify(lambda x: (x @ w.T).relu() @ w, [x])
    for _ in range(3):
        other_out = other(x)
    torch.testing.assert_close(other_out, (x @ w.T).relu() @ w)
    torch.testing.assert_close(fast(x), eager)
    torch.testing.assert_close(fast(x * 2), (torch.nn.functional.linear(x * 2, w, w[0]) @ w))
    # While other's output lives, each call of fast is a new node on the path below other's.
    assert pcg.stats().recordings == 4
    del junk, other_out
    # With it gone, fast replays its first recording again.
    torch.testing.assert_close(fast(x), eager)
    assert pcg.stats().recordings == 4


@gpu
def test_dead_callable_frees_its_recordings() -> None:
    x = cuda_randn(256, 256)
    _cycle(pcg.cudagraphify(lambda x: x @ x, [x]), x)
    base = _allocated_after_collect()
    fast = pcg.cudagraphify(lambda x: x @ x, [x])
    for _ in range(3):
        fast(x)
    assert _allocated_after_collect() > base, pcg.stats()
    engine = fast.engine
    del fast
    assert not list(engine.tree.nodes())
    assert _allocated_after_collect() == base
