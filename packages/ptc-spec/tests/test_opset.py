"""Op sets are versioned data: core/1 is frozen, growth makes core/2."""

from __future__ import annotations

import hashlib

import pytest
import torch

import ptc_spec
from ptc_spec import CATEGORIES, OpSet, UnsupportedDialectError, opset

aten = torch.ops.aten



def _digest(op_set: OpSet) -> str:
    return hashlib.sha256("\n".join(sorted(op_set.entries)).encode()).hexdigest()


def test_core1_is_frozen() -> None:
    # Published op sets are never edited: add ops to core/2 with OpSet.extend instead.
    # Editing core/1 changes this hash of its sorted names and fails here on purpose.
    assert _digest(opset("core/1")) == "a90a7b8befcedc0c9e14746653d7440cd840410746cc071082b15d39df5d3da3"


def test_core1_has_a_curated_size() -> None:
    assert 150 <= len(opset("core/1").entries) <= 200


def test_every_entry_resolves_and_is_well_formed() -> None:
    core = opset("core/1")
    assert len(core.ops) == len(core.entries)
    for name, entry in core.entries.items():
        assert entry.name == name
        assert entry.category in CATEGORIES
        assert entry.since == 1
        assert entry.note and "\n" not in entry.note


@pytest.mark.parametrize(
    "op",
    [aten.mean.dim, aten.var.correction, aten._softmax.default, aten.native_layer_norm.default, aten.gelu.default,
     aten.embedding.default, aten.reshape.default, aten.linear.default, aten.add_.Tensor, aten.relu.default],
)
def test_composite_and_mutating_ops_are_not_core(op: torch._ops.OpOverload) -> None:
    assert not opset("core/1").in_set(op)


@pytest.mark.parametrize(
    ("op", "category"),
    [(aten.add.Tensor, "pointwise"), (aten.sum.dim_IntList, "reduction"), (aten.view.default, "view"),
     (aten.index_put.default, "indexing"), (aten.full.default, "creation"), (aten.mm.default, "extern"),
     (torch.ops.ptc.rand.default, "random"), (aten.where.self, "logical"), (aten._to_copy.default, "cast")],
)
def test_categories(op: torch._ops.OpOverload, category: str) -> None:
    assert opset("core/1").category(op) == category


def test_extend_makes_the_next_version_and_leaves_the_old_one_alone() -> None:
    core1 = opset("core/1")
    before = dict(core1.entries)
    core2 = core1.extend([("aten.gelu.default", "pointwise", "GELU kept whole")])
    assert core2.name == "core/2"
    assert core2.entry(aten.gelu.default).since == 2
    assert core2.entry(aten.add.Tensor).since == 1
    assert dict(core1.entries) == before and not core1.in_set(aten.gelu.default)


def test_extend_refuses_an_op_already_present() -> None:
    with pytest.raises(ValueError, match="already in core/1"):
        opset("core/1").extend([("aten.add.Tensor", "pointwise", "again")])


def test_entries_cannot_be_edited() -> None:
    with pytest.raises(TypeError):
        opset("core/1").entries["aten.gelu.default"] = None  # type: ignore[index]


def test_unknown_op_set_says_what_is_known() -> None:
    with pytest.raises(UnsupportedDialectError, match=r"unknown op set 'core/9': this ptc-spec knows core/1, core/2; upgrade ptc-spec"):
        opset("core/9")


def test_random_ops_take_explicit_seeds_and_are_deterministic() -> None:
    seed = torch.ops.ptc.seed.default(torch.device("cpu"))
    assert seed.dtype == torch.int64 and seed.dim() == 0
    a = torch.ops.ptc.rand.default(seed, 0, [1000], dtype=torch.float32, device=torch.device("cpu"))
    b = torch.ops.ptc.rand.default(seed, 0, [1000], dtype=torch.float32, device=torch.device("cpu"))
    c = torch.ops.ptc.rand.default(seed, 1000, [1000], dtype=torch.float32, device=torch.device("cpu"))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert 0.0 <= float(a.min()) and float(a.max()) < 1.0 and abs(float(a.mean()) - 0.5) < 0.05
    n = torch.ops.ptc.randn.default(seed, 0, [4000], dtype=torch.bfloat16, device=torch.device("cpu"))
    assert n.dtype == torch.bfloat16 and abs(float(n.float().mean())) < 0.1 and abs(float(n.float().std()) - 1) < 0.1


def test_opset_doc_lists_every_op() -> None:
    from ptc_spec.docs import render_opset

    text = render_opset()
    for name in opset("core/1").entries:
        assert f"`{name}`" in text
    assert ptc_spec.LATEST_CORE in text
