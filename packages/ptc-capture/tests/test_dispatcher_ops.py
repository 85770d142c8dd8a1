"""torch.ops packets and overloads, and torch's C bindings off the allow-list, become op overload nodes."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
import ptc_spec
from ptc_capture.errors import GraphBreakError
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook

aten = torch.ops.aten


def _packet(x):
    out = torch.softmax(x, 1)
    return aten._softmax_backward_data(torch.ones_like(out), out, 1, torch.float32)


def _overload(x):
    return aten.add.Tensor(x, x) + aten.mul.Scalar(x, 2)


def _packet_picks_overload(x):
    # aten.upsample_bilinear2d(input, output_size, align_corners, scale_factors) is its .vec overload.
    return aten.upsample_bilinear2d(x, None, False, [2.0, 2.0])


def _private_binding(x):
    return torch._chunk_cat([x, x * 2], 1, 2)


def _private_nn_binding(x):
    return torch._C._nn._upsample_bilinear2d_aa(x, [6, 8], False)


def _private_tensor_method(x):
    return x._addmm_activation(x, x.t(), use_gelu=False)


def _factory_overload(x):
    return x + aten.zeros.default([4, 4], dtype=torch.float32)


CASES = {
    "packet": (_packet, aten._softmax_backward_data.default, (4, 4)),
    "overload": (_overload, aten.add.Tensor, (4, 4)),
    "packet_picks_overload": (_packet_picks_overload, aten.upsample_bilinear2d.vec, (1, 2, 3, 4)),
    "private_binding": (_private_binding, aten._chunk_cat.default, (4, 4)),
    "private_nn_binding": (_private_nn_binding, aten._upsample_bilinear2d_aa.default, (1, 2, 3, 4)),
    "private_tensor_method": (_private_tensor_method, aten._addmm_activation.default, (4, 4)),
    "factory_overload": (_factory_overload, aten.zeros.default, (4, 4)),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_dispatcher_op_is_one_overload_node(case):
    fn, overload, shape = CASES[case]
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(fn), fn, torch.randn(shape))
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    assert overload in targets
    ptc_spec.check(backend.graphs[0], "torch")


def _foreach_add_in_place(x, y):
    # Returns nothing: the node stays because its schema writes its arguments.
    aten._foreach_add_.Scalar([x, y], 1.0)
    return x * y


def test_mutating_overload_without_result_keeps_its_node():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_foreach_add_in_place)
    compare_with_eager(compiled, _foreach_add_in_place, torch.randn(3), torch.randn(3))
    assert aten._foreach_add_.Scalar in [n.target for n in backend.graphs[0].graph.nodes]


def _define_twice(namespace: str) -> None:
    @torch.library.custom_op(f"{namespace}::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)


_define_twice("ptc_capture_listed")


@torch.library.custom_op("ptc_capture_unlisted::double_", mutates_args=("x",))
def _double_(x: torch.Tensor) -> None:
    x.mul_(2)


def _unlisted_op(x):
    # A custom op that writes its input cannot be a fallback, so its namespace is not allowed
    # on the way (functional custom ops with a fake kernel are: see the end of this file).
    y = x + 1
    torch.ops.ptc_capture_unlisted.double_(y)
    return y


def _listed_op(x):
    return torch.ops.ptc_capture_listed.twice(x) + 1


def test_op_of_an_unregistered_namespace_says_how_to_allow_it():
    with pytest.raises(GraphBreakError, match="namespace 'ptc_capture_unlisted'.*ptc_spec.allow_target"):
        ptc_capture.optimize(CountingBackend(), fullgraph=True)(_unlisted_op)(torch.randn(3))


def test_op_of_a_registered_namespace_is_a_node():
    overload = torch.ops.ptc_capture_listed.twice.default
    ptc_spec.allow_target(overload, "ptc_capture_listed.twice.default")
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(_listed_op), _listed_op, torch.randn(3))
    assert overload in [n.target for n in backend.graphs[0].graph.nodes]


@torch.library.custom_op("ptc_capture_tests::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _calls_custom_op(x):
    return torch.ops.ptc_capture_tests.twice(x.sin()) + _twice(x)


def test_a_users_custom_op_is_one_node_and_its_namespace_is_allowed_in_graph_files():
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(_calls_custom_op), _calls_custom_op, torch.randn(3, 4))
    (gm,) = backend.graphs
    op = torch.ops.ptc_capture_tests.twice.default
    assert [n.target for n in gm.graph.nodes if n.target is op] == [op, op]
    assert ptc_spec.loads(ptc_spec.dumps(gm)) is not None


def _imports_custom_op(x):
    # As torch.nn.functional.linear_cross_entropy reaches its ops: imported in the function, so
    # the op object has no guarded source the trace could read its overload through.
    from test_dispatcher_ops import _twice as twice

    return twice(x) + 1


def test_a_custom_op_imported_in_the_traced_function_is_one_node():
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(_imports_custom_op), _imports_custom_op, torch.randn(3))
    assert torch.ops.ptc_capture_tests.twice.default in [n.target for n in backend.graphs[0].graph.nodes]
