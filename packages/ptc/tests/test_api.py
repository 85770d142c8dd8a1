"""ptc.compile's surface: options, errors, backends, decorators."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
import torch

import ptc
from ptc import MissingComponentError, UnknownOptionError
from ptc.config import make_options
from ptc_spec.testing import compare_with_eager


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2 + y).sum(dim=-1)


def test_unknown_backend_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownOptionError, match=r"unknown backend 'tvm': valid backends are .*aot_eager.*eager.*inductor"):
        ptc.compile(fn, backend="tvm")


def test_unknown_mode_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownOptionError, match=r"unknown mode 'fast': valid modes are default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs"):
        ptc.compile(fn, mode="fast")


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownOptionError, match=r"unknown option 'triton.cudagraphs': valid options are"):
        ptc.compile(fn, options={"triton.cudagraphs": True})


def test_reduce_overhead_without_cudagraphs_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ptc_cudagraphs" else real(name, *a))
    with pytest.raises(MissingComponentError, match=r"needs ptc-cudagraphs: pip install ptc-cudagraphs"):
        ptc.compile(fn, mode="reduce-overhead")


def test_every_backend_is_listed_and_registered_as_an_entry_point() -> None:
    assert {"eager", "aot_eager", "inductor", "cudagraphs"} <= set(ptc.list_backends())
    try:
        importlib.metadata.distribution("ptc")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ptc runs from source here; entry points exist only when it is installed")
    names = {ep.name for ep in importlib.metadata.entry_points(group="ptc.backends")}
    assert {"aot_eager", "inductor", "cudagraphs"} <= names


def test_environment_switch_turns_boundary_checks_on() -> None:
    assert make_options(None, None, {"PTC_CHECK_BOUNDARIES": "1"}).check_boundaries
    assert not make_options(None, None, {}).check_boundaries
    assert make_options("max-autotune", None, {}).autotune


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_function_matches_eager(backend: str) -> None:
    compiled = ptc.compile(fn, backend=backend)
    compare_with_eager(compiled, fn, torch.randn(4, 8), torch.randn(4, 8))


def test_usable_as_a_decorator_with_options() -> None:
    @ptc.compile(backend="aot_eager")
    def g(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * x

    x = torch.randn(5)
    compare_with_eager(g, lambda t: torch.sigmoid(t) * t, x)


def test_custom_callable_backend_receives_the_graph() -> None:
    seen = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        seen.append(len(example_inputs))
        return gm

    compiled = ptc.compile(fn, backend=backend)
    compare_with_eager(compiled, fn, torch.randn(2, 3), torch.randn(2, 3))
    assert seen == [2]


def test_disable_runs_eagerly_and_is_compiling_is_false_outside() -> None:
    assert not ptc.is_compiling()
    calls = []

    @ptc.disable
    def eager_only(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x + 1

    assert torch.equal(eager_only(torch.ones(2)), torch.full((2,), 2.0))
    assert calls == [1]


def test_log_channels_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown log channel bogus: valid channels are all, graph_breaks"):
        ptc.enable_logs(["bogus"])


def test_ptc_logs_print_each_line_once() -> None:
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import torch, ptc
        f = ptc.compile(lambda x: x * 2, backend="eager", dynamic=False)
        f(torch.randn(3)); f(torch.randn(4))
        """
    )
    env = {**os.environ, "PTC_LOGS": "recompiles"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("[ptc.capture.recompiles]")]
    assert len(lines) == 1 and "size of x dim 0 changed 3 -> 4" in lines[0], out.stderr[-2000:]
