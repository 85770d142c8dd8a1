"""Symbolic values of the interpreter: one frozen ``Var`` with a ``kind`` and a few mutable boxes.

Kinds: ``tensor`` (a graph node with TensorMeta), ``const`` (a Python value known at trace
time), ``null`` (CPython's NULL stack marker), ``tuple``, ``list``/``dict``/``iter``/``cell``
(mutable, in a box), ``function`` (user code to inline), ``closure`` (a function made while
tracing), ``callable`` (builtins, torch functions, classes: handled by the call tables),
``module`` (an nn.Module), ``object`` (any other object, read natively), ``method`` (a bound
method: ``items[0]`` is self), ``tensor_method`` (``value`` is the method name), ``ctx``
(a context manager: ``value`` is the grad mode it sets, or an AutocastRegion), ``ctx_exit``
(its ``__exit__``: the grad mode to restore, or an AutocastExit), ``userobj`` (an instance of a Python class created while
tracing: ``value`` is its class, its attributes and, for dict, list and set subclasses, its
contents are in an ObjBox; see interpreter/objects.py), ``sym`` (a size computed from dynamic input sizes:
``value`` is a torch.SymInt, SymFloat or SymBool; see symbolic_sizes.py), ``slice`` (a slice
with a symbolic bound: ``items`` are start, stop and step), ``partial`` (a functools.partial
made in the trace over values without a Python value: ``items`` are the function, the tuple of
bound arguments and the dict of bound keywords), ``view`` (a dict view: ``value`` is the method
that made it, ``dict.keys`` or ``OrderedDict.items``..., ``items[0]`` the dict; see
interpreter/views.py).
"""

from __future__ import annotations

import collections
import gc
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ptc_capture.autocast_state import AutocastExit, AutocastRegion
from ptc_capture.guards import Guard, Source
from ptc_capture.symbolic_sizes import SYM_TYPES, constant_of
from ptc_spec import TensorMeta

if TYPE_CHECKING:
    import torch.fx

    from ptc_capture.interpreter.state import CaptureState

__all__ = [
    "CellBox", "DictBox", "IterBox", "ListBox", "ObjBox", "Var", "const", "constant_key", "python_value", "size_var",
    "tuple_of", "value_source", "wrap",
]  # fmt: skip


@dataclass(slots=True, eq=False)
class ListBox:
    """Contents of a list; ``mutated`` says whether a sourced list needs its contents replayed."""

    items: list[Var]
    mutated: bool = False


@dataclass(slots=True, eq=False)
class DictBox:
    """Contents of a dict keyed by Python constants."""

    items: dict[Any, Var]
    mutated: bool = False


@dataclass(slots=True, eq=False)
class IterBox:
    """An iterator: ``inner`` (an iterator Var being drained) first, then ``items`` from ``pos``,
    then each iterable ``outer`` (an iterator Var) yields, read only when reached; or, with
    ``step``, items made one at a time.

    ``items`` is the list's own ``ListBox.items`` when ``over`` is a list Var: the iterator then
    sees changes made to the list after it was made, as CPython's list iterator does (it reads
    by index). ``outer`` is how ``itertools.chain`` reads its inputs lazily.
    """

    items: list[Var]
    pos: int = 0
    over: Var | None = None
    inner: Var | None = None
    outer: Var | None = None
    step: Callable[[Any], Var | None] | None = None
    """Makes the next item on demand (given the Frame), None at the end: lazy iterators such as
    map(), zip() and itertools.count(); read before everything else."""
    reverse: bool = False
    """For the iterator of a dict view (``over`` is a ``view`` Var, ``items`` the keys it walks):
    whether it is ``reversed(view)``'s."""
    remake: Callable[[], tuple[Any, list[Var]]] | None = None
    """With ``step``: the callable and arguments that make, now, a real iterator that goes on as
    this one (``enumerate`` over the rest of its input from its next count), so that a graph
    break inside a loop over it can hand the iterator to the resume function."""

    def pending(self) -> list[Var]:
        """The Vars this iterator may still produce or read (for liveness and rebuilding)."""
        rest = list(self.items[self.pos :])
        if self.step is not None and self.remake is not None:
            rest += self.remake()[1]
        return rest + [v for v in (self.inner, self.outer) if v is not None]


@dataclass(slots=True, eq=False)
class CellBox:
    """A closure cell created while tracing."""

    contents: Var | None = None


@dataclass(slots=True, eq=False)
class ObjBox:
    """The instance attributes of a Python object created while tracing, and, for a subclass of
    a builtin container, its contents (``items``): a DictBox (dict, OrderedDict), a ListBox
    (list) or a set of Python constants (set, whose items are hashable values)."""

    attrs: dict[str, Var]
    items: DictBox | ListBox | set[Any] | None = None

    def contents(self) -> list[Var]:
        """The Vars the object holds: its attribute values, then its container items."""
        found = list(self.attrs.values())
        if isinstance(self.items, DictBox):
            found += self.items.items.values()
        elif isinstance(self.items, ListBox):
            found += self.items.items
        return found


