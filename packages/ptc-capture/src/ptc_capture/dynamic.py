"""Which input dims a capture makes dynamic, as torch.compile decides it.

- ``dynamic=None`` (the default of ``optimize``): the first capture of a code object is static.
  Each capture records the sizes of every tensor it reads, per code object and source; a dim
  whose size differs from the sizes seen before is dynamic in every later capture of that code
  ("automatic dynamic"), so a function called at many sequence lengths compiles twice.
- ``dynamic=True``: every dim is dynamic from the first capture.
- ``dynamic=False``: no automatic dynamic; dims are static unless marked.
- ``mark_dynamic(t, dim)`` makes ``dim`` of ``t`` dynamic in the next capture, whatever the mode,
  and that capture fails with ShapeConstraintError if the trace specializes it to one value
  (as torch's ``mark_dynamic``); ``mark_static(t, dim)`` keeps a dim static (over automatic
  dynamic and ``dynamic=True``, not over ``mark_dynamic``).
- Parameters and buffers of modules are always static (their sizes do not change per call),
  and sizes 0 and 1 are never dynamic (kernels branch on them).
- Int arguments of the frame follow the same rules (an int seen with two values is a symbol
  from then on; with ``dynamic=True`` from the start): sizes a graph break carries into a
  resume function stay symbolic there. Ints read from anywhere else (module attributes,
  globals, defaults) are constants.

The requests are stored on the tensor as attributes, so they travel with it into the capture.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ptc_capture.errors import ShapeConstraintError
from ptc_capture.guards import Source, describe_condition, source_expr
from ptc_capture.logs import channel
from ptc_spec import SymbolEnv

__all__ = ["DimRequest", "DynamicPolicy", "Mark", "check_marks", "mark_dynamic", "mark_static", "source_label"]

_DYNAMIC_ATTR = "_ptc_dynamic_dims"
"""dim -> (min, max) (None for unbounded): the dims mark_dynamic asked for."""
_STATIC_ATTR = "_ptc_static_dims"
"""The dims mark_static asked for."""

_log = channel("dynamic")


def _dims(tensor: torch.Tensor, index: int | Iterable[int]) -> list[int]:
    dims = [index] if isinstance(index, int) else list(index)
    ndim = tensor.dim()
    for d in dims:
        if not -ndim <= d < ndim:
            raise IndexError(f"dim {d} is out of range for a tensor of {ndim} dims")
    return [d % ndim for d in dims]


def mark_dynamic(tensor: torch.Tensor, index: int | Iterable[int], *, min: int | None = None, max: int | None = None) -> None:
    """Make dims ``index`` of ``tensor`` dynamic when a capture next reads it (sizes in ``[min, max]``)."""
    if min is not None and max is not None and min > max:
        raise ValueError(f"mark_dynamic: min {min} is above max {max}")
    marks: dict[int, tuple[int | None, int | None]] = dict(getattr(tensor, _DYNAMIC_ATTR, {}))
    for d in _dims(tensor, index):
        marks[d] = (min, max)
    setattr(tensor, _DYNAMIC_ATTR, marks)


def mark_static(tensor: torch.Tensor, index: int | Iterable[int]) -> None:
    """Keep dims ``index`` of ``tensor`` static in captures (unless also marked dynamic)."""
    setattr(tensor, _STATIC_ATTR, set(getattr(tensor, _STATIC_ATTR, set())) | set(_dims(tensor, index)))


@dataclass(frozen=True, slots=True)
class Mark:
    """A dim that mark_dynamic asked for: the trace must keep it symbolic (in ``[lower, upper]``)."""

    source: Source
    dim: int
    lower: int | None
    upper: int | None


@dataclass(frozen=True, slots=True)
class DimRequest:
    """The dims of one input to make dynamic, and which of them were marked."""

    dims: tuple[int, ...] = ()
    marks: tuple[Mark, ...] = ()


def _is_module_state(tensor: torch.Tensor, source: Source) -> bool:
    """A parameter, or a tensor read through a module's ``_parameters``/``_buffers`` table."""
    if isinstance(tensor, torch.nn.Parameter):
        return True
    s: Source | None = source
    while s is not None:
        if s.kind == "attr" and s.name in ("_parameters", "_buffers"):
            return True
        s = s.base
    return False


