"""The compiled guard function accepts exactly the values the trace assumed."""

from __future__ import annotations

import re
import types

import pytest
import torch

from ptc_capture.guards import Guard, Source, compile_guards, source_expr

X = Source("local", "x")


def _tensor_guard(t: torch.Tensor) -> Guard:
    return Guard("tensor", X, (type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.requires_grad))


BASE = torch.zeros(2, 3)


@pytest.mark.parametrize(
    "other,ok",
    [
        (torch.ones(2, 3), True),
        (torch.zeros(3, 2), False),
        (torch.zeros(2, 3, dtype=torch.float64), False),
        (torch.zeros(3, 2).t(), False),
        (torch.zeros(2, 3, requires_grad=True), False),
        (torch.zeros(2, 3, device="meta"), False),
        (torch.nn.Parameter(torch.zeros(2, 3)), False),
        (torch.zeros(6), False),
        ("not a tensor", False),
    ],
    ids=["same", "shape", "dtype", "stride", "requires_grad", "device", "subclass", "rank", "type"],
)
def test_tensor_guard(other, ok):
    check = compile_guards([_tensor_guard(BASE)])
    assert check({"x": other}, {}, {}, ()) is ok


@pytest.mark.parametrize(
    "guard,value,ok",
    [
        (Guard("const", X, 3), 3, True),
        (Guard("const", X, 3), 3.0, False),
        (Guard("const", X, True), 1, False),
        (Guard("const", X, None), None, True),
        (Guard("const", X, float("nan")), float("nan"), True),
        (Guard("const", X, "a"), "b", False),
        (Guard("len", X, (list, 2)), [1, 2], True),
        (Guard("len", X, (list, 2)), (1, 2), False),
        (Guard("keys", X, (dict, ("a", "b"))), {"a": 1, "b": 2}, True),
        (Guard("keys", X, (dict, ("a", "b"))), {"b": 1, "a": 2}, False),
        (Guard("keys", X, (dict, ((1, torch.float32), None))), {(1, torch.float32): 0, None: 1}, True),
        (Guard("keys", X, (dict, ((1, torch.float32), None))), {(True, torch.float32): 0, None: 1}, False),
        (Guard("keys", X, (dict, (1,))), {1.0: 0}, False),
        (Guard("const", Source("values", None, X).item(1), 2), {"a": 1, torch.float16: 2}, True),
        (Guard("const", Source("values", None, X).item(1), 2), {"a": 1, torch.float16: 3}, False),
        (Guard("type", X, int), 5, True),
        (Guard("id", X, len), len, True),
        (Guard("id", X, len), abs, False),
    ],
)
def test_python_guards(guard, value, ok):
    assert compile_guards([guard])({"x": value}, {}, {}, ()) is ok


def test_missing_source_is_a_miss_not_an_error():
    guard = Guard("const", Source("attr", "missing", X), 1)
    assert compile_guards([guard])({"x": object()}, {}, {}, ()) is False


def test_global_absent_and_builtin_guards():
    guards = [Guard("absent", None, "len"), Guard("id", Source("builtin", "len"), len)]
    check = compile_guards(guards)
    assert check({}, {}, {"len": len}, ())
    assert not check({}, {"len": abs}, {"len": len}, ())


def test_closure_and_nested_sources_render():
    source = Source("closure", 0).attr("weight").item("k")
    assert source_expr(source) == "C[0].cell_contents.weight['k']"
    assert source_expr(X.attr("a"), {"x": "_a0"}) == "_a0.a"


def test_values_of_a_dict_are_read_once_for_all_their_guards(caplog):
    values = Source("values", None, X)
    guards = [Guard("keys", X, (dict, (torch.float16, None)))] + [Guard("const", values.item(i), i) for i in range(2)]
    assert source_expr(values.item(1)) == "list(L['x'].values())[1]"
    with caplog.at_level("DEBUG", logger="ptc.capture.guards"):
        check = compile_guards(guards)
    text = caplog.records[-1].getMessage()
    assert text.count(".values()") == 1, text
    assert check({"x": {torch.float16: 0, None: 1}}, {}, {}, ())
    assert not check({"x": {torch.float16: 0, None: 2}}, {}, {}, ())


def test_grad_mode_guard():
    check = compile_guards([Guard("grad_mode", None, True)])
    assert check({}, {}, {}, ())
    with torch.no_grad():
        assert not check({}, {}, {}, ())


class _Counting:
    """An object whose attribute reads are counted (what a guard function costs per call)."""

    def __init__(self, **values):
        self.reads = 0
        self._values = values

    def __getattr__(self, name):
        if name.startswith("_") or name == "reads":
            raise AttributeError(name)
        self.reads += 1
        return self._values[name]


def test_guards_sharing_a_prefix_read_it_once():
    inner = _Counting(a=1, b=2, c=3)
    outer = _Counting(inner=inner)
    guards = [Guard("const", X.attr("inner").attr(name), value) for name, value in (("a", 1), ("b", 2), ("c", 3))]
    check = compile_guards(guards)
    assert check({"x": outer}, {}, {}, ())
    assert outer.reads == 1 and inner.reads == 3
    inner._values["b"] = 5
    assert not check({"x": outer}, {}, {}, ())