@dataclass(frozen=True, slots=True, eq=False)
class Var:
    """One symbolic value (identity matters: two Vars are equal only if they are the same object)."""

    kind: str
    value: Any = None
    node: torch.fx.Node | None = None
    meta: TensorMeta | None = None
    example: torch.Tensor | None = None
    items: tuple[Var, ...] = ()
    box: Any = None
    source: Source | None = None

    def __repr__(self) -> str:
        if self.kind == "tensor":
            assert self.meta is not None and self.node is not None
            return f"Var(tensor {self.node.name} {list(self.meta.shape)} {self.meta.dtype})"
        if self.kind == "const":
            return f"Var(const {self.value!r})"
        if self.kind == "sym":
            return f"Var(sym {self.value})"
        return f"Var({self.kind} {type(self.value).__name__})"


NULL = Var("null")


def const(value: Any, source: Source | None = None) -> Var:
    """A Var for a Python value known at trace time."""
    return Var("const", value, source=source)


def size_var(value: Any) -> Var:
    """The Var of a size: ``sym`` for a SymInt/SymFloat/SymBool that is not a constant, else a const."""
    value = constant_of(value)
    if isinstance(value, SYM_TYPES):
        return Var("sym", value)
    return const(value)


_CONST_TYPES = (type(None), bool, int, float, str, bytes, complex, torch.dtype, torch.device, torch.layout,
                torch.memory_format, range, slice, type(Ellipsis), type(NotImplemented))


def python_value(var: Var) -> Any:
    """Return the real Python value of a Var that has one; raise TypeError for tensors and boxes we cannot rebuild."""
    kind = var.kind
    if kind in ("const", "function", "callable", "module", "object", "sym"):
        # A sym's value is its SymInt: Python code given it computes symbolically, and what
        # needs a real number asks the SymbolEnv (a guard).
        return var.value
    if kind == "slice":
        return slice(*(python_value(v) for v in var.items))
    if kind == "tuple":
        values = tuple(python_value(v) for v in var.items)
        if not isinstance(var.value, type) or var.value is tuple:
            return values
        return tuple_of(var.value, values)
    if kind == "list":
        return [python_value(v) for v in var.box.items]
    if kind == "dict":
        entries = {k: python_value(v) for k, v in var.box.items.items()}
        return var.value(entries) if isinstance(var.value, type) else entries
    if kind == "view":
        # A view over a copy of what the dict holds now: set operations, ``==`` and ``len``
        # read it at once, and nothing keeps it (the view itself is rebuilt from the real dict).
        target = var.items[0]
        if var.value.__name__ == "keys" and target.kind in ("dict", "userobj"):
            # The keys alone are constants, whatever the values hold.
            storage = target.box.items if target.kind == "dict" else target.box.items.items
            mapping = var.value.__objclass__.fromkeys(storage)
        elif target.kind == "userobj" and target.box.items is not None:
            mapping = var.value.__objclass__({k: python_value(v) for k, v in target.box.items.items.items()})
        else:
            mapping = python_value(target)
        return var.value(mapping)
    raise TypeError(f"a {kind} value has no Python value at trace time")


_HEAP_TYPE = 1 << 9
"""Py_TPFLAGS_HEAPTYPE: a class defined in Python (https://docs.python.org/3/c-api/typeobj.html#c.Py_TPFLAGS_HEAPTYPE)."""


def tuple_of(cls: type, values: tuple[Any, ...]) -> Any:
    """An instance of the tuple subclass ``cls`` holding ``values``, as a tuple Var of that class stands for it.

    A Python subclass is made by ``tuple.__new__`` itself, past the class's own ``__new__`` and
    ``__init__`` (whose effects the trace already ran: they may take other arguments, as a
    namedtuple's ``__new__`` takes one per field); C subclasses (torch.Size, torch.return_types)
    take one sequence.
    """
    if cls.__flags__ & _HEAP_TYPE:
        return tuple.__new__(cls, values)
    return cls(values)


def is_python_value(var: Var) -> bool:
    """True when python_value(var) succeeds."""
    try:
        python_value(var)
    except TypeError:
        return False
    return True


_SEQUENCE_ITERATORS: tuple[type, ...] = (type(iter([])), type(iter(())), type(iter(range(0))))


