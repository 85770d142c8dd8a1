"""Symbolic sizes outside the graphs: values the runtime recomputes from the inputs of each call.

A graph traced with symbolic sizes computes its sizes itself (``aten.sym_size.int`` of an
input plus ``operator`` arithmetic). A few sizes are needed by the wrapper instead: the
arguments of view ops it replays to rebuild outputs that alias an input, and sizes the
function returns. Each becomes a :class:`SizeFn`, the same computation as a small tree that
reads the actual sizes of the call's tensors, so nothing depends on the sizes traced with.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_spec import META_KEY, TensorMeta

aten = torch.ops.aten

# The size arithmetic a traced graph uses besides aten.sym_size.int (ptc_spec's aten dialect).
SIZE_OPERATIONS: frozenset[Any] = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
        operator.pow, operator.neg, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
        operator.ge, operator.and_, operator.or_, operator.not_, torch.sym_max, torch.sym_min,
        torch.sym_float, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
        aten.sym_storage_offset.default,
    }
)  # fmt: skip

_PLAIN: dict[Any, Callable[..., Any]] = {torch.sym_max: max, torch.sym_min: min, torch.sym_float: float}


def is_size_node(node: object) -> bool:
    """True for a node computing a size (an int, float or bool), not a tensor."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    try:
        return node.target in SIZE_OPERATIONS and not isinstance(node.meta.get(META_KEY), TensorMeta)
    except TypeError:
        return False


@dataclass(frozen=True, slots=True)
class SizeFn:
    """A size computed from the call's tensors: ``fn(*args)``, or dim ``dim`` of tensor ``index`` when ``fn`` is None."""

    fn: Callable[..., Any] | None
    args: tuple[Any, ...] = ()
    index: int = -1
    dim: int = -1

    def __call__(self, tensors: Sequence[torch.Tensor]) -> Any:
        if self.fn is None:
            return tensors[self.index].shape[self.dim]
        return self.fn(*(a(tensors) if isinstance(a, SizeFn) else a for a in self.args))


def size_fn(node: torch.fx.Node, inputs: Mapping[torch.fx.Node, int]) -> SizeFn:
    """The SizeFn of a size node whose reads are of graph inputs (``inputs``: placeholder -> tensor position)."""
    if node.target is aten.sym_size.int:
        source, dim = node.args
        if not isinstance(source, torch.fx.Node) or source not in inputs or not isinstance(dim, int):
            raise ValueError(f"size node {node.name} reads {source}, which is not a graph input")
        return SizeFn(None, (), inputs[source], dim)
    if node.target not in _PLAIN and not callable(node.target):
        raise ValueError(f"node {node.name} is not size arithmetic")
    args = tuple(size_fn(a, inputs) if isinstance(a, torch.fx.Node) else a for a in node.args)
    return SizeFn(_PLAIN.get(node.target, node.target), args)  # type: ignore[arg-type]


def bind_sizes(value: Any, inputs: Mapping[torch.fx.Node, int]) -> tuple[Any, bool]:
    """``value`` (an op's arguments) with every size node made a SizeFn, and whether it had any."""
    found = False

    def convert(x: Any) -> Any:
        nonlocal found
        if isinstance(x, torch.fx.Node):
            if not is_size_node(x):
                raise ValueError(f"{x.name} is a tensor, which a view replayed by the runtime cannot take as an argument")
            found = True
            return size_fn(x, inputs)
        return x

    return pytree.tree_map(convert, value), found


def evaluate(value: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """``value`` with every SizeFn in it computed from ``tensors``."""
    return pytree.tree_map(lambda x: x(tensors) if isinstance(x, SizeFn) else x, value)
