"""An ``ops`` handler that records what a node body reads and writes, without generating code."""

from __future__ import annotations

from collections.abc import Callable, KeysView
from dataclasses import dataclass
from typing import Any

import sympy

from .indexing import Expr, indirect_symbol, rvar, xvar
from .ir import ComputedNode
from .sizes import Size
from .virtualized import set_ops_handler


@dataclass(frozen=True, slots=True)
class Access:
    """The loads and stores of one node body, as (buffer, index) pairs over x/r variables."""

    loads: tuple[tuple[str, Expr], ...]
    stores: tuple[tuple[str, Expr], ...]
    op_count: int

    def reads(self) -> KeysView[str]:
        """Names of the buffers loaded, in first-load order (a set view: plans built from it must
        not depend on string hashing, which differs per process)."""
        return dict.fromkeys(name for name, _ in self.loads).keys()


class _Recorder:
    def __init__(self) -> None:
        self.loads: list[tuple[str, Expr]] = []
        self.stores: list[tuple[str, Expr]] = []
        self.count = 0
        self.indirect = 0

    def load(self, name: str, index: Expr) -> str:
        self.loads.append((name, index))
        return "v"

    def store(self, name: str, index: Expr, value: Any) -> None:
        self.stores.append((name, index))

    def indirect_indexing(self, value: Any, size: Size) -> sympy.Symbol:
        self.indirect += 1
        return indirect_symbol(f"ind{self.indirect}")

    def masked(self, mask: Any, body: Callable[[], Any], other: Any, dtype: Any) -> str:
        body()
        return "v"

    def reduction(self, dtype: Any, src_dtype: Any, reduction_type: str, value: Any) -> Any:
        return ("v", "v", "v") if reduction_type == "welford" else "v"

    def __getattr__(self, name: str) -> Callable[..., str]:
        def op(*args: Any, **kwargs: Any) -> str:
            self.count += 1
            return "v"

        return op


def node_vars(node: ComputedNode) -> tuple[list[Expr], list[Expr]]:
    """The canonical loop variables of ``node``: x0.. over ranges, r0.. over reduction ranges."""
    return [xvar(i) for i in range(len(node.ranges))], [rvar(i) for i in range(len(node.reduction_ranges))]


def analyze(node: ComputedNode) -> Access:
    """Run ``node.body`` under a recording handler."""
    rec = _Recorder()
    xs, rs = node_vars(node)
    with set_ops_handler(rec):
        node.body(xs, rs)
    return Access(tuple(rec.loads), tuple(rec.stores), rec.count)


def range_map(node: ComputedNode) -> dict[sympy.Symbol, Size]:
    """Symbol -> extent of each loop variable of ``node``."""
    out: dict[sympy.Symbol, Size] = {}
    for i, s in enumerate(node.ranges):
        out[xvar(i)] = s
    for i, s in enumerate(node.reduction_ranges):
        out[rvar(i)] = s
    return out
