"""Views: which ATen calls alias their input, how to replay a view chain, and how to undo one.

A tensor that aliases another is described by its *root* (the value that owns the storage)
and a chain of view steps from that root. Functionalization replays chains to regenerate
views after a mutation, and inverts them (``*_scatter``) to push a mutated view into its root.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx

from ptc_spec import META_KEY, SymSize

from .mutations import bind, inplace_view_counterpart, result_aliases
from .sizes import evaluate

aten = torch.ops.aten

Emit = Callable[..., Any]
"""Adds one call to the graph being built: ``emit(op, *args, **kwargs)`` returns its node(s)."""


@dataclass(frozen=True, slots=True)
class ViewStep:
    """One view op applied to the tensor before it: ``target(t, *args, **kwargs)[index]``."""

    target: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    index: int | None = None

    def apply(self, tensor: torch.Tensor, inputs: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """Apply this step to a real tensor (autograd sees an ordinary view op).

        ``inputs``: the call's tensors, from which the step's symbolic sizes (``SizeFn``) are computed.
        """
        args, kwargs = (self.args, self.kwargs) if inputs is None else evaluate((self.args, self.kwargs), inputs)
        out = self.target(tensor, *args, **dict(kwargs))
        return cast(torch.Tensor, out[self.index] if self.index is not None else out)

    def emit(self, emit: Emit, node: torch.fx.Node) -> torch.fx.Node:
        """Add this step to a graph, applied to ``node``; returns the view's node."""
        out = emit(self.target, node, *self.args, **dict(self.kwargs))
        return cast(torch.fx.Node, out[self.index] if self.index is not None else out)


