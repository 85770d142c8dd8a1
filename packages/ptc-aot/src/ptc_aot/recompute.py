"""Which ops the partitioner may recompute in the backward instead of saving their results.

Only ops that are cheap per byte they produce qualify: pointwise ops, views and fills. Matmul,
convolution, attention and every reduction are never recomputed, and neither is anything
random (a recomputed draw would differ from the forward's).

A cheap result library ops read in both passes (an MLP's GELU, read by the forward's second
matmul and the backward's weight gradient) is recomputed too when the cut says so: the backward
writes it whole again for its library call, but the backend fuses that recompute into the
kernel that reads the same inputs for the gradient, so it costs one write, and saving it would
hold a whole activation per layer (GPT-2 training: 1.18x torch.compile's peak when saved).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator

import torch
import torch.fx

from ptc_spec import META_KEY, TensorMeta

from .views import view_source

aten = torch.ops.aten

# Creation ops that cost a fill, never a read.
CHEAP_CREATION = frozenset(
    {
        aten.full.default,
        aten.zeros.default,
        aten.ones.default,
        aten.scalar_tensor.default,
        aten.full_like.default,
        aten.zeros_like.default,
        aten.ones_like.default,
        aten.new_zeros.default,
        aten.new_ones.default,
        aten.new_full.default,
    }
)

# Listed for the reader and asserted by tests: the rule below already excludes them.
NEVER_RECOMPUTE = frozenset(
    {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten.baddbmm.default,
        aten.convolution.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
    }
)


def recomputable(node: torch.fx.Node) -> bool:
    """True when the partitioner may recompute ``node`` in the backward."""
    if node.op == "get_attr":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        parent = node.args[0]
        return isinstance(parent, torch.fx.Node) and recomputable(parent)
    if not isinstance(target, torch._ops.OpOverload) or target in NEVER_RECOMPUTE:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    if target is aten._to_copy.default:
        return _converts_only(node)
    return view_source(target) is not None or torch.Tag.pointwise in target.tags or target in CHEAP_CREATION


def _converts_only(node: torch.fx.Node) -> bool:
    """A ``_to_copy`` that changes at most the dtype: pointwise, though aten does not tag it so."""
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node) or set(node.kwargs) - {"dtype", "device", "layout", "non_blocking"}:
        return False
    before, after = source.meta.get(META_KEY), node.meta.get(META_KEY)
    return isinstance(before, TensorMeta) and isinstance(after, TensorMeta) and before.device == after.device and before.stride == after.stride


def library_readers(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    """The library ops (``NEVER_RECOMPUTE``) that read ``node``'s result, directly or through views."""
    stack, seen = [node], {node}
    while stack:
        value = stack.pop()
        for user in value.users:
            if user in seen or user.op != "call_function":
                continue
            seen.add(user)
            if user.target in NEVER_RECOMPUTE:
                yield user
            elif (user.target is operator.getitem or view_source(user.target) is not None) and user.args[0] is value:
                stack.append(user)