@dataclass(frozen=True, slots=True)
class DynamicPolicy:
    """How one capture chooses dynamic dims: ``mode`` is optimize's ``dynamic``; ``seen`` is the
    code object's size memory (source -> sizes, None where a dim was seen to change), which
    this capture updates; without it (``capture_function``) there is no automatic dynamic."""

    mode: bool | None = None
    seen: dict[Any, tuple[int | None, ...]] | None = None

    def request(self, tensor: torch.Tensor, source: Source) -> DimRequest:
        """The dims of ``tensor`` (read from ``source``) that this capture makes dynamic."""
        if _is_module_state(tensor, source):
            return DimRequest()
        shape = tuple(tensor.shape)
        marked: dict[int, tuple[int | None, int | None]] = getattr(tensor, _DYNAMIC_ATTR, {})
        static: set[int] = getattr(tensor, _STATIC_ATTR, set())
        if self.mode is True:
            wanted = set(range(len(shape)))
        elif self.mode is None:
            wanted = set(self._observe(source, shape))
        else:
            wanted = set()
        wanted = (wanted - static) | set(marked)
        dims = tuple(sorted(d for d in wanted if d < len(shape) and (shape[d] >= 2 or d in marked)))
        marks = tuple(Mark(source, d, *marked[d]) for d in sorted(marked) if d < len(shape))
        return DimRequest(dims, marks)

    def int_is_dynamic(self, value: int, source: Source) -> bool:
        """Whether an int read from ``source`` is a size symbol in this capture."""
        if source.kind != "local" or value < 2 or self.mode is False:
            return False
        if self.mode is True:
            return True
        return bool(self._observe(source, (value,), key=("int", source)))

    def _observe(self, source: Source, shape: tuple[int, ...], key: Any = None) -> frozenset[int]:
        """Record ``shape`` for ``source``; return the dims seen with more than one size."""
        if self.seen is None:
            return frozenset()
        key = source if key is None else key
        try:
            before = self.seen.get(key)
        except TypeError:  # a source keyed by an unhashable value: no memory for it
            return frozenset()
        if before is None:
            self.seen[key] = shape
            return frozenset()
        if len(before) != len(shape):
            # Another rank: no dim can be trusted to stay put (torch makes them all dynamic).
            merged: tuple[int | None, ...] = (None,) * len(shape)
        else:
            merged = tuple(b if b == s else None for b, s in zip(before, shape))
        for dim, (old, new) in enumerate(zip(before, merged)):
            if old is not None and new is None and _log.isEnabledFor(logging.DEBUG):
                _log.debug("%s dim %d changed size (%s, now %s): dynamic from now on", source_label(source), dim, old, shape[dim])
        self.seen[key] = merged
        return frozenset(d for d, m in enumerate(merged) if m is None)


def source_label(source: Source) -> str:
    """How a person names an input: ``x`` for an argument, else the expression that reads it."""
    root = source
    while root.base is not None:
        root = root.base
    names = {root.name: str(root.name)} if root.kind == "local" else None
    return source_expr(source, names)


def constrain(env: SymbolEnv, mark: Mark, size: Any) -> None:
    """Apply a mark's range to the symbol of its dim; raise if the dim could not be made dynamic."""
    where = f"{source_label(mark.source)} dim {mark.dim}"
    if not isinstance(size, sympy.Symbol):
        raise ShapeConstraintError(
            f"{where} was marked dynamic (mark_dynamic) but stays static: its size {size} is 0 or 1, or the tensor"
            " is not densely laid out; remove the mark or pass a dense tensor with a size of at least 2"
        )
    hint = env.hints[size]
    lower = 2 if mark.lower is None else mark.lower
    upper = math.inf if mark.upper is None else mark.upper
    if not lower <= hint <= upper:
        raise ShapeConstraintError(f"{where} was marked dynamic in [{mark.lower}, {mark.upper}], but its size is {hint}")
    if mark.lower is not None and mark.lower > 2:
        env.guard_bool(sympy.Ge(size, mark.lower))
    if mark.upper is not None:
        env.guard_bool(sympy.Le(size, mark.upper))


def check_marks(env: SymbolEnv, marks: Iterable[tuple[Mark, sympy.Symbol]]) -> None:
    """Raise ShapeConstraintError when the trace fixed a marked dim to one value."""
    for mark, sym in marks:
        value = env.simplify(sym)
        vr = env.value_range(sym)
        if value.is_number or vr.lower == vr.upper:
            fixed = value if value.is_number else vr.lower
            why = [describe_condition(g) for g in env.guards if sym in g.free_symbols and g.func in (sympy.Eq,)]
            because = f" (guard {why[0]})" if why else ""
            raise ShapeConstraintError(
                f"{source_label(mark.source)} dim {mark.dim} was marked dynamic (mark_dynamic) but the traced code"
                f" specialized it to {fixed}{because}; remove the mark, or avoid code that needs its exact value"
                " (range(), int(), data-dependent branches)"
            )
