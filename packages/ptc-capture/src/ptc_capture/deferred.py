"""Calls run after the graph: ops whose results meta tensors cannot describe.

``torch.nonzero``, boolean-mask indexing, ``unique``, ``Tensor.item`` and ops without a meta
kernel have results whose size (or value) depends on tensor values, so the trace cannot give
them a TensorMeta. Rather than ending the graph there, the trace records such a call as a
``deferred`` Var: the graph hands the call's tensor arguments out as outputs, and the runner
makes the call, eagerly, on them right after the graph, wherever the deferred value is needed
(returned, stored, or carried to a graph break). It runs the same eager kernel the op would
run in a graph, only later, which is safe because

- its arguments are the values they had at the call: once a call is deferred, any op that
  mutates a tensor ends the graph first (a graph break at that op);
- only calls that change nothing are deferred (no in-place ops, no ``out=``).

What the trace may do with a deferred value is limited to passing it along: any use that
needs its metadata (``.shape``, arithmetic in Python, control flow) is a graph break. Torch
ops taking a deferred value are deferred too under ``fullgraph=True`` (where a break is an
error); otherwise they break the graph, so that the code after them is compiled with real
sizes by the resume function rather than run eagerly.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ptc_capture.variables import Var

__all__ = ["DeferredCall", "deferred_in", "mutates_tensors", "unpacked", "vars_in"]


@dataclass(frozen=True, slots=True, eq=False)
class DeferredCall:
    """``target(*args, **kwargs)`` (``op`` is call_function or call_method) to run after the graph.

    ``args`` and ``kwargs`` hold Vars (possibly inside tuples, lists and dicts) and plain
    constants, as the interpreter passed them; ``why`` says why the call could not be traced.
    """

    op: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    why: str

    @property
    def label(self) -> str:
        """The call's name as a user wrote it (``nonzero``, ``Tensor.item``)."""
        if self.op == "call_method":
            return f"Tensor.{self.target}"
        if self.target is operator.getitem:
            return "indexing"
        return getattr(self.target, "__name__", None) or repr(self.target)


def vars_in(value: Any) -> Iterator[Var]:
    """Every Var in a structure of arguments (tuples, lists, dicts, slices), depth first."""
    if isinstance(value, Var):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from vars_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from vars_in(item)
    elif isinstance(value, slice):
        yield from vars_in((value.start, value.stop, value.step))


def deferred_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """The deferred Vars among a call's arguments (top level and inside containers)."""
    found: list[Var] = []
    for var in vars_in((args, kwargs)):
        if var.kind == "deferred":
            found.append(var)
        elif var.kind in ("tuple",):
            found.extend(v for v in vars_in(var.items) if v.kind == "deferred")
        elif var.kind == "list":
            found.extend(v for v in vars_in(var.box.items) if v.kind == "deferred")
    return found


def mutates_tensors(op: str, target: Any, kwargs: dict[str, Any], mutates: bool) -> bool:
    """Whether a call writes a tensor: in-place methods (``add_``), ``out=``, or item assignment."""
    if mutates or "out" in kwargs:
        return True
    name = target if op == "call_method" else getattr(target, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.endswith("__")


def unpacked(value: Any, count: int) -> tuple[Any, ...]:
    """``value``'s items, raising as Python's unpacking would when there are not ``count`` of them."""
    items = tuple(value)
    if len(items) > count:
        raise ValueError(f"too many values to unpack (expected {count})")
    if len(items) < count:
        raise ValueError(f"not enough values to unpack (expected {count}, got {len(items)})")
    return items
