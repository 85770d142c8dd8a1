"""End to end on CPU, every handoff round-tripped: inference, training, breaks, recompiles."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx

import ptc
import ptc_spec
from ptc_spec.testing import assert_same, compare_with_eager

BACKENDS = ["eager", "aot_eager", "inductor"]


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def _models() -> tuple[MLP, MLP]:
    torch.manual_seed(0)
    eager = MLP()
    compiled = MLP()
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_inference_matches_eager(backend: str) -> None:
    eager, model = _models()
    compiled = ptc.compile(model, backend=backend)
    with torch.no_grad():
        x = torch.randn(8, 16)
        assert_same(compiled(x), eager(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_step_matches_eager(backend: str) -> None:
    eager, model = _models()
    compiled = ptc.compile(model, backend=backend)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, target = torch.randn(8, 16), torch.randn(8, 4)
        loss_e = torch.nn.functional.mse_loss(eager(x), target)
        loss_c = torch.nn.functional.mse_loss(compiled(x), target)
        assert_same(loss_c, loss_e, what=f"loss at step {step}")
        loss_e.backward()
        loss_c.backward()
        for (name, pe), pc in zip(eager.named_parameters(), model.parameters()):
            assert_same(pc.grad, pe.grad, what=f"grad of {name} at step {step}")
        opt_e.step()
        opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_break_still_matches_eager(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin() * 2
        if y.sum() > 0:  # data-dependent branch: a graph break
            return y.cos()
        return y.exp()

    compiled = ptc.compile(f, backend=backend)
    for seed in range(3):
        torch.manual_seed(seed)
        compare_with_eager(compiled, f, torch.randn(6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_recompiles_on_a_new_shape_and_dtype(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(dim=0) + 1

    compiled = ptc.compile(f, backend=backend)
    for shape, dtype in [((3, 4), torch.float32), ((5, 4), torch.float32), ((3, 4), torch.float64)]:
        compare_with_eager(compiled, f, torch.randn(shape, dtype=dtype))


def test_fullgraph_turns_a_break_into_an_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        print("side effect")
        return x + 1

    with pytest.raises(Exception, match="print"):
        ptc.compile(f, backend="eager", fullgraph=True)(torch.ones(2))


def test_explain_counts_graphs_and_breaks() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        if y.sum() > 0:
            y = y * 2
        return y - 1

    report = ptc.explain(f)(torch.ones(3))
    assert report.graph_count >= 2
    assert report.graph_break_count >= 1


def _unsqueeze_input(x: torch.Tensor) -> torch.Tensor:
    x.unsqueeze_(1)
    return x * 2


def _transpose_input_then_compute(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y = y.relu()
    x.t_()
    return x @ y


def _resize_input(x: torch.Tensor) -> torch.Tensor:
    x.resize_(2, 3)
    return x.sum(0)


METADATA_CASES = {
    "unsqueeze_": (_unsqueeze_input, lambda: [torch.randn(5)]),
    "t_": (_transpose_input_then_compute, lambda: [torch.randn(3, 5), torch.randn(3, 4)]),
    "resize_": (_resize_input, lambda: [torch.randn(6)]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(METADATA_CASES))
def test_in_place_metadata_changes_of_inputs_reach_the_caller(backend: str, case: str) -> None:
    fn, make = METADATA_CASES[case]
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(2):
        got_args = make()
        want_args = [a.clone() for a in got_args]
        assert_same(compiled(*got_args), fn(*want_args))
        for got, want in zip(got_args, want_args):
            assert got.shape == want.shape and got.stride() == want.stride()
            assert_same(got, want)


class _ConvNet(torch.nn.Module):
    # A ResNet-style stem and residual block: what the channels-last layout is for.
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.stem(x)))
        h = torch.nn.functional.max_pool2d(h, 2)
        h = torch.relu(h + self.bn2(self.conv(h)))
        return self.head(h.mean((2, 3)))


@pytest.mark.parametrize("layout", ["on", "off"])
def test_conv_net_training_step_matches_eager_in_either_layout(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _train_conv_net(layout, "cpu", torch.float32, 1e-4, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["on", "off"])
def test_cuda_conv_net_training_step_matches_eager_and_writes_running_statistics_in_place(
    layout: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA's batch norm hands reduced-precision running statistics back as float32: the
    # compiled kernels must still store them over the buffers, with no copy left to the runtime.
    # TF32 (cuDNN's default) rounds each algorithm differently: float32 is compared without it.
    # (Through flags(): OpInfo's test helpers forbid setting cuDNN's flags directly.)
    cudnn = torch.backends.cudnn
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic, allow_tf32=False):
        _train_conv_net(layout, "cuda", dtype, 1e-4 if dtype == torch.float32 else 3e-2, monkeypatch)


def _train_conv_net(layout: str, device: str, dtype: torch.dtype, tol: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTC_INDUCTOR_LAYOUT_OPT", layout)
    monkeypatch.setenv("PTC_GRAPH_CACHE", "0")
    torch.manual_seed(0)
    eager = _ConvNet().to(device, dtype)
    model = _ConvNet().to(device, dtype)
    model.load_state_dict(eager.state_dict())
    compiled = ptc.compile(model)
    x = torch.randn(2, 3, 16, 16, device=device, dtype=dtype)
    versions = [(b._version, c._version) for b, c in zip(eager.buffers(), model.buffers())]
    buffers = {c.data_ptr() for c in model.buffers()}
    copies_into_buffers = 0
    real_copy = torch.Tensor.copy_

    def counted_copy(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        nonlocal copies_into_buffers
        copies_into_buffers += self.data_ptr() in buffers
        return real_copy(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", counted_copy)
    for _ in range(2):
        expected, actual = eager(x), compiled(x)
        assert_same(actual, expected, rtol=tol, atol=tol)
        expected.square().sum().backward()
        actual.square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")
    # The running statistics, written into the buffers by the compiled kernels themselves,
    # equal eager's. Every write counts as an in-place change (one a call), so autograd sees
    # each change eager's would: eager's `num_batches_tracked += 1` counts, while its batch-norm
    # kernel writes the running statistics uncounted.
    assert copies_into_buffers == 0
    for (name, b), c, (eager_v, ours_v) in zip(eager.named_buffers(), model.buffers(), versions):
        torch.testing.assert_close(c, b, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")
        assert c._version - ours_v == 2 >= b._version - eager_v, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_with_update_writes_eager_running_statistics(dtype: torch.dtype) -> None:
    # Its functional form runs as aten's kernel, which returns the running statistics in their
    # own dtype: the graph must say so, or the kernels after it read bf16 memory as float32.
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.ops.aten._batch_norm_with_update(x, w, b, mean, var, 0.1, 1e-5))

    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 5, generator=g).to(dtype), torch.rand(3, generator=g).to(dtype), torch.randn(3, generator=g).to(dtype)
    mean, var = torch.randn(3, generator=g).to(dtype), (torch.rand(3, generator=g) + 0.5).to(dtype)
    eager_mean, eager_var = mean.clone(), var.clone()
    expected = fn(x, w, b, eager_mean, eager_var)
    got = ptc.compile(fn)(x, w, b, mean, var)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert_same(got[:3], expected[:3], rtol=tol, atol=tol)
    assert_same((mean, var), (eager_mean, eager_var), rtol=tol, atol=tol)


def test_padded_logits_train_as_eager_and_come_back_in_eager_dim_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CUDA rule for products with unaligned rows (ptc-inductor computes an LM head over a
    # 1031-token vocabulary into rows of 1032, as torch.compile does), switched on for the CPU:
    # the logits come back as a view of the padded rows, the backward's products over the
    # vocabulary run over it padded with zeros, and the loss and gradients equal eager's.
    from ptc_inductor.lowering import matmul

    monkeypatch.setattr(matmul, "_PADDED_DEVICE_TYPES", frozenset({"cpu", "cuda"}))
    monkeypatch.setattr(matmul, "_PAD_K_MIN_WORK", 0)  # the backward's products over the vocabulary, padded too
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True  # float32 products are padded where TF32 runs them
    try:
        _train_padded_logits()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _train_padded_logits() -> None:
    torch.manual_seed(0)
    vocab = 1031
    eager = torch.nn.Sequential(torch.nn.Embedding(vocab, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, vocab))
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, vocab))
    model.load_state_dict(eager.state_dict())

    def step(m: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = m(idx)
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    compiled = ptc.compile(step)
    idx, targets = torch.randint(0, vocab, (4, 256)), torch.randint(0, vocab, (4, 256))
    logits, loss = compiled(model, idx, targets)
    want_logits, want_loss = step(eager, idx, targets)
    assert logits.stride() == (256 * 1032, 1032, 1)
    assert_same(logits.view(-1, vocab), want_logits.view(-1, vocab), check_stride=False)
    assert_same(loss, want_loss)
    loss.backward()
    want_loss.backward()
    for (name, got), want in zip(model.named_parameters(), eager.parameters()):
        assert_same(got.grad, want.grad, what=name)


def _accumulate(x: torch.Tensor, total: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    total.add_(x.sum(0))
    stats.mul_(0.9).add_(x.mean(0), alpha=0.1)
    return x * total


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inputs_written_by_a_cuda_graph_hold_eager_values_after_every_call(mode: str, dtype: torch.dtype) -> None:
    # The written inputs are arguments, not module state: under CUDA graphs they are copied into
    # the recording's own buffers, so the compiled graph must hand their new values back to copy.
    torch.manual_seed(0)
    compiled = ptc.compile(_accumulate, mode=mode)
    total, stats = torch.zeros(16, device="cuda", dtype=dtype), torch.zeros(16, device="cuda", dtype=dtype)
    eager_total, eager_stats = total.clone(), stats.clone()
    for step in range(4):
        x = torch.randn(8, 16, device="cuda", dtype=dtype)
        expected = _accumulate(x, eager_total, eager_stats)
        got = compiled(x, total, stats)
        assert_same(got, expected, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close((total, stats), (eager_total, eager_stats), rtol=2e-2, atol=2e-2, msg=lambda m, step=step: f"step {step}: {m}")


CROSS_ENTROPY_CASES = {
    "mean": {},
    "sum, ignored items": {"reduction": "sum", "ignore_index": 3},
    "label smoothing": {"label_smoothing": 0.1},
}


@pytest.mark.parametrize("whole_graph", [False, True], ids=["in place", "whole graph"])
@pytest.mark.parametrize("precision", ["float32", "bfloat16", "autocast"])
@pytest.mark.parametrize("case", list(CROSS_ENTROPY_CASES))
def test_a_cross_entropy_forward_saves_its_logits_not_its_log_softmax(
    case: str, precision: str, whole_graph: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # log_softmax reaches the partitioner decomposed: the backward recomputes it from the
    # logits the head wrote and two per-row statistics, where the forward used to write the
    # whole log-softmax only for the loss to read one class of each row. It is decomposed where
    # it stands; the whole joint graph is replayed when that would add a guard (forced here).
    from ptc import pipeline

    if whole_graph:
        monkeypatch.setattr(pipeline, "_decompose_in_place", lambda *args: False)
    kwargs = CROSS_ENTROPY_CASES[case]
    # Under autocast the float32 model's head runs in bf16 and the loss casts back to float32.
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 50)).to(dtype)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 50)).to(dtype)
    model.load_state_dict(eager.state_dict())

    def step(m: torch.nn.Module, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", torch.bfloat16, enabled=precision == "autocast"):
            return torch.nn.functional.cross_entropy(m(x).float(), targets, **kwargs)

    compiled = ptc.compile(step, options={"debug_dir": str(tmp_path)})
    for _ in range(2):
        x, targets = torch.randn(24, 16, dtype=dtype), torch.randint(0, 50, (24,))
        loss, want = compiled(model, x, targets), step(eager, x, targets)
        assert_same(loss, want)
        loss.backward()
        want.backward()
        for (name, got), expected in zip(model.named_parameters(), eager.parameters()):
            assert_same(got.grad, expected.grad, what=name)
    forward = ptc_spec.loads((tmp_path / "forward.ptcg").read_bytes())
    outputs = list(forward.graph.output_node().args[0])  # type: ignore[arg-type]
    rows = [n for n in outputs if isinstance(n, torch.fx.Node) and tuple(n.meta[ptc_spec.META_KEY].shape) == (24, 50)]
    assert [n.target for n in rows] == [torch.ops.aten.addmm.default], [n.name for n in rows]
