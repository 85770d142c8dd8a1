"""Common subexpressions: a pure call repeated with the same arguments is computed once.

Models recompute the same value in every layer: GPT-2 (transformers) builds its causal mask,
an (8, 1024, 1024) select, once per block, and each block's attention saved its own copy for
the backward. In a functional graph a call of a deterministic, non-mutating op is a function
of its arguments, so a second call with the same arguments (after the first merges have been
applied to them) is replaced by the first.

Not merged: random ops (two dropout masks must differ), mutating or side-effecting calls, and
values a graph output can reach through views: eager returns distinct tensors for
``(x.clone(), x.clone())``, and a caller may write to one.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx

from .views import view_source

aten = torch.ops.aten


def eliminate_common_subexpressions(gm: torch.fx.GraphModule) -> int:
    """Replace each repeated pure call in ``gm`` by its first occurrence; return how many were removed."""
    graph = gm.graph
    escaping = _returned(graph)
    first: dict[Any, torch.fx.Node] = {}
    removed = 0
    for node in list(graph.nodes):
        if not _pure(node) or node in escaping:
            continue
        key = _key(node)
        if key is None:
            continue
        found = first.get(key)
        if found is None:
            first[key] = node
            continue
        node.replace_all_uses_with(found)
        graph.erase_node(node)
        removed += 1
    if removed:
        gm.recompile()
    return removed


def _pure(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.is_impure():
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return not target._schema.is_mutable and torch.Tag.nondeterministic_seeded not in target.tags


def _returned(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The graph's outputs and every value one of them views (their storage is the caller's)."""
    found: set[torch.fx.Node] = set()
    stack = [a for a in graph.output_node().all_input_nodes]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        source = view_source(node.target) if node.op == "call_function" else None
        if node.target is operator.getitem:
            source = 0
        base = node.args[source] if source is not None and source < len(node.args) else None
        if isinstance(base, torch.fx.Node):
            stack.append(base)
    return found


def _key(node: torch.fx.Node) -> Any:
    """A hashable form of the call, or None when an argument has none."""
    try:
        key = (node.target, _frozen(node.args), _frozen(tuple(sorted(node.kwargs.items()))))
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(value: Any) -> Any:
    # Typed, so that 1, 1.0 and True (equal, with equal hashes) stay distinct arguments, and
    # -0.0 (equal to 0.0) too: ``mul(x, -0.0)`` and ``mul(x, 0.0)`` differ in the zeros' signs.
    if isinstance(value, torch.fx.Node):
        return ("node", value)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, float):
        return ("float", math.copysign(1.0, value), value) if not math.isnan(value) else ("float", "nan", id(value))
    return (type(value).__name__, value)
