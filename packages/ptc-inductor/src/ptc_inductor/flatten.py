"""Merging a node's leading loop dims into one, so nodes over one space in two shapes can fuse.

A value is often computed in one shape and read in another: a product's bias add over
(tokens, features) read by a GELU over (batch, seq, features). The loops cover the same
elements in the same order, but the scheduler shares loops only between equal leading ranges.
A node whose leading dims its accesses walk contiguously (each dim's stride is the next one's
times its size) can run over their product instead: the loads and stores stay the same affine
indices, in one variable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from . import sizes
from .analysis import Access, analyze
from .indexing import Expr, is_linear_in, unravel, xvar
from .ir import ComputedNode, with_simplified_indices
from .sizes import Size
from .virtualized import current_handler, set_ops_handler


def mergeable(node: ComputedNode, access: Access, count: int) -> bool:
    """Whether ``node``'s first ``count`` loop dims are walked as one by every load and store
    (static sizes, each dim's coefficient its successor's times the successor's size)."""
    if count < 2 or len(node.ranges) < count:
        return False
    dims = [sizes.static_value(s) for s in node.ranges[:count]]
    if any(d is None for d in dims):
        return False
    for _, index in (*access.loads, *access.stores):
        coefficients = [is_linear_in(index, xvar(i)) for i in range(count)]
        if any(c is None for c in coefficients):
            return False
        for i in range(count - 1):
            if sympy.expand(sympy.sympify(coefficients[i]) - sympy.sympify(coefficients[i + 1]) * dims[i + 1]) != 0:
                return False
    return True


class _Substituted:
    """Forwards ``ops`` calls with placeholder symbols replaced in every index."""

    def __init__(self, inner: Any, table: dict[sympy.Symbol, Expr]) -> None:
        self._inner, self._table = inner, table

    def _sub(self, index: Expr) -> Expr:
        return sympy.sympify(index).xreplace(self._table)

    def load(self, name: str, index: Expr) -> Any:
        return self._inner.load(name, self._sub(index))

    def store(self, name: str, index: Expr, value: Any) -> Any:
        return self._inner.store(name, self._sub(index), value)

    def index_expr(self, expr: Expr, dtype: Any) -> Any:
        return self._inner.index_expr(self._sub(expr), dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def merge_leading(node: ComputedNode, count: int) -> ComputedNode:
    """``node`` over its first ``count`` loop dims merged into one (see ``mergeable``)."""
    dims = tuple(node.ranges[:count])
    ranges = (sizes.normalize(math.prod(dims)), *node.ranges[count:])
    # The old body simplifies its indices against its own ranges, keyed by x0, x1, ...: it is
    # called with placeholders (no range known), which are then replaced by this node's loop
    # variables and simplified against the merged ranges.
    held = [sympy.Symbol(f"fl{i}", integer=True, nonnegative=True) for i in range(len(ranges))]
    old_xs = [*unravel(held[0], dims), *held[1:]]

    def body(xs: Sequence[Expr], rs: Sequence[Expr]) -> None:
        with set_ops_handler(_Substituted(current_handler(), dict(zip(held, xs)))):
            node.body(old_xs, rs)

    simplified = with_simplified_indices(body, ranges, node.reduction_ranges)
    return ComputedNode(node.name, node.kind, node.outputs, ranges, node.reduction_ranges, simplified, node.origins, node.reduction_type)


def merged_nodes(nodes: Sequence[ComputedNode], accesses: Mapping[str, Access], count: int) -> tuple[list[ComputedNode], dict[str, Access]] | None:
    """Every node of ``nodes`` over its first ``count`` dims merged, with their new accesses, or
    None unless each one's accesses walk those dims as one (and stay affine once merged)."""
    if not all(mergeable(n, accesses[n.name], count) for n in nodes):
        return None
    out = [merge_leading(n, count) for n in nodes]
    found = {n.name: analyze(n) for n in out}
    for n in out:
        for _, index in (*found[n.name].loads, *found[n.name].stores):
            if index.has(sympy.floor, sympy.Mod) and not _had_floor(accesses, n.name):
                return None  # the placeholders did not recombine: keep the cheaper indices
    return out, found


def _had_floor(accesses: Mapping[str, Access], name: str) -> bool:
    return any(index.has(sympy.floor, sympy.Mod) for _, index in (*accesses[name].loads, *accesses[name].stores))


def leading_count(ranges: Sequence[Size], total: Size) -> int | None:
    """How many leading ``ranges`` multiply to ``total`` (at least 2), or None."""
    product: Size = 1
    for k, r in enumerate(ranges):
        product = sizes.normalize(product * r)
        if k >= 1 and sizes.equal(product, total):
            return k + 1
    return None
