"""torch.autocast regions trace into one graph that switches autocast, with eager's dtypes and guards on the ambient state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec import META_KEY
from ptc_spec.testing import compare_with_eager

pytestmark = [needs_hook, pytest.mark.filterwarnings("ignore:`torch.cpu.amp.autocast:FutureWarning")]

torch.manual_seed(0)
LIN = torch.nn.Linear(8, 6)
NORM = torch.nn.LayerNorm(6)
CONV = torch.nn.Conv1d(4, 4, 3)


def _linear_softmax(x: torch.Tensor) -> Any:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = LIN(x)
        z = torch.softmax(y, -1)
    return y, z, y.float() + 1


def _float32_ops(x: torch.Tensor) -> Any:
    # Ops autocast casts down (linear, matmul, conv) next to ones it leaves alone or runs in float32.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = LIN(x)
        cast_down = (y, x @ x.t(), CONV(x.view(2, 4, 4)))
        float32 = (F.mse_loss(y, x[:, :6]), y.prod(), F.cross_entropy(y, torch.tensor([1, 2, 3, 0])))
        unchanged = (NORM(y), y.sum(), F.log_softmax(y, -1), torch.cat([y, x[:, :6]]))
        return cast_down, float32, unchanged


def _amp_autocast_float16(x: torch.Tensor) -> Any:
    with torch.amp.autocast("cpu", dtype=torch.float16) as manager:
        y = LIN(x)
        state = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), isinstance(manager, torch.autocast))
    return y, state, torch.is_autocast_enabled("cpu")


def _default_dtype(x: torch.Tensor) -> Any:
    with torch.autocast("cpu"):  # no dtype: eager's default for cpu (bfloat16)
        return LIN(x)


def _disabled_inside(x: torch.Tensor) -> Any:
    with torch.autocast("cpu", dtype=torch.float16):
        a = LIN(x)
        with torch.autocast("cpu", enabled=False):
            b = LIN(x)
            c = torch.mm(a.float(), LIN.weight)
        with torch.autocast("cpu"):  # no dtype inside a region: the region's dtype (float16)
            d = LIN(x)
        return a, b, c, d, torch.is_autocast_enabled("cpu")


def _legacy_cpu_amp(x: torch.Tensor) -> Any:
    with torch.cpu.amp.autocast():  # type: ignore[attr-defined]
        return LIN(x), torch.is_autocast_cpu_enabled()


def _linear(x: torch.Tensor) -> Any:
    return LIN(x)


_decorated = torch.autocast("cpu", dtype=torch.bfloat16)(_linear)  # as @torch.autocast(...) on a def


def _calls_decorated(x: torch.Tensor) -> Any:
    return _decorated(x) * 2, LIN(x)


CASES: dict[str, Callable[..., Any]] = {
    "linear_softmax": _linear_softmax,
    "float32_ops": _float32_ops,
    "amp_autocast_float16": _amp_autocast_float16,
    "default_dtype": _default_dtype,
    "disabled_inside": _disabled_inside,
    "legacy_cpu_amp": _legacy_cpu_amp,
    "decorated_function": _calls_decorated,
}


def _thread_state() -> tuple[Any, ...]:
    torch.autocast_increment_nesting()
    nesting = torch.autocast_decrement_nesting()
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled(), nesting


@pytest.fixture(autouse=True)
def _state_is_left_as_found() -> Iterator[None]:
    before = _thread_state()
    yield
    assert _thread_state() == before


def _output_metas_match(backend: CountingBackend, outputs: Any) -> None:
    tensors = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    output = next(n for n in backend.graphs[-1].graph.nodes if n.op == "output")
    metas = [node.meta[META_KEY] for node in output.args[0]]
    assert [m.dtype for m in metas] == [t.dtype for t in tensors][: len(metas)]


@pytest.mark.parametrize("name", list(CASES))
def test_autocast_region_is_one_graph_with_eager_dtypes(name: str, backend: CountingBackend) -> None:
    fn = CASES[name]
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(4, 8)
    compare_with_eager(compiled, fn, x)
    assert backend.count == 1
    compare_with_eager(compiled, fn, x)
    assert backend.count == 1


def test_graph_metadata_carries_autocast_dtypes(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_float32_ops)
    out = torch.utils._pytree.tree_leaves(compiled(torch.randn(4, 8)))
    _output_metas_match(backend, out)
    assert {t.dtype for t in out} == {torch.bfloat16, torch.float32}


@pytest.mark.parametrize("name", ["linear_softmax", "float32_ops", "disabled_inside"])
def test_autocast_region_gradients_equal_eager(name: str, backend: CountingBackend) -> None:
    fn = CASES[name]
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    compare_with_eager(compiled, fn, torch.randn(4, 8, requires_grad=True), grads=True)
    assert backend.count == 1


def _break_inside(x: torch.Tensor) -> Any:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = LIN(x)
        print("", end="")
        b = LIN(x) + a
    return a, b, LIN(x), torch.is_autocast_enabled("cpu")


def test_graph_break_inside_region_resumes_inside_it(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend)(_break_inside)
    x = torch.randn(4, 8)
    compare_with_eager(compiled, _break_inside, x)
    assert backend.count == 2
    compare_with_eager(compiled, _break_inside, x)
    assert backend.count == 2


def _plain(x: torch.Tensor) -> Any:
    return LIN(x).relu(), torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("first_inside", [False, True])
def test_ambient_autocast_is_guarded(first_inside: bool, backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend)(_plain)
    x = torch.randn(4, 8)
    order = [True, False] if first_inside else [False, True]
    for inside in order + order:
        if inside:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = compare_with_eager(compiled, _plain, x)
            assert out[0].dtype == torch.bfloat16
        else:
            out = compare_with_eager(compiled, _plain, x)
            assert out[0].dtype == torch.float32
    assert backend.count == 2


def test_ambient_autocast_dtype_change_recompiles(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend)(_plain)
    x = torch.randn(4, 8)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        with torch.autocast("cpu", dtype=dtype):
            assert compare_with_eager(compiled, _plain, x)[0].dtype == dtype
    assert backend.count == 2


def test_region_inside_ambient_region_restores_the_ambient_state(backend: CountingBackend) -> None:
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_disabled_inside)
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compare_with_eager(compiled, _disabled_inside, x)
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert (x @ x.t()).dtype == torch.bfloat16


def test_graph_raising_inside_region_restores_autocast_as_eager(backend: CountingBackend) -> None:
    # Inside a bfloat16 region autocast's weight-cast cache keeps the bfloat16 copy of LIN.weight,
    # which a float16 region then reuses: eager raises a dtype mismatch, and so must the graph.
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_disabled_inside)
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _plain(x)
        with pytest.raises(RuntimeError, match="same dtype"):
            _disabled_inside(x)
        eager_state = _thread_state()
        with pytest.raises(RuntimeError, match="same dtype"):
            compiled(x)
        assert _thread_state() == eager_state


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_autocast_region_defaults_to_float16(backend: CountingBackend) -> None:
    lin = torch.nn.Linear(8, 6).cuda()
    norm = torch.nn.LayerNorm(6).cuda()

    def fn(x: torch.Tensor) -> Any:
        with torch.autocast("cuda"):
            y = lin(x)
            return y, torch.softmax(y, -1), norm(y), torch.get_autocast_dtype("cuda")

    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    out = compare_with_eager(compiled, fn, torch.randn(4, 8, device="cuda", requires_grad=True), grads=True)
    assert [t.dtype for t in out[:3]] == [torch.float16, torch.float32, torch.float32]
    assert backend.count == 1