def replay(chain: tuple[ViewStep, ...], tensor: torch.Tensor, inputs: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """Apply a view chain to a real tensor (its symbolic sizes computed from ``inputs``, when given)."""
    for step in chain:
        tensor = step.apply(tensor, inputs)
    return tensor


def view_source(target: object) -> int | None:
    """Position of the argument a non-mutating op's result aliases (a view op), or None."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    schema = target._schema
    if schema.is_mutable:
        return None
    for ret in schema.returns:
        if ret.alias_info is None:
            continue
        for i, arg in enumerate(schema.arguments):
            info = arg.alias_info
            if info is not None and not info.is_write and set(info.before_set) & set(ret.alias_info.before_set):
                return i
    if returns_list(target):
        # ``Tensor(a -> *) self ... -> Tensor(a)[]``: the schema binding exposes the list's
        # element alias only as the argument's wildcard after-set.
        for i, arg in enumerate(schema.arguments):
            info = arg.alias_info
            if info is not None and not info.is_write and "*" in info.after_set:
                return i
    return None


def returns_list(target: torch._ops.OpOverload) -> bool:
    """True when the op returns a list of tensors (split, unbind)."""
    returns = target._schema.returns
    return len(returns) == 1 and isinstance(returns[0].type, torch.ListType)


def _inverse_reshape(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
    # Views that only regroup elements (view, unsqueeze, squeeze) cover the whole base in its
    # logical order, so the new value reshaped to the base's shape is the new base.
    return cast(torch.fx.Node, emit(aten.reshape.default, new, list(_shape(base))))


def _inverse_transpose(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
    return cast(torch.fx.Node, emit(step.target, new, *step.args))


def _inverse_t(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
    return cast(torch.fx.Node, emit(aten.t.default, new))


def _inverse_permute(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
    dims = [d % len(step.args[0]) for d in step.args[0]]
    inverse = [dims.index(i) for i in range(len(dims))]
    return cast(torch.fx.Node, emit(aten.permute.default, new, inverse))


def _inverse_identity(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
    return new


def _scatter(op: torch._ops.OpOverload) -> Callable[[Emit, torch.fx.Node, torch.fx.Node, ViewStep], torch.fx.Node]:
    def inverse(emit: Emit, base: torch.fx.Node, new: torch.fx.Node, step: ViewStep) -> torch.fx.Node:
        return cast(torch.fx.Node, emit(op, base, new, *step.args, **dict(step.kwargs)))

    return inverse


Inverse = Callable[[Emit, torch.fx.Node, torch.fx.Node, ViewStep], torch.fx.Node]

# How to write a new value of a view back into the tensor it was taken from.
INVERSES: dict[torch._ops.OpOverload, Inverse] = {
    aten.slice.Tensor: _scatter(aten.slice_scatter.default),
    aten.select.int: _scatter(aten.select_scatter.default),
    aten.diagonal.default: _scatter(aten.diagonal_scatter.default),
    aten.as_strided.default: _scatter(aten.as_strided_scatter.default),
    aten.view.default: _inverse_reshape,
    aten._unsafe_view.default: _inverse_reshape,
    aten.unsqueeze.default: _inverse_reshape,
    aten.squeeze.default: _inverse_reshape,
    aten.squeeze.dim: _inverse_reshape,
    aten.squeeze.dims: _inverse_reshape,
    aten.transpose.int: _inverse_transpose,
    aten.t.default: _inverse_t,
    aten.permute.default: _inverse_permute,
    aten.alias.default: _inverse_identity,
    aten.detach.default: _inverse_identity,
}


def _shape(node: torch.fx.Node) -> tuple[SymSize, ...]:
    # Symbolic sizes stay sympy: the functionalization pass's emit makes them graph sizes.
    return tuple(node.meta[META_KEY].shape)


def invertible(chain: tuple[ViewStep, ...]) -> bool:
    """True when every step of ``chain`` has an inverse scatter in ``INVERSES``."""
    return all(step.index is None and step.target in INVERSES for step in chain)


def alias_roots(graph: torch.fx.Graph) -> dict[torch.fx.Node, tuple[torch.fx.Node, tuple[ViewStep, ...]]]:
    """Map each tensor node of a traced graph to the node owning its storage and its view chain.

    Views alias their source; in-place and out= results alias the argument they wrote.
    """
    found: dict[torch.fx.Node, tuple[torch.fx.Node, tuple[ViewStep, ...]]] = {}
    # Per multi-output node, each result's (root, chain), or None for a fresh result.
    items: dict[torch.fx.Node, list[tuple[torch.fx.Node, tuple[ViewStep, ...]] | None]] = {}
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            found[node] = (node, ())
            continue
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem and node.args[0] in items:
            # A result with no alias of its own owns its storage: it is its own root, never
            # the op's other results' (sort's values and indices are separate tensors).
            found[node] = items[node.args[0]][node.args[1]] or (node, ())
            continue
        if not isinstance(target, torch._ops.OpOverload):
            continue
        view = inplace_view_counterpart(target)
        if view is not None and isinstance(node.args[0], torch.fx.Node) and node.args[0] in found:
            # x.transpose_(...): x itself becomes that view, for every later use of x.
            root, chain = found[node.args[0]]
            step = ViewStep(view, tuple(node.args[1:]), tuple(sorted(node.kwargs.items())))
            found[node] = found[node.args[0]] = (root, (*chain, step))
            continue
        source = view_source(target)
        n_returns = len(target._schema.returns)
        multi = n_returns > 1 or returns_list(target)
        if source is not None and isinstance(node.args[source], torch.fx.Node) and node.args[source] in found:
            root, chain = found[node.args[source]]
            rest = tuple(a for i, a in enumerate(node.args) if i != source)
            kw = tuple(sorted(node.kwargs.items()))
            if multi:
                items[node] = [(root, (*chain, ViewStep(target, rest, kw, i))) for i in range(_count(node))]
            else:
                found[node] = (root, (*chain, ViewStep(target, rest, kw)))
            continue
        aliases = result_aliases(target) if target._schema.is_mutable else [None] * n_returns
        bound = bind(target._schema, node.args, node.kwargs)
        per_result: list[tuple[torch.fx.Node, tuple[ViewStep, ...]]] = []
        for name in aliases:
            written = bound.get(name) if name is not None else None
            if isinstance(written, torch.fx.Node) and written in found:
                per_result.append(found[written])
            elif isinstance(written, (list, tuple)) and n_returns == 1:
                # A Tensor(a!)[] result: each element aliases the list argument's element.
                per_result.extend(found.get(w, (node, ())) if isinstance(w, torch.fx.Node) else (node, ()) for w in written)
            else:
                per_result.append((node, ()))
        if multi and n_returns == 1 and len(per_result) < _count(node):
            # A fresh Tensor[] result (unsafe_split, unbind_copy): one entry per element.
            per_result = per_result * _count(node)
        if multi:
            items[node] = [None if r[0] is node else r for r in per_result]
        elif per_result:
            found[node] = per_result[0]
    return found


def _count(node: torch.fx.Node) -> int:
    meta = node.meta.get(META_KEY)
    return len(meta) if isinstance(meta, (tuple, list)) else 1
