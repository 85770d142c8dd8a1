"""torch.distributed collectives become functional collective nodes; wrapper modules run as they are.

One gloo process (world size 1) is enough to see what the graph holds and that it runs as
eager does; two ranks are ptc's own tests (packages/ptc/tests/test_distributed.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture

pytestmark = [needs_hook, pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")]


@pytest.fixture(scope="module", autouse=True)
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    store = Path(tmp_path_factory.mktemp("store")) / "file"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()

# The newer names where this torch has them (2.11 on the GPU machine may not).
ALL_GATHER = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor


def all_reduce_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y + dist.get_world_size()


def functional(x: torch.Tensor) -> torch.Tensor:
    return funcol.all_reduce(x, "max", dist.group.WORLD) + ALL_GATHER(x, 0, dist.group.WORLD)


@pytest.mark.parametrize(
    ("fn", "expected_ops"),
    [
        (all_reduce_in_place, ["mul", "all_reduce.default", "wait_tensor.default", "copy_", "add"]),
        (functional, ["all_reduce.default", "wait_tensor.default", "all_gather_into_tensor.default", "wait_tensor.default", "add"]),
    ],
)
def test_collective_is_a_functional_node_and_its_wait(fn: object, expected_ops: list[str], backend: CountingBackend) -> None:
    x = torch.randn(3, 4)
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    torch.testing.assert_close(compiled(x), fn(x))  # type: ignore[operator]
    assert backend.count == 1
    assert [op.split(".", 1)[-1] if "_c10d" in op else op for op in backend.ops()] == expected_ops


def test_async_collective_is_a_graph_break_that_runs_eagerly(backend: CountingBackend) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        dist.all_reduce(y, async_op=True).wait()
        return y * 2

    x = torch.randn(4)
    torch.testing.assert_close(ptc_capture.optimize(backend)(fn)(x), fn(x))
    report = ptc_capture.explain(fn)(x)
    assert "async_op=True" in str(report.break_reasons[0])


class Wrapper(torch.nn.Module):
    """A module wrapper whose forward is bookkeeping around the module it wraps (as DDP's is)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.inner(x)


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).relu()


def test_registered_wrapper_runs_as_it_is_and_its_module_is_captured(backend: CountingBackend) -> None:
    ptc_capture.register_module_wrapper(Wrapper, lambda wrapper: wrapper.inner)
    model = Wrapper(Inner())
    x = torch.randn(2, 4)
    out = ptc_capture.optimize(backend)(model)(x)
    torch.testing.assert_close(out, model.inner(x))
    # The wrapper's forward ran eagerly (its counter moved), the graph is the inner module's.
    assert model.calls == 1
    assert backend.count == 1 and backend.ops() == ["linear", "relu"]
