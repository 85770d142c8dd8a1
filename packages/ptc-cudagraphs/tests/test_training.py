"""Training through replayed forward and backward graphs matches eager training."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from models import Block, mlp

import ptc_cudagraphs as pcg
from ptc_cudagraphs.errors import OverwrittenOutputError

gpu = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh() -> None:
    pcg.reset()


def _train(model: torch.nn.Module, fn: Callable[..., object],
           data: list[tuple[torch.Tensor, torch.Tensor]], set_to_none: bool) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=set_to_none)
        loss = F.mse_loss(fn(x), y)  # type: ignore[arg-type]
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _compare(make: Callable[[], torch.nn.Module], shape: tuple[int, ...],
             set_to_none: bool) -> None:
    torch.manual_seed(0)
    ref = make()
    model = copy.deepcopy(ref)
    data = [(torch.randn(*shape, device="cuda"), torch.randn(*shape[:-1], 16, device="cuda")
             if shape[-1] == 32 else torch.randn(*shape, device="cuda")) for _ in range(20)]
    fast = pcg.cudagraphify(model, [data[0][0]])
    want = _train(ref, ref, data, set_to_none)
    got = _train(model, fast, data, set_to_none)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    snap = pcg.stats()
    # Forward and backward are recorded on step 1; every later step replays both.
    assert (snap.recordings, snap.replays) == (2, 19 + 19), snap


@gpu
@pytest.mark.parametrize("set_to_none", [True, False])
def test_mlp_training_matches_eager(set_to_none: bool) -> None:
    _compare(mlp, (8, 32), set_to_none)


@gpu
def test_gpt_block_training_matches_eager() -> None:
    _compare(lambda: Block().cuda(), (4, 16, 64), True)


def _backward_outputs(fast: pcg.CudaGraphed) -> set[int]:
    """Addresses of the gradients the recorded backward writes on every replay."""
    return {o.data_ptr() for n in fast.engine.tree.nodes() if n.role == "backward" and n.recording
            for o in n.recording.static_outputs if isinstance(o, torch.Tensor)}


@gpu
def test_gradient_accumulation_matches_eager() -> None:
    # Two backward passes per step without zeroing: the second replay writes the memory that
    # the first pass's gradients were adopted into, and must add to them, not replace them.
    torch.manual_seed(0)
    ref = mlp()
    model = copy.deepcopy(ref)
    fast = pcg.cudagraphify(model, [torch.randn(8, 32, device="cuda")])
    data = [[(torch.randn(8, 32, device="cuda"), torch.randn(8, 16, device="cuda")) for _ in range(2)]
            for _ in range(5)]
    for net, fn in ((ref, ref), (model, fast)):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for micro in data:
            opt.zero_grad()
            for x, y in micro:
                F.mse_loss(fn(x), y).backward()  # type: ignore[arg-type]
            opt.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


@gpu
def test_parameter_gradients_are_the_backward_graphs_outputs_not_copies() -> None:
    model = mlp()
    fast = pcg.cudagraphify(model, [torch.randn(8, 32, device="cuda")])
    for _ in range(3):
        model.zero_grad()
        fast(torch.randn(8, 32, device="cuda")).sum().backward()  # type: ignore[attr-defined]
    assert {p.grad.data_ptr() for p in model.parameters()} <= _backward_outputs(fast)  # type: ignore[union-attr]


@gpu
def test_gradients_flow_to_inputs_requiring_grad() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w).sum(1)

    w = torch.randn(8, 8, device="cuda", requires_grad=True)
    fast = pcg.cudagraphify(fn, [torch.randn(4, 8, device="cuda"), w], static_inputs=[1])
    for _ in range(5):
        x = torch.randn(4, 8, device="cuda", requires_grad=True)
        fast(x, w).pow(2).sum().backward()  # type: ignore[attr-defined]
        gx, gw = x.grad, w.grad.clone()  # type: ignore[union-attr]
        w.grad = None
        x2 = x.detach().requires_grad_(True)
        fn(x2, w).pow(2).sum().backward()
        torch.testing.assert_close(gx, x2.grad)
        torch.testing.assert_close(gw, w.grad)
        w.grad = None
    assert pcg.stats().replays == 8


@gpu
def test_backward_after_a_later_forward_raises() -> None:
    model = mlp()
    fast = pcg.cudagraphify(model, [torch.randn(8, 32, device="cuda")], name="net")
    for _ in range(3):
        fast(torch.randn(8, 32, device="cuda")).sum().backward()  # type: ignore[attr-defined]
    first = fast(torch.randn(8, 32, device="cuda"))
    fast(torch.randn(8, 32, device="cuda"))
    with pytest.raises(OverwrittenOutputError, match="backward of net ran after a later call"):
        first.sum().backward()  # type: ignore[attr-defined]


@pytest.fixture
def cpu_graphed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., pcg.CudaGraphed]:
    from fakes import FrozenRecorder

    from ptc_cudagraphs import graphed, registry
    from ptc_cudagraphs.config import Config
    from ptc_cudagraphs.engine import Engine

    engine = Engine(FrozenRecorder("cpu"), Config())
    monkeypatch.setitem(registry._ENGINES, torch.device("cpu"), engine)
    # CPU examples pick the current CUDA device when one exists; the fake records on the CPU.
    monkeypatch.setattr(graphed, "_device_of", lambda _inputs: torch.device("cpu"))

    def make(fn: Callable[..., object], example: list[object], **kw: object) -> pcg.CudaGraphed:
        fast = pcg.cudagraphify(fn, example, **kw)  # type: ignore[arg-type]
        fast._infer.eager_reason = fast._train.eager_reason = None  # the fake records on a CPU
        return fast

    return make


def test_training_records_backward_with_forward_and_then_only_replays(
    cpu_graphed: Callable[..., pcg.CudaGraphed],
) -> None:
    torch.manual_seed(0)
    model = mlp("cpu")
    fast = cpu_graphed(model, [torch.randn(4, 32)], name="net")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        opt.zero_grad()
        fast(torch.randn(4, 32)).sum().backward()  # type: ignore[attr-defined]
        assert all(p.grad is not None for p in model.parameters())
        opt.step()  # moves parameter versions: eager autograd over the recording would fail
    nodes = list(fast.engine.tree.nodes())
    assert [(n.name, n.role, n.replays) for n in nodes] == [
        ("net", "forward", 3), ("net (backward)", "backward", 3)]
    assert nodes[0].recording.launches == 1  # type: ignore[union-attr]  # before the backward's warm-up


def test_cpu_backward_after_a_later_forward_raises(cpu_graphed: Callable[..., pcg.CudaGraphed]) -> None:
    model = mlp("cpu")
    fast = cpu_graphed(model, [torch.randn(4, 32)], name="net")
    fast(torch.randn(4, 32))
    first = fast(torch.randn(4, 32))
    fast(torch.randn(4, 32))
    with pytest.raises(OverwrittenOutputError, match="backward of net ran after a later call"):
        first.sum().backward()  # type: ignore[attr-defined]


def test_gradients_reach_inputs_and_static_inputs(cpu_graphed: Callable[..., pcg.CudaGraphed]) -> None:
    w = torch.randn(8, 8, requires_grad=True)
    fast = cpu_graphed(lambda x, w: (x @ w).sum(1), [torch.randn(4, 8), w], static_inputs=[1])
    for _ in range(3):
        x = torch.randn(4, 8, requires_grad=True)
        fast(x, w).sum().backward()  # type: ignore[attr-defined]
        assert x.grad is not None and x.grad.shape == x.shape
        assert w.grad is not None
        w.grad = None
    assert pcg.stats().replays >= 4


def test_adopted_gradients_get_their_own_memory_before_a_replay_overwrites_them(
    cpu_graphed: Callable[..., pcg.CudaGraphed],
) -> None:
    model = mlp("cpu")
    fast = cpu_graphed(model, [torch.randn(4, 32)], name="net")
    x = torch.randn(4, 32)
    for _ in range(2):  # the first call records; the second replays forward and backward
        model.zero_grad()
        fast(x).sum().backward()  # type: ignore[attr-defined]
    pool = _backward_outputs(fast)
    adopted = {p.grad.data_ptr() for p in model.parameters()}  # type: ignore[union-attr]
    assert adopted <= pool
    before = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    fast(x)  # a replay that may overwrite the backward's outputs: the gradients move out first
    assert not {p.grad.data_ptr() for p in model.parameters()} & pool  # type: ignore[union-attr]
    for p, want in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.grad, want)
