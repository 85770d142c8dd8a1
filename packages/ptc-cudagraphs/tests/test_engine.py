"""The call algorithm driven by plain-Python recordings (no CUDA needed)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable

import pytest
import torch
from fakes import CAPTURING, FakeRecorder
from torch.utils import _pytree as pytree

from ptc_cudagraphs.config import Config
from ptc_cudagraphs.engine import Engine, FunctionState
from ptc_cudagraphs.errors import OverwrittenOutputError, PtcCudagraphsError
from ptc_cudagraphs.reasons import FallbackReason
from ptc_cudagraphs.tree import BACKWARD

_ids = iter(range(1, 10_000))


def make(fn: Callable[..., object], name: str = "f", **kw: object) -> FunctionState:
    return FunctionState(fn=fn, name=name, function_id=next(_ids), **kw)  # type: ignore[arg-type]


def run(engine: Engine, f: FunctionState, *args: object) -> object:
    res = engine.call(f, args)
    return pytree.tree_unflatten(res.outputs, res.spec)


@pytest.fixture
def engine() -> Engine:
    return Engine(FakeRecorder(), Config())


def test_replays_match_eager_over_changing_values(engine: Engine) -> None:
    f = make(lambda x, y: (x * 2 + y, x.sum()))
    for _ in range(6):
        x, y = torch.randn(4, 3), torch.randn(4, 3)
        got = run(engine, f, x, y)
        torch.testing.assert_close(got, (x * 2 + y, x.sum()))
    snap = engine.stats.snapshot()
    assert (snap.recordings, snap.replays, snap.warmups) == (1, 5, 1)


def test_warmup_runs_delay_recording() -> None:
    engine = Engine(FakeRecorder(), Config(warmup_runs=3))
    f = make(lambda x: x + 1)
    for _ in range(4):
        run(engine, f, torch.ones(2))
    snap = engine.stats.snapshot()
    assert (snap.warmups, snap.recordings, snap.replays) == (3, 1, 1)


def test_static_inputs_are_not_copied(engine: Engine) -> None:
    weight = torch.randn(3, 3)
    f = make(lambda x, w: x @ w, static=frozenset({1}))
    for _ in range(4):
        x = torch.randn(2, 3)
        torch.testing.assert_close(run(engine, f, x, weight), x @ weight)
    (rec,) = engine.recorder.recordings  # type: ignore[attr-defined]
    assert rec.copies == 3  # only x, once per replay
    assert rec.graph_args[1] is weight


def test_parameters_are_static_without_being_named() -> None:
    engine = Engine(FakeRecorder(), Config())
    p = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    f = make(lambda x, w: x * w)
    for _ in range(3):
        run(engine, f, torch.randn(3), p)
    assert engine.recorder.recordings[0].copies == 2  # type: ignore[attr-defined]


def test_moved_static_input_records_again_instead_of_reading_old_memory(engine: Engine) -> None:
    f = make(lambda x, w: x + w, static=frozenset({1}))
    w1, w2 = torch.zeros(3), torch.ones(3)
    x = torch.randn(3)
    run(engine, f, x, w1)
    torch.testing.assert_close(run(engine, f, x, w2), x + 1)
    torch.testing.assert_close(run(engine, f, x, w2), x + 1)
    assert engine.stats.snapshot().recordings == 2


def test_new_shape_records_new_node_and_old_shape_still_replays(engine: Engine) -> None:
    f = make(lambda x: x.cumsum(0))
    for n in (3, 5, 3, 5, 3):
        x = torch.randn(n)
        torch.testing.assert_close(run(engine, f, x), x.cumsum(0))
    snap = engine.stats.snapshot()
    assert (snap.recordings, snap.replays) == (2, 3)


def test_branches_record_once_and_alternate(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    g = make(lambda x: x * 3, "g")
    h = make(lambda x: x - 5, "h")
    for step in range(6):
        engine.mark_step_begin()
        x = torch.randn(2)
        y = run(engine, f, x)
        second = g if step % 2 == 0 else h
        out = run(engine, second, y)
        expect = (x + 1) * 3 if step % 2 == 0 else (x + 1) - 5
        torch.testing.assert_close(out, expect)
        if step == 3:
            settled = engine.stats.snapshot().recordings
    root_children = list(engine.tree.root.children.values())
    assert [n.name for n in root_children] == ["f"]
    assert {n.name for n in root_children[0].children.values()} == {"g", "h"}
    # Later steps replay: no new recordings once both paths were seen from a replayed f.
    assert engine.stats.snapshot().recordings == settled


def test_child_reads_parent_output_in_place(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    g = make(lambda x: x * 2, "g")
    for _ in range(4):
        engine.mark_step_begin()
        x = torch.randn(2)
        torch.testing.assert_close(run(engine, g, run(engine, f, x)), (x + 1) * 2)
    g_rec = engine.recorder.recordings[-1]  # type: ignore[attr-defined]
    assert g_rec.copies == 0


def test_calling_a_forward_again_starts_a_new_generation(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    g = make(lambda x: x * 2, "g")
    for _ in range(3):
        run(engine, g, run(engine, f, torch.ones(1)))
    assert engine.tree.generation == 2
    assert [n.name for n in engine.tree.root.children.values()] == ["f"]


def test_finished_backward_starts_a_new_generation(engine: Engine) -> None:
    fwd = make(lambda x: x + 1, "fwd")
    bwd = make(lambda g: g * 2, "bwd", role=BACKWARD)
    run(engine, fwd, torch.ones(1))
    run(engine, bwd, torch.ones(1))
    gen = engine.tree.generation
    run(engine, fwd, torch.ones(1))
    assert engine.tree.generation == gen + 1


def test_cache_is_emptied_once_when_the_step_after_a_recording_begins(engine: Engine) -> None:
    recorder = engine.recorder
    assert isinstance(recorder, FakeRecorder)
    f = make(lambda x: x + 1, "f")
    run(engine, f, torch.ones(1))  # warms up and records f
    assert recorder.releases == 0  # the recording step's warm-up tensors may still be alive
    for _ in range(3):
        run(engine, f, torch.ones(1))
    assert recorder.releases == 1
    run(engine, f, torch.ones(3))  # a new shape records once more
    run(engine, f, torch.ones(3))
    run(engine, f, torch.ones(3))
    assert recorder.releases == 2
    assert len(recorder.recordings) == 2


def test_emptying_the_cache_can_be_switched_off() -> None:
    recorder = FakeRecorder()
    engine = Engine(recorder, Config(release_warmup_memory=False))
    f = make(lambda x: x + 1, "f")
    for _ in range(3):
        run(engine, f, torch.ones(1))
    assert recorder.releases == 0


def test_without_auto_generations_only_mark_step_begin_restarts() -> None:
    engine = Engine(FakeRecorder(), Config(auto_generations=False))
    f = make(lambda x: x + 1, "f")
    run(engine, f, torch.ones(1))
    run(engine, f, torch.ones(1))
    assert engine.tree.generation == 0
    engine.mark_step_begin()
    run(engine, f, torch.ones(1))
    assert engine.tree.generation == 1


def test_held_output_overwritten_by_replay_raises_naming_functions(engine: Engine) -> None:
    f = make(lambda x: x + 1, "producer")
    g = make(lambda x: x * 2, "consumer")
    run(engine, f, torch.ones(2))
    kept = run(engine, f, torch.ones(2))
    run(engine, f, torch.zeros(2))  # overwrites `kept`
    with pytest.raises(OverwrittenOutputError, match="consumer received an output of producer"):
        run(engine, g, kept)


def test_dropped_outputs_are_not_reported(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    run(engine, f, torch.ones(2))
    run(engine, f, torch.ones(2))
    run(engine, f, torch.ones(2))
    assert engine.liveness.live_count() == 0
    assert not engine.liveness._stale


def test_cloned_output_survives_replays(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    run(engine, f, torch.ones(2))
    kept = run(engine, f, torch.ones(2)).clone()  # type: ignore[attr-defined]
    run(engine, f, torch.zeros(2))
    torch.testing.assert_close(kept, torch.full((2,), 2.0))


def test_replay_overwrites_outputs_of_later_recordings_only(engine: Engine) -> None:
    first = make(lambda x: x + 1, "first")
    second = make(lambda x: x * 2, "second")
    engine.mark_step_begin()
    run(engine, first, torch.ones(1))
    run(engine, second, torch.ones(1))
    engine.mark_step_begin()
    a = run(engine, first, torch.ones(1))
    b = run(engine, second, torch.ones(1))
    engine.mark_step_begin()
    run(engine, second, torch.ones(1))  # new root path: records, does not replay `first`
    assert not engine.liveness.is_overwritten(a)  # type: ignore[arg-type]
    engine.mark_step_begin()
    run(engine, first, torch.ones(1))
    assert engine.liveness.is_overwritten(a)  # type: ignore[arg-type]
    assert engine.liveness.is_overwritten(b)  # type: ignore[arg-type]


def test_outputs_aliasing_inputs_keep_aliasing_them(engine: Engine) -> None:
    f = make(lambda x: (x.view(-1), x * 2))
    for _ in range(3):
        x = torch.randn(2, 3)
        view, doubled = run(engine, f, x)  # type: ignore[misc]
        assert view.data_ptr() == x.data_ptr()
        torch.testing.assert_close(doubled, x * 2)


def test_input_mutation_falls_back_and_stays_eager(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    f = make(bump, "bump")
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for _ in range(3):
            x = torch.zeros(2)
            torch.testing.assert_close(run(engine, f, x), torch.full((2,), 2.0))
            torch.testing.assert_close(x, torch.ones(2))
    assert f.eager_reason is FallbackReason.INPUT_MUTATION
    assert "bump runs eagerly because the callable mutates a non-static input" in caplog.text
    snap = engine.stats.snapshot()
    assert snap.recordings == 0
    assert snap.fallbacks == {"INPUT_MUTATION": 3}


def test_mutating_a_static_input_is_allowed(engine: Engine) -> None:
    state = torch.zeros(2)

    def step(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        s.add_(x)
        return s * 1

    f = make(step, static=frozenset({1}))
    for _ in range(4):
        run(engine, f, torch.ones(2), state)
    assert engine.stats.snapshot().recordings == 1


def test_capture_failure_falls_back_with_reason(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    def syncs(x: torch.Tensor) -> torch.Tensor:
        if CAPTURING["on"]:
            raise RuntimeError("operation not permitted when stream is capturing")
        return x + 1

    f = make(syncs, "syncs")
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for _ in range(3):
            torch.testing.assert_close(run(engine, f, torch.ones(1)), torch.full((1,), 2.0))
    assert f.eager_reason is FallbackReason.CAPTURE_FAILED
    assert "syncs runs eagerly because the callable cannot be captured" in caplog.text
    assert "not permitted when stream is capturing" in caplog.text
    assert not engine.tree.root.children


def test_too_many_shapes_warns_once_and_runs_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine(FakeRecorder(), Config(max_recordings_per_function=2))
    f = make(lambda x: x * 2, "shapes")
    with caplog.at_level(logging.INFO, logger="ptc.cudagraphs"):
        for n in (1, 2, 3, 4, 1, 2):
            x = torch.randn(n)
            torch.testing.assert_close(run(engine, f, x), x * 2)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "too many distinct input signatures" in warnings[0].getMessage()
    snap = engine.stats.snapshot()
    assert (snap.recordings, snap.fallbacks, snap.replays) == (2, {"TOO_MANY_SHAPES": 2}, 2)


@pytest.mark.parametrize(
    ("device", "inputs", "reason"),
    [
        ("cuda", (torch.ones(1),), "CPU_TENSORS"),
        ("cpu", (torch.ones(1), torch.ones(1, device="meta")), "MIXED_DEVICES"),
    ],
)
def test_device_fallbacks(device: str, inputs: tuple[torch.Tensor, ...], reason: str) -> None:
    engine = Engine(FakeRecorder(device), Config())
    f = make(lambda *a: a[0] + 1)
    torch.testing.assert_close(run(engine, f, *inputs), torch.full((1,), 2.0))
    assert engine.stats.snapshot().fallbacks == {reason: 1}
    assert f.eager_reason is None  # the next call with proper inputs may still record


def test_dump_shows_path_recordings_and_current_node(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    g = make(lambda x: x * 2, "g")
    for _ in range(3):
        engine.mark_step_begin()
        run(engine, g, run(engine, f, torch.ones(1)))
    lines = engine.tree.dump().splitlines()
    assert lines[0] == "tree generation=3"
    assert lines[1].startswith("  f [forward] #0 replays=2")
    # g first saw f's eager warm-up output (copied), then f's pool output (read in place).
    assert lines[2].startswith("    g [forward] #1 replays=0")
    assert lines[3].startswith("    g [forward] #2 replays=1") and lines[3].endswith("*")


def test_drop_function_forgets_its_nodes(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    g = make(lambda x: x * 2, "g")
    run(engine, g, run(engine, f, torch.ones(1)))
    engine.drop_function(f.function_id)
    assert not engine.tree.root.children
    assert engine.tree.current is engine.tree.root


def test_reset_drops_tree_and_marks_held_outputs_overwritten(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    run(engine, f, torch.ones(1))
    held = run(engine, f, torch.ones(1))
    engine.reset()
    gc.collect()
    assert not engine.tree.root.children
    assert engine.liveness.is_overwritten(held)  # type: ignore[arg-type]
    assert engine.recorder.resets == 1  # type: ignore[attr-defined]


def test_record_child_records_under_parent_without_moving(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    child_fn = make(lambda g: g * 2, "f (backward)", role=BACKWARD)
    run(engine, f, torch.ones(2))
    parent = engine.tree.current
    child = engine.record_child(parent, child_fn, [torch.ones(2)])
    assert not isinstance(child, str)
    assert child.parent is parent and child.index == parent.index + 1
    assert engine.tree.current is parent
    torch.testing.assert_close(engine.replay_node(child, [torch.full((2,), 3.0)]).outputs[0],
                               torch.full((2,), 6.0))
    assert engine.tree.current is child


def test_replay_node_refuses_other_layouts(engine: Engine) -> None:
    f = make(lambda x: x + 1, "f")
    child_fn = make(lambda g: g * 2, "f (backward)", role=BACKWARD)
    run(engine, f, torch.ones(2))
    child = engine.record_child(engine.tree.current, child_fn, [torch.ones(2)])
    assert not isinstance(child, str)
    with pytest.raises(PtcCudagraphsError, match="was recorded for inputs"):
        engine.replay_node(child, [torch.ones(3)])


def test_failing_after_record_hook_abandons_the_recording(engine: Engine) -> None:
    f = make(lambda x: x + 1, "hooked", after_record=lambda node: "its backward cannot be recorded")
    for _ in range(2):
        torch.testing.assert_close(run(engine, f, torch.ones(1)), torch.full((1,), 2.0))
    assert f.eager_reason is FallbackReason.CAPTURE_FAILED
    assert not engine.tree.root.children


def test_stats_count_the_buffers_of_copied_inputs(engine: Engine) -> None:
    weight = torch.ones(2, dtype=torch.float64)
    f = make(lambda x, w: x * w, "f", static=frozenset({1}))
    run(engine, f, torch.ones(4, 2), weight)
    snap = engine.stats.snapshot()
    # x (4 x 2 float32) is copied into a buffer; the static weight is read where it is.
    assert (snap.recordings, snap.input_buffer_bytes) == (1, 4 * 2 * 4)


def test_fixed_layouts_key_calls_by_static_addresses_without_the_layout_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import ptc_cudagraphs.engine as engine_module

    engine = Engine(FakeRecorder(), Config())
    p = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    f = make(lambda x, w, s: x * w + s, fixed_layouts=True, static=frozenset({2}))
    full_keys = []
    real = engine_module.input_key
    monkeypatch.setattr(engine_module, "input_key", lambda *a: full_keys.append(1) or real(*a))
    s1, s2 = torch.zeros(3), torch.ones(3)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(run(engine, f, x, p, s1), x * p + s1)
    assert len(full_keys) == 1, "the first call checks devices through the full key; later ones key by addresses"
    assert engine.recorder.recordings[0].copies == 3  # type: ignore[attr-defined]  # x only: the parameter is static
    # A moved static input still records again instead of reading the old memory.
    x = torch.randn(3)
    torch.testing.assert_close(run(engine, f, x, p, s2), x * p + s2)
    torch.testing.assert_close(run(engine, f, x, p, s2), x * p + s2)
    assert engine.stats.snapshot().recordings == 2
