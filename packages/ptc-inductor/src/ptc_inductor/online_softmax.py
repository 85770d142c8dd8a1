"""Softmax's row sum without its row max: ``sum(exp(x - max(x)))`` computed in the max's loop.

A softmax (or a cross-entropy's log-softmax) lowers to two reductions over each row: the max,
then the sum of ``exp(x - max)``, which reads the max. In a looped Triton kernel (rows longer
than one tile) the second loop reads the row again: GPT-2's (8192, 50304) float32 logits were
read twice in 0.77 ms of an H200's step, where one pass costs about 0.4 ms. Here such a sum is
rewritten into the reduction ``sumexp`` over ``x`` itself, which keeps a running max beside the
sum and rescales the sum when the max grows. It no longer reads the max's buffer, so both share
one loop (and its loads), and their results are the same numbers a two-pass kernel gives up to
rounding: the max is exact, and the sum's terms are the same exponentials, rescaled.

Only for Triton kernels: the C++ backend keeps rows in cache, and has no ``sumexp``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from .analysis import node_vars
from .config import Config, triton_device
from .ir import ComputedNode, Node
from .virtualized import current_handler, set_ops_handler


class _NoMatch(Exception):
    pass


class _Tracer:
    """Records a node body as nested tuples (an expression per value), to compare two bodies'
    values structurally. Bodies that index indirectly or mask are not traced."""

    def __init__(self) -> None:
        self.reductions: list[tuple[Any, ...]] = []
        self.stores: list[tuple[str, Any, Any]] = []

    def load(self, name: str, index: Any) -> Any:
        return ("load", name, index)

    def store(self, name: str, index: Any, value: Any) -> None:
        self.stores.append((name, index, value))

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: Any) -> Any:
        if rtype == "welford":
            raise _NoMatch
        found = ("reduction", dtype, src_dtype, rtype, value)
        self.reductions.append(found)
        return found

    def indirect_indexing(self, value: Any, size: Any) -> sympy.Symbol:
        raise _NoMatch

    def masked(self, mask: Any, body: Callable[[], Any], other: Any, dtype: Any) -> Any:
        raise _NoMatch

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in ("rand", "randn", "randint"):
            raise _NoMatch

        def op(*args: Any) -> Any:
            return (name, *args)

        return op


def _trace(node: ComputedNode) -> _Tracer | None:
    tracer = _Tracer()
    xs, rs = node_vars(node)
    try:
        with set_ops_handler(tracer):
            node.body(xs, rs)
    except _NoMatch:
        return None
    return tracer


def _single_reduction(node: ComputedNode, rtype: str) -> tuple[_Tracer, tuple[Any, ...], Any] | None:
    """(trace, reduction, store index) of a float32 node that stores one ``rtype`` reduction as
    it is, or None."""
    if not node.is_reduction or node.reduction_type != rtype or len(node.outputs) != 1:
        return None
    if node.outputs[0].layout.dtype != torch.float32:
        return None
    traced = _trace(node)
    if traced is None or len(traced.reductions) != 1 or len(traced.stores) != 1:
        return None
    reduction = traced.reductions[0]
    name, index, value = traced.stores[0]
    if value is not reduction or name != node.outputs[0].name or reduction[1] != torch.float32:
        return None
    return traced, reduction, index


def _sum_of_exp_minus(node: ComputedNode, maxes: dict[str, tuple[ComputedNode, Any, Any]]) -> tuple[ComputedNode, Any] | None:
    """(the max node whose row sum of ``exp(x - max)`` ``node`` is, ``node``'s store index), or None."""
    found = _single_reduction(node, "sum")
    if found is None:
        return None
    _, reduction, sum_index = found
    term = reduction[4]
    if not (isinstance(term, tuple) and term[0] == "exp" and len(term) == 2):
        return None
    diff = term[1]
    if not (isinstance(diff, tuple) and diff[0] == "sub" and len(diff) == 3):
        return None
    x, subtracted = diff[1], diff[2]
    if not (isinstance(subtracted, tuple) and subtracted[0] == "load" and subtracted[1] in maxes):
        return None
    max_node, max_input, max_index = maxes[subtracted[1]]
    if max_node.ranges != node.ranges or max_node.reduction_ranges != node.reduction_ranges:
        return None
    # The sum reads each row's max where the max stored it, and exponentiates the very values
    # the max was taken over.
    if subtracted[2] != max_index or x != max_input:
        return None
    return max_node, sum_index


class _Renamed:
    """Runs a max node's body as the sum's: its max becomes ``sumexp``, stored to the sum's buffer."""

    def __init__(
        self, inner: Any, max_name: str, sum_name: str, sum_index: Callable[[Sequence[Any]], Any], xs: Sequence[Any]
    ) -> None:
        self.inner, self.max_name, self.sum_name, self.sum_index, self.xs = inner, max_name, sum_name, sum_index, xs

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: Any) -> Any:
        return self.inner.reduction(dtype, src_dtype, "sumexp", value)

    def store(self, name: str, index: Any, value: Any) -> None:
        assert name == self.max_name
        self.inner.store(self.sum_name, self.sum_index(self.xs), value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _sumexp_node(sum_node: ComputedNode, max_node: ComputedNode, sum_index: Any) -> ComputedNode:
    xvars, _ = node_vars(sum_node)
    max_name, sum_name = max_node.outputs[0].name, sum_node.outputs[0].name

    def at(xs: Sequence[Any]) -> Any:
        # The sum's store index over the canonical loop variables, at the loop's own variables.
        return sympy.sympify(sum_index).xreplace(dict(zip(xvars, xs)))

    def body(xs: Sequence[Any], rs: Sequence[Any]) -> None:
        with set_ops_handler(_Renamed(current_handler(), max_name, sum_name, at, xs)):
            max_node.body(xs, rs)

    return ComputedNode(
        sum_node.name, "reduction", sum_node.outputs, sum_node.ranges, sum_node.reduction_ranges, body,
        sum_node.origins, "sumexp",
    )  # fmt: skip


def fuse_softmax_sums(nodes: Sequence[Node], config: Config) -> tuple[Node, ...]:
    """``nodes`` with every float32 ``sum(exp(x - max(x)))`` of a Triton kernel rewritten into
    ``sumexp`` reductions over ``x`` (see the module's docstring); the rest unchanged."""
    maxes: dict[str, tuple[ComputedNode, Any, Any]] = {}
    out: list[Node] = []
    for node in nodes:
        if not isinstance(node, ComputedNode) or not node.is_reduction or not node.outputs:
            out.append(node)
            continue
        if not triton_device(config, node.outputs[0].layout.device):
            out.append(node)
            continue
        if node.reduction_type == "max":
            found = _single_reduction(node, "max")
            if found is not None:
                maxes[node.outputs[0].name] = (node, found[1][4], found[2])
            out.append(node)
            continue
        found_sum = _sum_of_exp_minus(node, maxes) if node.reduction_type == "sum" else None
        out.append(node if found_sum is None else _sumexp_node(node, *found_sum))
    return tuple(out)
