"""Graph files: round trips that run like the original, and bad input refused before anything runs."""

from __future__ import annotations

import json
import math
import operator
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

import ptc_spec
from ptc_spec import META_KEY, BoundaryError, SerializationError, TensorMeta, UnsupportedDialectError
from ptc_spec.serialize import graph_to_json
from ptc_spec.testing import assert_same

from .cases import CASES
from .test_tracer import examples

aten = torch.ops.aten


@pytest.mark.parametrize(("name", "fn", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_traced_graph_round_trips_and_runs_like_eager(name: str, fn: Any, inputs: tuple[Any, ...]) -> None:
    gm = ptc_spec.trace(fn, *inputs)
    loaded = ptc_spec.roundtrip(gm)
    args = pytree.tree_leaves(examples(inputs, seed=7))
    assert_same(loaded(*args), gm(*args))
    assert [n.meta.get(META_KEY) for n in loaded.graph.nodes] == [n.meta.get(META_KEY) for n in gm.graph.nodes]


def _graph_with_every_arg_kind() -> torch.fx.GraphModule:
    """A torch-dialect graph whose arguments use every kind the format stores."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta[META_KEY] = TensorMeta.of((2, 3, 4))
    idx = g.call_function(operator.getitem, (x, (slice(None, None, 2), Ellipsis, None, 1)))
    cast = g.call_method("to", (idx,), {"dtype": torch.float64, "device": torch.device("cpu"), "memory_format": torch.preserve_format})
    full = g.call_function(torch.full, ((2, 3),), {"fill_value": math.inf, "dtype": torch.float32, "layout": torch.strided})
    nan = g.call_function(torch.nan_to_num, (full,), {"nan": 0.0, "posinf": 1e30, "neginf": None})
    cat = g.call_function(torch.cat, ([x, x],), {"dim": -1})
    perm = g.call_method("permute", (cat, [2, 0, 1]))
    flag = g.call_function(torch.where, (g.call_function(operator.gt, (perm, -0.5)), perm, 0))
    comp = g.call_function(torch.mul, (x, 2.5))
    s = g.call_function(torch.sum, (comp,), {"dim": (0, 2), "keepdim": True})
    g.output({"idx": cast, "nan": nan, "rest": [flag, (s, None, True, "text", 3, -2.5)]})
    gm = torch.fx.GraphModule({}, g)
    return ptc_spec.set_dialect(gm, "torch")


def test_every_argument_kind_round_trips_and_runs() -> None:
    gm = _graph_with_every_arg_kind()
    loaded = ptc_spec.roundtrip(gm)
    x = torch.randn(2, 3, 4)
    assert_same(loaded(x), gm(x))
    ptc_spec.check(loaded, "torch")


def test_complex_and_non_finite_values_round_trip() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.add, (x, complex(1.5, -2.0)))
    z = g.call_function(torch.clamp, (g.call_method("abs", (y,)),), {"min": -math.inf, "max": math.inf})
    g.output((z, math.nan))
    gm = ptc_spec.set_dialect(torch.fx.GraphModule({}, g), "torch")
    loaded = ptc_spec.roundtrip(gm)
    x = torch.randn(3, dtype=torch.complex64)
    out, nan = loaded(x)
    assert math.isnan(nan)
    assert_same(out, gm(x)[0])


def _symbolic_graph() -> tuple[torch.fx.GraphModule, sympy.Symbol]:
    s0 = ptc_spec.size_symbol("s0")
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta[META_KEY] = TensorMeta.of((s0, 4))
    n = g.call_function(aten.sym_size.int, (x, 0))
    n.meta[META_KEY] = s0
    total = g.call_function(operator.mul, (n, 4))
    total.meta[META_KEY] = 4 * s0
    flat = g.call_function(aten.view.default, (x, [total]))
    flat.meta[META_KEY] = TensorMeta.of((4 * s0,))
    half = g.call_function(operator.floordiv, (total, 2))
    half.meta[META_KEY] = sympy.floor(2 * s0)
    view2 = g.call_function(aten.view.default, (flat, [2, half]))
    view2.meta[META_KEY] = TensorMeta((2, 2 * s0), (2 * s0, 1), torch.float32, torch.device("cpu"))
    g.output(view2)
    gm = ptc_spec.set_dialect(torch.fx.GraphModule({}, g), "aten")
    return gm, s0


def test_symbolic_sizes_round_trip_exactly_and_the_graph_runs_for_any_size() -> None:
    gm, s0 = _symbolic_graph()
    loaded = ptc_spec.roundtrip(gm)
    placeholder = next(iter(loaded.graph.nodes))
    assert placeholder.meta[META_KEY].shape == (s0, 4)
    assert placeholder.meta[META_KEY].shape[0].is_positive
    for rows in (1, 3, 6):
        x = torch.randn(rows, 4)
        assert_same(loaded(x), x.reshape(2, rows * 2))


def test_constants_keep_dtype_layout_and_parameter_flag(tmp_path: Path) -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("weight")
    c = g.get_attr("table")
    g.output(g.call_function(aten.add.Tensor, (g.call_function(aten.mm.default, (x, w)), c)))
    weight = torch.nn.Parameter(torch.randn(4, 3).t().to(torch.bfloat16), requires_grad=True)  # (3, 4) with strides (1, 3)
    table = torch.randn(2, 4).to(torch.bfloat16)
    gm = ptc_spec.set_dialect(torch.fx.GraphModule({"weight": weight, "table": table}, g), "aten")
    path = tmp_path / "g.ptcg"
    ptc_spec.save(gm, path)
    loaded = ptc_spec.load(path)
    assert isinstance(loaded.weight, torch.nn.Parameter) and loaded.weight.requires_grad
    assert loaded.weight.stride() == weight.stride()
    assert loaded.table.dtype == torch.bfloat16 and torch.equal(loaded.table, table)
    x = torch.randn(2, 3).to(torch.bfloat16)
    assert_same(loaded(x), gm(x))


# -- bad input --------------------------------------------------------------------------------
def _file_with_header(graph: dict[str, Any]) -> bytes:
    return safetensors.torch.save({}, metadata={"ptc-graph": json.dumps(graph)})


def _valid_header() -> dict[str, Any]:
    gm = ptc_spec.trace(lambda a: a.exp() + 1, TensorMeta.of((3,)))
    return graph_to_json(gm)


def test_unknown_format_version_is_refused() -> None:
    header = _valid_header()
    header["format"] = "ptc-graph/2"
    with pytest.raises(SerializationError, match=r"format 'ptc-graph/2', but this ptc-spec reads ptc-graph/1; upgrade ptc-spec"):
        ptc_spec.loads(_file_with_header(header))


def test_unknown_dialect_is_refused() -> None:
    header = _valid_header()
    header["dialect"] = "core/7"
    with pytest.raises(UnsupportedDialectError, match=r"unknown op set 'core/7'"):
        ptc_spec.loads(_file_with_header(header))
    header["dialect"] = "jax"
    with pytest.raises(UnsupportedDialectError, match=r"unknown dialect 'jax'"):
        ptc_spec.loads(_file_with_header(header))


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "builtins.exec", "torch.load", "torch.from_file", "operator.attrgetter", "subprocess.call", "torch.ops.aten.add"])
def test_targets_outside_the_allow_list_are_refused_and_nothing_runs(target: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    header = _valid_header()
    call = next(n for n in header["nodes"] if n["op"] == "call_function")
    call["target"] = target
    call["args"] = [f"touch {marker}"]
    with pytest.raises(SerializationError, match="allow-list|not a dotted Python name"):
        ptc_spec.loads(_file_with_header(header))
    assert not marker.exists()


def test_disallowed_tensor_method_is_refused() -> None:
    header = _valid_header()
    call = next(n for n in header["nodes"] if n["op"] == "call_function")
    call["op"], call["target"] = "call_method", "__reduce_ex__"
    with pytest.raises(SerializationError, match="calls method '__reduce_ex__'"):
        ptc_spec.loads(_file_with_header(header))


def test_saving_a_graph_with_a_non_allow_listed_target_fails_clearly() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(print, (x,)))
    with pytest.raises(SerializationError, match="is not in ptc-spec's allow-list; register it with ptc_spec.allow_target"):
        ptc_spec.dumps(torch.fx.GraphModule({}, g))


def test_grad_mode_switch_of_captured_graphs_round_trips() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(torch._C._set_grad_enabled, (False,))
    y = g.call_function(torch.mul, (x, 2))
    g.call_function(torch._C._set_grad_enabled, (True,))
    g.output(y)
    gm = ptc_spec.set_dialect(torch.fx.GraphModule({}, g), "torch")
    ptc_spec.check(gm, "torch")
    assert ptc_spec.is_allowed_target(torch._C._set_grad_enabled) and not ptc_spec.is_allowed_target(print)
    out = ptc_spec.roundtrip(gm)(torch.ones(2, requires_grad=True))
    assert not out.requires_grad and torch.is_grad_enabled()


def test_allow_target_admits_a_custom_function() -> None:
    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    ptc_spec.allow_target(double, "tests.double")
    g = torch.fx.Graph()
    g.output(g.call_function(double, (g.placeholder("x"),)))
    loaded = ptc_spec.roundtrip(torch.fx.GraphModule({}, g))
    assert_same(loaded(torch.ones(2)), torch.full((2,), 2.0))


def test_truncated_files_are_refused() -> None:
    data = ptc_spec.dumps(ptc_spec.trace(lambda a: a * torch.tensor([1.0, 2.0]), TensorMeta.of((2,))))
    for cut in (0, 5, 20, len(data) // 2, len(data) - 3):
        with pytest.raises(SerializationError, match="truncated|corrupt"):
            ptc_spec.loads(data[:cut])


def test_corrupt_header_is_refused() -> None:
    data = bytearray(ptc_spec.dumps(ptc_spec.trace(torch.exp, TensorMeta.of((2,)))))
    data[10:30] = b"#" * 20
    with pytest.raises(SerializationError):
        ptc_spec.loads(bytes(data))


def test_corrupt_node_reference_is_refused() -> None:
    header = _valid_header()
    call = next(n for n in header["nodes"] if n["op"] == "call_function")
    call["args"] = [{"$": "node", "name": "nowhere"}]
    with pytest.raises(SerializationError, match="refers to node 'nowhere' before defining it"):
        ptc_spec.loads(_file_with_header(header))


def test_unknown_value_kind_is_refused() -> None:
    header = _valid_header()
    call = next(n for n in header["nodes"] if n["op"] == "call_function")
    call["args"] = [{"$": "pickle", "data": "gASV"}]
    with pytest.raises(SerializationError, match="unknown value kind 'pickle'"):
        ptc_spec.loads(_file_with_header(header))


@pytest.mark.parametrize("payload", [pickle.dumps({"a": 1}), pickle.dumps([1, 2], protocol=2)])
def test_pickle_payloads_are_refused(payload: bytes) -> None:
    with pytest.raises(SerializationError, match="pickle"):
        ptc_spec.loads(payload)


def test_torch_save_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.pt"
    torch.save({"x": torch.ones(2)}, path)
    with pytest.raises(SerializationError, match="never contain pickle"):
        ptc_spec.load(path)


def test_safetensors_file_without_a_graph_is_refused() -> None:
    data = safetensors.torch.save({"x": torch.ones(2)})
    with pytest.raises(SerializationError, match="has no ptc-graph section"):
        ptc_spec.loads(data)


def test_header_length_past_the_end_is_refused() -> None:
    data = struct.pack("<Q", 10**6) + b"{}"
    with pytest.raises(SerializationError, match="runs past the end"):
        ptc_spec.loads(data)


def test_roundtrip_reports_a_changed_node() -> None:
    gm = ptc_spec.trace(torch.exp, TensorMeta.of((2,)))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.meta["ptc_note"] = object()  # not storable: dumps must refuse rather than drop it
    with pytest.raises(SerializationError, match="cannot be stored"):
        ptc_spec.roundtrip(gm)


def test_roundtrip_detects_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = ptc_spec.trace(torch.exp, TensorMeta.of((2,)))
    import ptc_spec.serialize as ser

    real = ser.loads

    def tampered(data: bytes, map_location: Any = None) -> torch.fx.GraphModule:
        out = real(data, map_location)
        for n in out.graph.nodes:
            if n.op == "call_function":
                n.target = aten.log.default
        return out

    monkeypatch.setattr(ser, "loads", tampered)
    with pytest.raises(BoundaryError, match="changed when serialized"):
        ser.roundtrip(gm)


@pytest.mark.parametrize("method", ["__rdiv__", "__idiv__", "__ipow__", "__rlshift__"])
def test_every_arithmetic_dunder_a_tensor_has_round_trips(method: str) -> None:
    # Capture records torch.Tensor.__rdiv__(x, y) as this method call.
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_method(method, (x, 2)))
    gm = torch.fx.GraphModule({}, g)
    loaded = ptc_spec.loads(ptc_spec.dumps(gm))
    assert [n.target for n in loaded.graph.nodes if n.op == "call_method"] == [method]


@pytest.mark.parametrize(
    "value",
    [
        sympy.Ge(ptc_spec.size_symbol("s0"), 1, evaluate=False),
        sympy.Eq(sympy.Mod(ptc_spec.size_symbol("s0"), 8), 0),
        sympy.Ne(ptc_spec.size_symbol("s0"), 2 * ptc_spec.size_symbol("s1")),
        sympy.Not(sympy.And(sympy.Eq(ptc_spec.size_symbol("s0"), 3), sympy.Lt(ptc_spec.size_symbol("s1"), 4))),
        sympy.Or(sympy.Gt(ptc_spec.size_symbol("s0"), 3), sympy.Le(ptc_spec.size_symbol("s1"), 4)),
        sympy.true,
        ptc_spec.size_symbol("s0") / 2 + sympy.Float(0.25),
        sympy.Max(1, sympy.floor(ptc_spec.size_symbol("s0") / 3)),
    ],
    ids=["unevaluated_ge", "divisible", "ne", "not_and", "or", "true", "float", "max_floor"],
)
def test_symbolic_conditions_and_expressions_round_trip_exactly(value: sympy.Basic) -> None:
    g = torch.fx.Graph()
    g.output(g.placeholder("x"))
    gm = ptc_spec.set_dialect(torch.fx.GraphModule({}, g), "aten")
    gm.meta["ptc_value"] = (value,)
    loaded = ptc_spec.roundtrip(gm)
    assert loaded.meta["ptc_value"] == (value,)
    assert type(loaded.meta["ptc_value"][0]) is type(value)


def test_a_nan_constant_round_trips_through_the_boundary_check() -> None:
    # masked ops fill with NaN constants; NaN != NaN must not read as a changed constant.
    const = torch.tensor([float("nan"), 1.0, -0.0], dtype=torch.bfloat16)
    gm = ptc_spec.trace(lambda x: x + const, TensorMeta.of((3,), dtype=torch.bfloat16))
    loaded = ptc_spec.roundtrip(gm)
    x = torch.randn(3, dtype=torch.bfloat16)
    assert torch.equal(loaded(x).isnan(), gm(x).isnan())


def test_graph_fingerprint_follows_structure_and_constants_dtype_and_data() -> None:
    def graph(constant: torch.Tensor, op: Any = torch.ops.aten.add.Tensor) -> torch.fx.GraphModule:
        root = torch.nn.Module()
        root.c = constant
        g = torch.fx.Graph()
        x = g.placeholder("x")
        g.output(g.call_function(op, (x, g.get_attr("c"))))
        return torch.fx.GraphModule(root, g)

    from ptc_spec import graph_fingerprint

    base = graph_fingerprint(graph(torch.ones(3)))
    assert base == graph_fingerprint(graph(torch.ones(3)))
    assert base != graph_fingerprint(graph(torch.full((3,), 2.0)))  # data
    assert base != graph_fingerprint(graph(torch.ones(3).view(torch.int32)))  # same bytes, another dtype
    assert base != graph_fingerprint(graph(torch.ones(3), torch.ops.aten.mul.Tensor))  # structure
