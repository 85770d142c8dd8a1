"""The decomposition table: signatures follow the schemas, and table(target) excludes core ops."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

import ptc_decomp
from ptc_decomp import register_decomposition, registered, table
from ptc_spec import opset, overload_name

aten = torch.ops.aten
ROWS = sorted(registered().values(), key=lambda r: overload_name(r.op))


def test_table_has_no_core_ops_and_every_registered_op_outside_core() -> None:
    core = opset("core/1")
    rows = table("core/1")
    assert not [op for op in rows if core.in_set(op)]
    assert set(rows) == {op for op in registered() if not core.in_set(op)}
    assert len(rows) >= 200


def test_table_is_a_fresh_dict_callers_may_edit() -> None:
    first = table("core/1")
    del first[aten.gelu.default]
    assert aten.gelu.default in table("core/1")


@pytest.mark.parametrize("row", ROWS, ids=[overload_name(r.op) for r in ROWS])
def test_decomposition_signature_follows_the_schema(row: Any) -> None:
    params = inspect.signature(row.fn).parameters
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()):
        return  # the generic Scalar->Tensor forwarders pass everything through
    names = [p for p in params]
    schema = [a.name for a in row.op._schema.arguments]
    # Python forbids the name "from"; uniform's decomposition spells it from_.
    assert [n.rstrip("_") if n == "from_" else n for n in names] == schema
    for arg in row.op._schema.arguments:
        name = "from_" if arg.name == "from" else arg.name
        kind = params[name].kind
        assert (kind is inspect.Parameter.KEYWORD_ONLY) == arg.kwarg_only, f"{arg.name} keyword-only mismatch"


def test_every_kind_module_contributes() -> None:
    kinds = {row.kind for row in ROWS}
    assert {"activations", "activation_grads", "softmax", "reductions", "norms", "norm_grads", "views", "shape_ops", "indexing", "losses", "matmul", "pooling", "random", "creation", "scalars", "pointwise"} <= kinds


def test_registering_an_op_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="aten.gelu.default already has a decomposition in activations"):
        register_decomposition(aten.gelu.default)(lambda self, approximate="none": self)


def test_register_refuses_packets() -> None:
    with pytest.raises(TypeError, match="name an overload"):
        register_decomposition(aten.gelu)(lambda self: self)  # type: ignore[arg-type]


def test_public_api_is_exported() -> None:
    assert set(ptc_decomp.__all__) >= {"decompose", "table", "register_decomposition", "Config", "PtcDecompError"}
