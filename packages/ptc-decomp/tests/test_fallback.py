"""Ops that cannot be decomposed run unfused as marked fallback calls (core/2 on), unless strict."""

from __future__ import annotations

import logging
import operator
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import ptc_spec
from ptc_decomp import (
    FALLBACKS_KEY,
    SOURCE_KEY,
    Config,
    DecompositionError,
    InPlaceOpError,
    NoDecompositionError,
    decompose,
    table,
)
from ptc_spec import META_KEY, GraphBuilder, TensorMeta
from ptc_spec.testing import assert_same

aten = torch.ops.aten


def eager_only(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Ops ptc-decomp does not decompose (linear algebra, selection, FFT, special functions...)."""
    det = torch.linalg.det(x[:, :3, :3])
    values, indices = torch.kthvalue(x, 2, 1)
    spectrum = torch.fft.fft(x).abs()
    return det, values, indices, torch.special.i0e(x), torch.rot90(x, 1, [1, 2]), spectrum, torch.take(x, i), torch.isin(i, torch.tensor([1, 3]))


EAGER_ONLY_OPS = [
    "aten._fft_r2c.default",
    "aten._linalg_det.default",
    "aten.abs.default",  # of the complex spectrum
    "aten.isin.Tensor_Tensor",
    "aten.kthvalue.default",
    "aten.rot90.default",
    "aten.special_i0e.default",
    "aten.take.default",
]


def _eager_only_graph() -> torch.fx.GraphModule:
    return ptc_spec.trace(eager_only, TensorMeta.of((2, 4, 4)), TensorMeta.of((5,), torch.int64))


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 3, 5, 9, 1])


def _fallbacks(gm: torch.fx.GraphModule) -> list[str]:
    return sorted(ptc_spec.overload_name(n.target) for n in gm.graph.nodes if ptc_spec.is_fallback(n))


def test_ops_without_decomposition_become_marked_fallbacks_in_core2(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ptc.decomp.fallback"):
        out = decompose(_eager_only_graph())
    assert ptc_spec.dialect_of(out) == "core/2"
    ptc_spec.check(out, "core/2")
    assert _fallbacks(out) == EAGER_ONLY_OPS
    assert out.meta[FALLBACKS_KEY] == EAGER_ONLY_OPS
    (record,) = [r for r in caplog.records if r.name == "ptc.decomp.fallback"]
    assert record.levelno == logging.INFO and "8 op(s) run unfused" in record.getMessage()
    assert all(name in record.getMessage() for name in EAGER_ONLY_OPS)
    x, i = _inputs()
    assert_same(out(x, i), eager_only(x, i))


def test_fallback_graph_round_trips_through_the_graph_file() -> None:
    out = decompose(_eager_only_graph())
    back = ptc_spec.loads(ptc_spec.dumps(out))
    ptc_spec.check(back, "core/2")
    assert _fallbacks(back) == EAGER_ONLY_OPS and back.meta[FALLBACKS_KEY] == EAGER_ONLY_OPS
    x, i = _inputs()
    assert_same(back(x, i), eager_only(x, i))


def test_strict_keeps_the_no_decomposition_error() -> None:
    with pytest.raises(NoDecompositionError, match=r"not in core/2 and have no decomposition: .*aten\.kthvalue\.default"):
        decompose(_eager_only_graph(), strict=True)
    with pytest.raises(NoDecompositionError, match="not in core/2 and have no decomposition"):
        decompose(_eager_only_graph(), config=Config(strict=True))


def test_core1_has_no_fallbacks_and_still_raises() -> None:
    with pytest.raises(NoDecompositionError, match=r"not in core/1 and have no decomposition: .*aten\._linalg_det\.default"):
        decompose(_eager_only_graph(), "core/1")


def test_multi_output_list_and_strided_fallbacks_keep_eager_metadata() -> None:
    # unsafe_split along dim 1 gives non-contiguous pieces, _foreach_mul a list, kthvalue of a
    # transposed input a (values, indices) pair: each output keeps eager's layout.
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, _, c = aten.unsafe_split.Tensor(x, 2, 1)
        products = aten._foreach_mul.List([x, c], [x, c])
        values, indices = aten.kthvalue.default(x.t(), 2, 1)
        return a, c, products[1], values, indices

    gm = ptc_spec.trace(fn, TensorMeta.of((4, 6)))
    out = decompose(gm)
    ptc_spec.check(out, "core/2")
    assert _fallbacks(out) == ["aten._foreach_mul.List", "aten.kthvalue.default", "aten.unsafe_split.Tensor"]
    (split,) = [n for n in out.graph.nodes if n.target is aten.unsafe_split.Tensor]
    assert [m.stride for m in split.meta[META_KEY]] == [(6, 1)] * 3
    x = torch.randn(4, 6)
    assert_same(ptc_spec.loads(ptc_spec.dumps(out))(x), fn(x), check_stride=True)


def _emitting_table(emitted: Any) -> dict[Any, Any]:
    # gelu "decomposed" through an op that itself has no decomposition.
    custom = dict(table())
    custom[aten.gelu.default] = lambda self, approximate="none": aten.mul.Tensor(emitted(self), 1.0)
    return custom


def test_an_op_a_decomposition_emits_without_decomposition_becomes_a_fallback() -> None:
    gm = ptc_spec.trace(lambda x: torch.nn.functional.gelu(x) + 1, TensorMeta.of((3, 4)))
    out = decompose(gm, table=_emitting_table(aten.special_i0e.default))
    ptc_spec.check(out, "core/2")
    (node,) = [n for n in out.graph.nodes if ptc_spec.is_fallback(n)]
    assert node.target is aten.special_i0e.default and node.meta[SOURCE_KEY] == "aten.gelu.default"
    x = torch.randn(3, 4)
    assert_same(out(x), torch.special.i0e(x) + 1)
    with pytest.raises(DecompositionError, match=r"aten\.gelu\.default emitted aten\.special_i0e\.default, which is not in core/2"):
        decompose(gm, table=_emitting_table(aten.special_i0e.default), strict=True)
    with pytest.raises(DecompositionError, match="which is not in core/1"):
        decompose(gm, "core/1", table=_emitting_table(aten.special_i0e.default))


def _failing_gelu(self: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    aten.mul.Tensor(self, 3.0)  # recorded, then dropped when the decomposition gives up
    raise NotImplementedError("this form of gelu is not handled")


def test_a_failing_decomposition_falls_back_to_the_op_and_leaves_no_partial_nodes() -> None:
    gm = ptc_spec.trace(lambda x: torch.nn.functional.gelu(x) * 2, TensorMeta.of((3, 4)))
    failing = dict(table())
    failing[aten.gelu.default] = _failing_gelu
    out = decompose(gm, table=failing)
    targets = [n.target for n in out.graph.nodes if n.op == "call_function"]
    assert targets == [aten.gelu.default, aten.mul.Tensor]
    assert out.meta[FALLBACKS_KEY] == ["aten.gelu.default"]
    x = torch.randn(3, 4)
    assert_same(out(x), torch.nn.functional.gelu(x) * 2)
    with pytest.raises(DecompositionError, match="this form of gelu is not handled"):
        decompose(gm, table=failing, strict=True)
    with pytest.raises(DecompositionError, match="this form of gelu is not handled"):
        decompose(gm, "core/1", table=failing)


def test_a_decomposition_with_wrong_metadata_falls_back_unless_strict() -> None:
    gm = ptc_spec.trace(lambda x: torch.nn.functional.gelu(x) * 2, TensorMeta.of((4, 8)))
    broken = dict(table())
    broken[aten.gelu.default] = lambda self, approximate="none": aten.sum.dim_IntList(self, None)
    out = decompose(gm, table=broken)
    assert out.meta[FALLBACKS_KEY] == ["aten.gelu.default"]
    assert aten.sum.dim_IntList not in [n.target for n in out.graph.nodes]
    with pytest.raises(DecompositionError, match=r"returned shape \(\) torch.float32, but the op gives \(4, 8\)"):
        decompose(gm, table=broken, strict=True)


def test_ops_that_cannot_be_fallbacks_are_still_refused_with_the_reason() -> None:
    # _logcumsumexp has no meta kernel, so no backend could know its output before running it.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta[META_KEY] = TensorMeta.of((3, 4))
    y = graph.call_function(aten._logcumsumexp.default, (x, 1))
    y.meta[META_KEY] = TensorMeta.of((3, 4))
    graph.output(y)
    gm = torch.fx.GraphModule({}, graph)
    ptc_spec.set_dialect(gm, "aten")
    with pytest.raises(NoDecompositionError, match=r"cannot run as fallbacks: aten\._logcumsumexp\.default \(it has no meta kernel"):
        decompose(gm)


def test_in_place_ops_are_refused_in_core2_too() -> None:
    gm = ptc_spec.trace(lambda x: x.clone().add_(1), TensorMeta.of((3,)))
    with pytest.raises(InPlaceOpError, match="mutate a tensor"):
        decompose(gm, ptc_spec.LATEST_CORE)


def test_a_fallback_mark_on_an_input_node_is_not_inherited_by_its_decomposition() -> None:
    b = GraphBuilder("core/2")
    x = b.input("x", TensorMeta.of((3, 4)))
    b.output(b.fallback(aten.gelu.default, x))
    out = decompose(b.build())
    assert not _fallbacks(out) and FALLBACKS_KEY not in out.meta
    assert aten.erf.default in [n.target for n in out.graph.nodes]


def _complex_and_real(x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Real ops around complex ones: a cast to complex, FFTs, views of complex tensors, a complex
    constant and scalar, complex ops that have decompositions (var, addcmul), view_as_real."""
    spectrum = torch.fft.rfft(torch.nn.functional.gelu(x), dim=-1)
    c = torch.tensor([1 + 2j, -1j, 0.5, 2.0, 1j], dtype=torch.complex64)
    mixed = torch.addcmul(spectrum, z.t()[:, :5], c) * 2j
    parts = torch.view_as_real(mixed)
    spread = torch.var(z, dim=0)
    return torch.nn.functional.gelu(parts).sum(-1), x.to(torch.complex64) + 1, spread, z.reshape(-1)[1:7]


def _complex_graph() -> torch.fx.GraphModule:
    return ptc_spec.trace(_complex_and_real, TensorMeta.of((3, 8)), TensorMeta.of((6, 3), torch.complex64))


def _touches_complex(node: torch.fx.Node) -> bool:
    metas = [*pytree.tree_leaves(node.meta.get(META_KEY)), *(a.meta.get(META_KEY) for a in node.all_input_nodes)]
    return any(isinstance(m, TensorMeta) and m.dtype.is_complex for m in pytree.tree_leaves(metas))


def test_every_call_over_complex_values_is_a_fallback_and_real_ops_still_decompose() -> None:
    out = decompose(_complex_graph())
    ptc_spec.check(out, "core/2")
    calls = [n for n in out.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    # Kernels have no complex type: no core op sees a complex value, and complex ops that have
    # decompositions (var, addcmul) stay whole instead of decomposing into complex core ops.
    assert all(ptc_spec.is_fallback(n) for n in calls if _touches_complex(n))
    fallen = set(_fallbacks(out))
    assert {"aten._to_copy.default", "aten.var.correction", "aten.addcmul.default", "aten.view_as_real.default"} <= fallen
    # gelu of real values decomposes (erf is in the set) on both sides of the complex part.
    assert "aten.gelu.default" not in fallen and [n.target for n in calls].count(aten.erf.default) == 2
    x, z = torch.randn(3, 8), torch.randn(6, 3, dtype=torch.complex64)
    assert_same(out(x, z), _complex_and_real(x, z), check_stride=True)


def test_complex_calls_stay_core_ops_when_fallbacks_are_not_allowed() -> None:
    gm = ptc_spec.trace(lambda x: x.to(torch.complex64) * 2, TensorMeta.of((3,)))
    out = decompose(gm, "core/1")
    assert not _fallbacks(out)
    assert [n.target for n in out.graph.nodes if n.op == "call_function"] == [aten._to_copy.default, aten.mul.Tensor]


@pytest.mark.parametrize(
    ("fn", "inputs", "op"),
    [
        (torch.nn.functional.bilinear, ((2, 3), (2, 4), (5, 3, 4)), "aten._trilinear.default"),
        (torch.linalg.pinv, ((4, 3),), "aten.linalg_pinv.atol_rtol_tensor"),
    ],
    ids=["bilinear", "pinv"],
)
def test_composite_non_functional_kernels_run_as_fallbacks(fn: Any, inputs: tuple[tuple[int, ...], ...], op: str) -> None:
    # Their only kernel is a CompositeExplicitAutogradNonFunctional one, which meta tensors run.
    gm = ptc_spec.trace(fn, *[TensorMeta.of(s) for s in inputs])
    out = decompose(gm)
    assert op in _fallbacks(out)
    args = [torch.randn(s, generator=torch.Generator().manual_seed(i)) for i, s in enumerate(inputs)]
    assert_same(out(*args), fn(*args), check_stride=True)


def _addbmm_graph(dtype: torch.dtype) -> torch.fx.GraphModule:
    shapes = [(3, 5), (16, 3, 4), (16, 4, 5)]
    return ptc_spec.trace(lambda a, b, c: torch.addbmm(a, b, c, beta=0.5), *[TensorMeta.of(s, dtype=dtype) for s in shapes])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_addbmm_keeps_eagers_kernel_and_numbers(dtype: torch.dtype) -> None:
    # Eager rounds after each batch's product; the folded mm rounds once (off by more than
    # bf16's tolerance over 16 batches), so the decomposition declines and the op falls back.
    gm = _addbmm_graph(dtype)
    out = decompose(gm)
    assert out.meta[FALLBACKS_KEY] == ["aten.addbmm.default"]
    args = [torch.randn(s).to(dtype) for s in [(3, 5), (16, 3, 4), (16, 4, 5)]]
    assert torch.equal(out(*args), torch.addbmm(*args, beta=0.5))
    # Without fallbacks it still decomposes (into float32 arithmetic).
    assert FALLBACKS_KEY not in decompose(gm, strict=True).meta
    assert FALLBACKS_KEY not in decompose(_addbmm_graph(torch.float32)).meta


def _declining_gelu(self: torch.Tensor, approximate: str = "none") -> Any:
    aten.mul.Tensor(self, 3.0)  # recorded, then dropped when the decomposition declines
    return NotImplemented


def test_a_declining_decomposition_leaves_its_op_to_the_eager_kernel_only_where_allowed() -> None:
    gm = ptc_spec.trace(lambda x: torch.nn.functional.gelu(x) * 2, TensorMeta.of((3, 4)))
    declining = dict(table())
    declining[aten.gelu.default] = _declining_gelu
    out = decompose(gm, table=declining)
    assert [n.target for n in out.graph.nodes if n.op == "call_function"] == [aten.gelu.default, aten.mul.Tensor]
    with pytest.raises(DecompositionError, match=r"declined \(returned NotImplemented\) though it may not"):
        decompose(gm, table=declining, strict=True)