def _wrap_iterator(state: CaptureState, value: Any, source: Source) -> Var:
    # A resume function receives the live iterator of an unrolled loop; __reduce__ shows its
    # sequence and position without advancing it.
    reduced = value.__reduce__()
    if len(reduced) >= 3 and type(reduced[1][0]) not in (list, tuple, range):
        # Over a subclass (a list subclass's storage): left opaque, so using it is a graph break.
        state.guards.add(Guard("type", source, type(value)))
        return Var("object", value, source=source)
    state.guards.add(Guard("len", Source("reduce", None, source), (tuple, len(reduced))))
    if len(reduced) < 3:
        return Var("iter", box=IterBox([]))
    sequence, position = reduced[1][0], reduced[2]
    reduce_source = Source("reduce", None, source)
    state.guards.add(Guard("const", reduce_source.item(2), position))
    seq_var = state.wrap(sequence, reduce_source.item(1).item(0))
    if seq_var.kind == "list":
        return Var("iter", box=IterBox(seq_var.box.items, position, over=seq_var))
    items = list(seq_var.items) if seq_var.kind == "tuple" else None
    if items is None and seq_var.kind == "const" and isinstance(seq_var.value, range):
        items = [const(v) for v in seq_var.value]
    assert items is not None, "an exact list, tuple or range wraps as one"
    return Var("iter", box=IterBox(items[position:]))


_DICT_ITERATORS: tuple[type, ...] = (type(iter({})), type(iter({}.values())), type(iter({}.items())))


def _wrap_comprehension_iterator(state: CaptureState, value: Any, source: Source) -> Var:
    # A comprehension's own iterator over a dict: CPython 3.11 passes it to the comprehension's
    # frame as the argument ``.0`` and nothing else holds it, so the trace may consume a copy.
    # __reduce__ lists the items still to come without advancing it.
    reduced = value.__reduce__()
    reduce_source = Source("reduce", None, source)
    state.guards.add(Guard("len", reduce_source, (tuple, len(reduced))))
    items = state.wrap(reduced[1][0], reduce_source.item(1).item(0))
    return Var("iter", box=IterBox(list(items.box.items)))


_DICT_VIEWS: dict[type, Any] = {
    type(getattr(base(), name)()): vars(base)[name]
    for base in (dict, collections.OrderedDict)
    for name in ("keys", "values", "items")
}
"""The view types of dict and OrderedDict, each with the method that makes it."""


def _wrap_view(state: CaptureState, value: Any, source: Source) -> Var:
    # A view passed in (a resume function's local): modelled over its dict, read through its
    # referents, so that the trace's changes to that dict show in the view as in eager.
    state.guards.add(Guard("type", source, type(value)))
    target = state.wrap(gc.get_referents(value)[0], Source("referents", None, source).item(0))
    return Var("view", _DICT_VIEWS[type(value)], items=(target,), source=source)


def _wrap_autocast(state: CaptureState, value: Any, source: Source | None) -> Var:
    # A real torch.autocast object (the instance a @torch.autocast(...) decorator closes over)
    # or a region's exit passed to a resume function: the trace reads their fields once, so the
    # object itself is guarded.
    if source is not None:
        state.guards.add(Guard("id", source, value))
    if isinstance(value, AutocastExit):
        return Var("ctx_exit", value, source=source)
    region = AutocastRegion.of(value)
    if region is None:
        return Var("object", value, source=source)
    return Var("ctx", region, source=source)


_KEY_TYPES = (str, int, bool, float, type(None), torch.dtype, torch.device)


def constant_key(key: Any) -> bool:
    """True for a dict key the trace can hold as a constant: equal keys are interchangeable
    (str, int, bool, float but NaN, None, dtypes, devices, classes, and tuples of these)."""
    ty = type(key)
    if ty is tuple:
        return all(constant_key(k) for k in key)
    if ty is float:
        return not math.isnan(key)  # a NaN key is found only by identity
    if isinstance(key, type):
        # A class compares and hashes by identity unless its metaclass says otherwise
        # (registries keyed by config classes, as transformers' auto mappings).
        return all(getattr(ty, slot) is getattr(type, slot) for slot in ("__eq__", "__hash__"))
    if ty.__module__ == "typing" and all(getattr(ty, slot) is getattr(object, slot) for slot in ("__eq__", "__hash__")):
        # typing's special forms (Union, Literal) key validator tables; they too compare by identity.
        return True
    return ty in _KEY_TYPES


def value_source(source: Source, key: Any, index: int, raw: bool = False) -> Source:
    """The source of the value under ``key``, the ``index``-th key of a dict read from ``source``.

    ``source[key]`` when the key has a literal form (str, int); otherwise the ``index``-th of the
    dict's values, in the key order its keys guard fixes. ``raw`` reads through dict's own slots,
    past a dict subclass's ``__getitem__``/``values``.
    """
    if type(key) in (str, int):
        return Source("raw_item", key, source) if raw else source.item(key)
    return Source("raw_values" if raw else "values", None, source).item(index)


