"""Dict views (``d.keys()``, ``d.values()``, ``d.items()``) as live objects over the dict's storage.

A view is a ``view`` Var: ``value`` is the method descriptor that made it (``dict.keys``,
``OrderedDict.items`` ...), ``items[0]`` the dict Var it shows. Python's views are live: each
read sees the dict as it is then (https://docs.python.org/3/library/stdtypes.html#dict-views),
so every read here goes back to the dict's storage. An iterator over a view (or a dict) takes
the dict's keys when it starts and, as CPython's dict iterator does, refuses to go on once the
dict changed size: a graph break, so eager raises its RuntimeError at that ``next``.
"""

from __future__ import annotations

import collections
import gc
from typing import Any

from ptc_capture.guards import Guard, Source
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.interpreter.values import key_var
from ptc_capture.variables import IterBox, Var, python_value

__all__ = [
    "is_view_iterator",
    "keys_view",
    "make_view",
    "resumed_iterator",
    "view_contents",
    "view_iter",
    "view_storage",
    "view_unchanged",
]


def make_view(method: Any, target: Var) -> Var:
    """The view ``method(target)`` (``method`` one of dict's or OrderedDict's keys/values/items)."""
    return Var("view", method, items=(target,))


def keys_view(target: Var) -> Var:
    """``target.keys()`` of a dict Var, an OrderedDict's own when it is one."""
    base = collections.OrderedDict if target.value is collections.OrderedDict else dict
    return make_view(vars(base)["keys"], target)


def view_storage(frame: Frame, view: Var) -> dict[Any, Var]:
    """The entries of the dict behind ``view``, as they are now."""
    from ptc_capture.interpreter.objects import dict_storage

    return dict_storage(frame, view.items[0])[0].items


def _entry(kind: str, key: Any, value: Var) -> Var:
    if kind == "keys":
        return key_var(key)
    if kind == "values":
        return value
    return Var("tuple", tuple, items=(key_var(key), value))


def view_contents(frame: Frame, view: Var) -> list[Var]:
    """What iterating ``view`` now yields (keys, values or (key, value) pairs)."""
    kind = view.value.__name__
    return [_entry(kind, k, v) for k, v in view_storage(frame, view).items()]


def view_iter(frame: Frame, view: Var, reverse: bool = False) -> Var:
    """``iter(view)`` (``reversed(view)``): an iterator that reads each value when it is taken."""
    return _iterator(view, view_storage(frame, view), reverse, 0)


def _iterator(view: Var, first: dict[Any, Var], reverse: bool, position: int) -> Var:
    # ``first``: the dict's entries when the iterator started, which fix the keys it walks.
    kind = view.value.__name__
    keys = list(first)
    if reverse:
        keys.reverse()
    box = IterBox([key_var(k) for k in keys], position, over=view)
    # A dict subclass from the frame is read afresh (and guarded) on each read, but the trace
    # never changes it: read once.
    fixed = view.items[0].kind == "object"

    def step(frame: Frame) -> Var | None:
        entries = first if fixed else view_storage(frame, view)
        if len(entries) != len(keys):
            raise Unsupported("a dict changed size during iteration (RuntimeError in eager)")
        if box.pos == len(keys):
            # Exhausted, CPython's iterator lets its dict go: later changes no longer matter.
            box.items, box.pos, box.over = [], 0, None
            return None
        key = keys[box.pos]
        if key not in entries:
            # A key replaced by another (size unchanged): CPython's iterator walks its table,
            # whose order is not the trace's to guess.
            raise Unsupported("a dict's keys changed during iteration")
        box.pos += 1
        return _entry(kind, key, entries[key])

    box.step = step
    box.reverse = reverse
    return Var("iter", box=box)


_ITERATOR_KINDS: dict[type, str] = {
    type(iter({})): "keys",
    type(iter({}.values())): "values",
    type(iter({}.items())): "items",
}


def resumed_iterator(state: CaptureState, value: Any, source: Source) -> Var | None:
    """The iter Var of a plain dict's iterator read from ``source`` (a loop resumed after a graph
    break), over the dict it walks; None to leave it opaque."""
    kind = _ITERATOR_KINDS[type(value)]
    state.guards.add(Guard("type", source, type(value)))
    try:
        # What is left to come, without advancing it; raises when the dict changed size.
        remaining = value.__reduce__()[1][0]
    except RuntimeError:
        return None
    state.guards.add(Guard("len", Source("reduce", None, source).item(1).item(0), (list, len(remaining))))
    # A running iterator holds its dict first (and an items iterator its reused result tuple);
    # one that reached its end let its dict go, and changes to the dict no longer reach it.
    held = gc.get_referents(value)
    referents = Source("referents", None, source)
    state.guards.add(Guard("len", referents, (list, len(held))))
    if not held or type(held[0]) is not dict:
        return Var("iter", box=IterBox([])) if not remaining else None
    mapping = held[0]
    keys = list(mapping)
    position = len(keys) - len(remaining)
    if kind == "values":
        walked = all(v is mapping[k] for k, v in zip(keys[position:], remaining, strict=True))
    else:
        walked = [r if kind == "keys" else r[0] for r in remaining] == keys[position:]
    if not walked:
        return None  # keys replaced while it was running: CPython's walk is not ours to guess
    target = state.wrap(mapping, referents.item(0))
    if target.kind != "dict":
        return None
    return _iterator(make_view(vars(dict)[kind], target), target.box.items, False, position)


def view_unchanged(box: IterBox) -> bool:
    """Whether the dict under a view iterator still holds the keys, in the order, it started with."""
    assert box.over is not None
    target = box.over.items[0]
    if target.kind == "object":
        return True  # a dict subclass from the frame, which the trace does not change
    storage = target.box.items if target.kind == "dict" else target.box.items.items
    keys = list(storage)
    if box.reverse:
        keys.reverse()
    return keys == [python_value(k) for k in box.items]


def is_view_iterator(box: IterBox) -> bool:
    """True for the iterator of a view (or dict) made by view_iter, still able to go on."""
    return box.step is not None and box.over is not None and box.over.kind == "view"
