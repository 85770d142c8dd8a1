"""The public API: optimize, backends, allow_in_graph, is_compiling, errors, explain, config, logs."""

from __future__ import annotations

import logging
import traceback

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.backends import list_backends, lookup_backend
from ptc_capture.config import config_from_env
from ptc_capture.errors import BackendError, PtcCaptureError
from ptc_spec.testing import compare_with_eager


def test_eager_backend_is_registered():
    assert "eager" in list_backends()
    assert callable(lookup_backend("eager"))


def test_unknown_backend_names_known_ones():
    with pytest.raises(BackendError, match="unknown backend 'nope'.*eager"):
        ptc_capture.optimize("nope")


@needs_hook
def test_registered_backend_is_used_by_name():
    seen = []

    def recording(gm, example_inputs):
        seen.append([tuple(t.shape) for t in example_inputs])
        return gm.forward

    ptc_capture.register_backend(recording, name="test_recording")

    def fn(x):
        return x * 2

    compiled = ptc_capture.optimize("test_recording")(fn)
    compare_with_eager(compiled, fn, torch.randn(2, 3))
    assert seen == [[(2, 3)]]


@needs_hook
def test_backend_output_is_used():
    def doubled(gm, example_inputs):
        return lambda *args: tuple(2 * t for t in gm.forward(*args))

    compiled = ptc_capture.optimize(doubled)(lambda x: x + 1)
    torch.testing.assert_close(compiled(torch.zeros(2)), torch.full((2,), 2.0))


@needs_hook
def test_is_compiling_is_true_only_while_tracing():
    def fn(x):
        if ptc_capture.is_compiling():
            return x + 1
        return x - 1

    compiled = ptc_capture.optimize("eager")(fn)
    torch.testing.assert_close(compiled(torch.zeros(1)), torch.ones(1))
    assert not ptc_capture.is_compiling()


def opaque(x):
    return x * 3


@needs_hook
def test_allow_in_graph_records_one_node():
    ptc_capture.allow_in_graph(opaque)
    backend = CountingBackend()

    def fn(x):
        return opaque(x) + 1

    compiled = ptc_capture.optimize(backend)(fn)
    compare_with_eager(compiled, fn, torch.randn(3))
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert opaque in targets


def _raises(x):
    y = x + 1
    raise ValueError(f"bad value {y.shape[0]}")


def _shape_error(x):
    return x @ x


@needs_hook
@pytest.mark.parametrize("fn,error,message", [(_raises, ValueError, "bad value 3"), (_shape_error, RuntimeError, "cannot be multiplied")])
def test_user_exception_surfaces_as_in_eager(fn, error, message):
    compiled = ptc_capture.optimize("eager")(fn)
    with pytest.raises(error, match=message) as info:
        compiled(torch.randn(3, 2))
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert fn.__name__ in frames


@needs_hook
def test_optimize_as_decorator_with_keywords():
    @ptc_capture.optimize("eager", fullgraph=True)
    def fn(x, *, scale=2):
        return x * scale

    torch.testing.assert_close(fn(torch.ones(2), scale=3), torch.full((2,), 3.0))
    torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 2.0))


@needs_hook
def test_varargs_and_kwargs_signature():
    def fn(x, *rest, bias=0.0, **extra):
        out = x + bias
        for r in rest:
            out = out * r
        return out + extra.get("shift", 0)

    compiled = ptc_capture.optimize("eager")(fn)
    compare_with_eager(lambda *a: compiled(*a, bias=1.0, shift=2), lambda *a: fn(*a, bias=1.0, shift=2), torch.randn(2), torch.randn(2))


@needs_hook
def test_explain_report_is_readable():
    def fn(x):
        y = x.sin()
        print(end="")
        return y.cos()

    report = ptc_capture.explain(fn)(torch.randn(2))
    text = str(report)
    assert report.graph_count == 2 and report.graph_break_count == 1
    assert "Graph count: 2" in text and "print()" in text and "Tensor.sin" in text
    assert report.ops_per_graph == [["Tensor.sin"], ["Tensor.cos"]]
    torch.testing.assert_close(report.out, fn(torch.zeros(2)) * 0 + report.out)


def test_errors_share_one_base():
    from ptc_capture import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), PtcCaptureError)


def test_config_from_env():
    config = config_from_env({"PTC_CAPTURE_RECOMPILE_LIMIT": "3", "PTC_LOGS": "guards, recompiles", "PTC_CAPTURE_SUPPRESS_ERRORS": "1"})
    assert config.recompile_limit == 3
    assert config.logs == frozenset({"guards", "recompiles"})
    assert config.suppress_errors


@needs_hook
def test_log_channels_switch_on(caplog):
    from ptc_capture.logs import set_logs

    set_logs(["graph_breaks"])
    try:
        with caplog.at_level(logging.DEBUG, logger="ptc.capture.graph_breaks"):

            def fn(x):
                print(end="")
                return x + 1

            ptc_capture.optimize("eager")(fn)(torch.zeros(1))
        assert any("print()" in r.getMessage() for r in caplog.records)
    finally:
        set_logs([])


def test_unknown_log_channel_is_refused():
    from ptc_capture.logs import set_logs

    with pytest.raises(ValueError, match="unknown ptc_capture log channels"):
        set_logs(["nope"])
