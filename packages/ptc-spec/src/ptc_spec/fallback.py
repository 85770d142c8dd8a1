"""Fallback nodes: any aten op a backend must run unfused, as its eager ATen kernel.

From ``core/2`` on, a graph may call an aten overload outside the op set when the node is
marked with ``node.meta[FALLBACK_KEY] = True``. The mark is part of the graph file (node
metadata under a ``ptc_`` key), so it crosses every boundary. Only functional overloads with a
meta kernel qualify: the backend must know each output's shape without running the op, and a
fallback never writes its inputs. Custom ops (``torch.library``, with a fake kernel) qualify the
same way; a graph file names them once their namespace is allowed (``allow_target``).
"""

from __future__ import annotations

from typing import Any

import torch

FALLBACK_KEY = "ptc_fallback"
"""Key of ``node.meta`` marking a node as a fallback (value ``True``)."""


def is_fallback(node: Any) -> bool:
    """True when ``node`` is marked as a fallback call."""
    return bool(getattr(node, "meta", {}).get(FALLBACK_KEY, False))


def mark_fallback(node: torch.fx.Node) -> torch.fx.Node:
    """Mark ``node`` as a fallback call and return it."""
    node.meta[FALLBACK_KEY] = True
    return node


# The dispatch keys whose kernels run on meta tensors: a Meta kernel, or a composite one, which
# is registered for every backend. CompositeExplicitAutogradNonFunctional kernels (_trilinear,
# linalg_pinv) are composites too: they only stay out of functionalized graphs' decompositions.
_META_KEYS = ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _has_meta_kernel(op: torch._ops.OpOverload) -> bool:
    name = op.name()
    for key in _META_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return True
    return False


def fallback_problem(target: object) -> str | None:
    """Why ``target`` cannot be a fallback call, or None when it can."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace == "ptc":
        return "only aten and custom (torch.library) op overloads can be fallbacks"
    if target._schema.is_mutable:
        return "it writes one of its inputs, and fallbacks must be functional"
    if not _has_meta_kernel(target):
        return "it has no meta kernel, so its output shapes cannot be known before it runs"
    return None
