"""Tensor guards checked in C++ (``_tensormeta``) accept exactly the tensors the Python checks accept."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture import tensormeta
from ptc_capture.guards import Guard, Source, compile_guards

X = Source("local", "x")


def _guard(t: torch.Tensor) -> Guard:
    return Guard("tensor", X, (type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.requires_grad))


def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensormeta, "module", lambda: None)
    monkeypatch.setattr(tensormeta, "spec", lambda *a: None)


def test_the_extension_builds_here():
    assert tensormeta.module() is not None, tensormeta.unavailable_reason()


def test_a_static_tensor_guard_is_one_call_into_the_extension():
    check = compile_guards([_guard(torch.zeros(2, 3))])
    ext = tensormeta.module()
    assert ext is not None
    assert ext.check in check.__globals__.values()
    assert check({"x": torch.ones(2, 3)}, {}, {}, ()) is True


def _base_cases() -> list[tuple[str, torch.Tensor]]:
    m = torch.randn(4, 6)
    return [
        ("contiguous", m),
        ("transposed", m.t()),
        ("sliced", m[1:, ::2]),
        ("expanded", torch.randn(1, 6).expand(4, 6)),
        ("zero-dim", torch.tensor(2.0)),
        ("empty", torch.zeros(0, 5)),
        ("channels-last", torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)),
        ("bf16", m.bfloat16()),
        ("fp16", m.half()),
        ("int64", torch.arange(6)),
        ("bool", m > 0),
        ("complex", torch.randn(3, dtype=torch.complex64)),
        ("parameter", torch.nn.Parameter(torch.randn(4, 6))),
        ("frozen parameter", torch.nn.Parameter(torch.randn(4, 6), requires_grad=False)),
        ("requires grad", torch.randn(4, 6, requires_grad=True)),
    ]


def _others() -> list[tuple[str, object]]:
    m = torch.randn(4, 6)
    return [
        *_base_cases(),
        ("other shape", torch.randn(6, 4)),
        ("other rank", torch.randn(24)),
        ("double", m.double()),
        ("meta", torch.empty(4, 6, device="meta")),
        ("sparse", m.to_sparse()),
        ("offset view", torch.randn(30)[6:].view(4, 6)),
        ("detached parameter", torch.nn.Parameter(torch.randn(4, 6)).detach()),
        ("not a tensor", [1, 2]),
        ("none", None),
    ]


@pytest.mark.parametrize("base_name,base", _base_cases(), ids=[n for n, _ in _base_cases()])
def test_cpp_and_python_checks_agree(monkeypatch, base_name, base):
    fast = compile_guards([_guard(base)])
    with monkeypatch.context() as patch:
        _python_only(patch)
        slow = compile_guards([_guard(base)])
    assert tensormeta.module() is not None
    assert tensormeta.module().check in fast.__globals__.values()
    for name, other in _others():
        frame = {"x": other}
        assert fast(frame, {}, {}, ()) is slow(frame, {}, {}, ()), f"{base_name} against {name}"
    assert fast({"x": base}, {}, {}, ()) is True


def test_the_extension_collects_the_ids_the_distinctness_check_compares(monkeypatch):
    # f(x, y)'s entry must not serve f(x, x): the C++ check appends each matched tensor's id.
    y = Source("local", "y")
    a, b = torch.zeros(2, 3), torch.ones(2, 3)
    guards = [_guard(a), Guard("tensor", y, _guard(b).expected), Guard("distinct_tensors", None)]
    fast = compile_guards(guards)
    with monkeypatch.context() as patch:
        _python_only(patch)
        slow = compile_guards(guards)
    ext = tensormeta.module()
    assert ext is not None and ext.check in fast.__globals__.values()
    for frame, expected in (({"x": a, "y": b}, True), ({"x": a, "y": a}, False), ({"x": a, "y": a.t()}, False)):
        assert fast(frame, {}, {}, ()) is expected and slow(frame, {}, {}, ()) is expected, frame
    ids: list[int] = []
    spec = tensormeta.spec(a.dtype, a.device, False, (2, 3), (3, 1))
    assert ext.check(a, torch.Tensor, spec, ids) is True and ids == [id(a)]
    assert ext.check(a.t(), torch.Tensor, spec, ids) is False and ids == [id(a)]
    with pytest.raises(TypeError, match="ids: list"):
        ext.check(a, torch.Tensor, spec, ())


def test_a_cpu_device_with_an_index_matches_cpu_tensors():
    t = torch.zeros(2, 3)
    check = compile_guards([Guard("tensor", X, (torch.Tensor, torch.float32, torch.device("cpu", 0), (2, 3), (3, 1), False))])
    assert check({"x": t}, {}, {}, ()) is True


def test_a_nested_tensor_fails_the_guard_instead_of_raising():
    base = torch.zeros(2, 3)
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3)])
    check = compile_guards([Guard("tensor", X, (type(nested), base.dtype, base.device, (2, 3), (3, 1), False))])
    assert check({"x": nested}, {}, {}, ()) is False


@needs_hook
def test_a_parameter_changed_in_place_recompiles():
    """``p.data = ...`` and ``requires_grad_`` keep the Parameter object and change what the guards read."""
    backend = CountingBackend()
    lin = torch.nn.Linear(4, 3)
    compiled = ptc_capture.optimize(backend)(lin)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), lin(x))
    lin.weight.data = lin.weight.data.double()
    lin.bias.data = lin.bias.data.double()
    xd = x.double()
    torch.testing.assert_close(compiled(xd), lin(xd))
    assert backend.count == 2
    lin.weight.requires_grad_(False)
    lin.bias.requires_grad_(False)
    out = compiled(xd)
    torch.testing.assert_close(out, lin(xd))
    assert out.requires_grad is False
    assert backend.count == 3


def test_an_unloadable_file_is_rebuilt(tmp_path, monkeypatch):
    bad = tmp_path / "_tensormeta-broken.so"
    bad.write_bytes(b"not a shared object")
    monkeypatch.setattr(tensormeta, "_candidates", lambda: [bad])
    found, path, reason = tensormeta._find_or_build()
    assert found is not None, reason
    assert path == bad
    spec = tensormeta.spec(torch.float32, torch.device("cpu"), False, (2,), (1,))
    assert spec is not None
    assert found.check(torch.zeros(2), torch.Tensor, spec) is True


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("PTC_CAPTURE_TENSORMETA", "0")
    found, _, reason = tensormeta._find_or_build()
    assert found is None
    assert "PTC_CAPTURE_TENSORMETA=0" in reason


class _Reshaped(torch.Tensor):
    """A subclass that answers size() in Python: only the Python guard sees what it says."""

    def size(self, dim=None):  # type: ignore[override]
        real = super().size()
        return real if dim is None else real[dim]


def test_a_tensor_subclass_keeps_the_python_guard():
    t = torch.zeros(2, 3).as_subclass(_Reshaped)
    check = compile_guards([_guard(t)])
    ext = tensormeta.module()
    assert ext is not None
    assert ext.check not in check.__globals__.values()
    assert check({"x": torch.ones(2, 3).as_subclass(_Reshaped)}, {}, {}, ()) is True
    assert check({"x": torch.ones(2, 3)}, {}, {}, ()) is False