def _f(a, b=None):
    return a


def _g(c, d=None):
    return c


@pytest.mark.parametrize("id_first", [True, False])
def test_guards_below_an_identity_guarded_code_object_are_implied(id_first):
    code = X.attr("__code__")
    below = [Guard("type", code, type(_f.__code__)), Guard("const", code.attr("co_varnames").item(0), "a"),
             Guard("len", code.attr("co_varnames"), (tuple, 2))]  # fmt: skip
    same = Guard("id", code, _f.__code__)
    check = compile_guards([same, *below] if id_first else [*below, same])
    assert check({"x": _f}, {}, {}, ())
    assert not check({"x": _g}, {}, {}, ())  # same shape of code, another object

    def h(a, b=None):
        return b

    assert not check({"x": h}, {}, {}, ())


@pytest.mark.parametrize("holder", [types.SimpleNamespace(v=[1, 2]), ([1, 2],)], ids=["object", "tuple_of_a_list"])
def test_guards_below_an_identity_guarded_mutable_object_stay(holder):
    below = X.attr("v") if isinstance(holder, types.SimpleNamespace) else X.item(0)
    guards = [Guard("id", X, holder), Guard("len", below, (list, 2))]
    check = compile_guards(guards)
    assert check({"x": holder}, {}, {}, ())
    (holder.v if isinstance(holder, types.SimpleNamespace) else holder[0]).append(3)
    assert not check({"x": holder}, {}, {}, ())


def test_what_two_sources_of_one_pinned_object_lead_to_is_checked_once(caplog):
    # Two layers reach one class (say, for its forward's globals): once both are pinned to it,
    # the guards below the second are the first's, and only the identity guards repeat.
    class Shared:
        scale = 2

    a, b = Source("local", "a").attr("__class__"), Source("local", "b").attr("__class__")
    guards = [Guard("id", a, Shared), Guard("const", a.attr("scale"), 2), Guard("id", b, Shared), Guard("const", b.attr("scale"), 2)]
    with caplog.at_level("DEBUG", logger="ptc.capture.guards"):
        check = compile_guards(guards)
    text = caplog.records[-1].getMessage()
    assert text.count(".scale") == 1 and text.count("__class__") == 2, text

    class Other:
        scale = 2

    assert check({"a": Shared(), "b": Shared()}, {}, {}, ())
    # The second source reaching another object fails its identity guard, which stays.
    assert not check({"a": Shared(), "b": Other()}, {}, {}, ())
    Shared.scale = 3
    try:
        assert not check({"a": Shared(), "b": Shared()}, {}, {}, ())
    finally:
        Shared.scale = 2


def test_instances_pinned_by_identity_read_their_class_level_values_through_one_of_them(caplog):
    # Twelve layers, each pinned by identity, reach their class's values each through its own
    # chain. A type guard per instance fixes the class, so one chain serves all of them.
    class Layer:
        scale = 2

    class Faked(Layer):
        __class__ = Layer  # type: ignore[assignment]

    layers = [Layer(), Layer(), Layer()]
    sources = [Source("local", "m").item(i) for i in range(3)]
    guards = [g for s, obj in zip(sources, layers, strict=True)
              for g in (Guard("id", s, obj), Guard("const", s.attr("__class__").attr("scale"), 2))]
    with caplog.at_level("DEBUG", logger="ptc.capture.guards"):
        check = compile_guards(guards)
    text = caplog.records[-1].getMessage()
    assert text.count(".scale") == 1 and len(re.findall(r"if type\(v\) is not _k\d+: return False", text)) == 3, text
    # Each instance is read once for its identity and type guards, the class's value once.
    assert len(re.findall(r"^ +v = ", text, re.M)) == 4, text
    assert check({"m": layers}, {}, {}, ())
    # An instance whose class is swapped keeps its identity: its type guard fails.
    class Other(Layer):
        scale = 3

    layers[2].__class__ = Other
    try:
        assert not check({"m": layers}, {}, {}, ())
    finally:
        layers[2].__class__ = Layer
    Layer.scale = 5
    try:
        assert not check({"m": layers}, {}, {}, ())
    finally:
        Layer.scale = 2
    # A class that answers __class__ itself is never read through another instance.
    faked = [Faked(), Faked()]
    guards = [g for s, obj in zip(sources, faked, strict=False)
              for g in (Guard("id", s, obj), Guard("const", s.attr("__class__").attr("scale"), 2))]
    with caplog.at_level("DEBUG", logger="ptc.capture.guards"):
        compile_guards(guards)
    assert caplog.records[-1].getMessage().count(".scale") == 2


def test_an_object_that_leads_to_itself_compiles_its_guards():
    # type.__class__ is type: the first source pinned to it is read through the second.
    t = Source("local", "x").attr("__class__")
    guards = [Guard("id", t.attr("__class__"), type), Guard("id", t, type), Guard("const", t.attr("__name__"), "type")]
    check = compile_guards(guards)
    assert check({"x": int}, {}, {}, ())
    assert not check({"x": 3}, {}, {}, ())