def _fresh_bound_method(value: Any) -> bool:
    """Whether ``value`` is a method bound at each attribute read (a new object every time)."""
    if isinstance(value, types.MethodType):
        return True
    bound = getattr(value, "__self__", None)
    return isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and bound is not None and not isinstance(bound, types.ModuleType)


def wrap(state: CaptureState, value: Any, source: Source | None) -> Var:
    """Return the Var of a real value read from ``source``, adding the guards the trace relies on."""
    guards = state.guards
    ty = type(value)
    if isinstance(value, torch.Tensor):
        return state.graph_input(value, source)
    if ty is int and source is not None:
        size = state.int_input(value, source)
        if size is not None:
            return size
    if ty in _CONST_TYPES:
        if source is not None:
            guards.add(Guard("const", source, value))
        return const(value, source)
    if ty is tuple or ty is torch.Size:
        if source is not None:
            guards.add(Guard("len", source, (ty, len(value))))
        items = tuple(wrap(state, v, source.item(i) if source else None) for i, v in enumerate(value))
        return Var("tuple", ty, items=items, source=source)
    if ty is list:
        if source is not None:
            guards.add(Guard("len", source, (ty, len(value))))
        box = ListBox([wrap(state, v, source.item(i) if source else None) for i, v in enumerate(value)])
        return state.remember_box(value, Var("list", box=box, source=source))
    if ty in (dict, collections.OrderedDict) and all(constant_key(k) for k in value):
        if source is not None:
            guards.add(Guard("keys", source, (ty, tuple(value))))
        dbox = DictBox(
            {k: wrap(state, v, value_source(source, k, i) if source else None) for i, (k, v) in enumerate(value.items())}
        )
        # An OrderedDict keeps its class in ``value`` (type(), move_to_end, its rebuild).
        return state.remember_box(value, Var("dict", None if ty is dict else ty, box=dbox, source=source))
    if ty in _DICT_VIEWS and source is not None:
        return _wrap_view(state, value, source)
    if type(value).__name__ == "GradModeExit" and type(value).__module__ == "ptc_capture.resume":
        if source is not None:
            guards.add(Guard("type", source, ty))
            guards.add(Guard("const", source.attr("mode"), value.mode))
        return Var("ctx_exit", value.mode, source=source)
    if isinstance(value, (torch.amp.autocast, AutocastExit)):
        return _wrap_autocast(state, value, source)
    if ty in _SEQUENCE_ITERATORS and source is not None:
        return _wrap_iterator(state, value, source)
    if ty in _DICT_ITERATORS and source is not None and source.kind == "local" and source.name == ".0":
        return _wrap_comprehension_iterator(state, value, source)
    if (ty is enumerate or ty is zip) and source is not None:
        from ptc_capture.interpreter.iterators import resumed_lazy_iterator

        found = resumed_lazy_iterator(state, value, source)
        if found is not None:
            return found
    if ty in _DICT_ITERATORS and source is not None:
        from ptc_capture.interpreter.views import resumed_iterator

        found = resumed_iterator(state, value, source)
        if found is not None:
            return found
    if isinstance(value, torch.nn.Module):
        if source is not None:
            guards.add(Guard("id", source, value))
            # As the const guard a read of ``self.training`` in forward adds, so the two are one.
            guards.add(Guard("const", source.attr("training"), value.training))
        return Var("module", value, source=source)
    if isinstance(value, types.FunctionType):
        # The code is what the trace inlined; defaults and closure contents are guarded
        # through their own sources when read, so a fresh function object with the same
        # code (a nested def run again) still hits the cache.
        if source is not None:
            guards.add(Guard("type", source, types.FunctionType))
            guards.add(Guard("id", source.attr("__code__"), value.__code__))
        return Var("function", value, source=source)
    if callable(value) or isinstance(value, types.ModuleType):
        if source is not None:
            if _fresh_bound_method(value):
                # `obj.__reduce_ex__` is a new object on every read, so its identity never
                # holds twice and would recompile every call; what the read means is fixed by
                # the object it binds (and, for a Python method, the function).
                guards.add(Guard("id", source.attr("__self__"), value.__self__))
                if isinstance(value, types.MethodType):
                    guards.add(Guard("id", source.attr("__func__"), value.__func__))
            else:
                guards.add(Guard("id", source, value))
        return Var("callable", value, source=source)
    if source is not None and isinstance(value, dict):
        from ptc_capture.interpreter.objects import wrap_record

        record = wrap_record(state, value, source)
        if record is not None:
            return record
    if source is not None:
        guards.add(Guard("type", source, ty))
    return Var("object", value, source=source)

