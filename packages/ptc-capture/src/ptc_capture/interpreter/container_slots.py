"""list's, set's and tuple's C methods reached by instances of their subclasses made in the trace.

A list or set subclass instance is a ``userobj`` whose ObjBox holds its contents (a ListBox; a
set of Python constants, as a set made in the trace is). The base class's methods, found on the
class by attribute lookup or through ``super()``, are BUILTINS rules keyed by the method
descriptor, and run on those contents with the plain containers' own rules: a class that
overrides one of them runs its Python code and reaches the base's through ``super()``, as in
CPython. (dict's and OrderedDict's rules are in objects.py and containers.py.)

A tuple subclass instance is a ``tuple`` Var of its class, as a namedtuple is: it is immutable
and its class may not override what a tuple Var models (values.overridden_tuple_slot). It is made by
tracing the class's ``__new__`` and ``__init__`` down to ``tuple.__new__``, as ``type.__call__``
does.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ptc_capture.interpreter.builtins import python_type
from ptc_capture.interpreter.calls import BUILTINS, Caller, inline_function
from ptc_capture.interpreter.containers import list_method
from ptc_capture.interpreter.objects import class_attr
from ptc_capture.interpreter.ops import binary, contains, delitem, getitem, setitem
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.interpreter.values import as_const, from_python, overridden_tuple_slot, sequence_items
from ptc_capture.variables import IterBox, ListBox, Var, const

__all__ = ["construct_tuple"]

Args = list[Var]
Kwargs = dict[str, Var]
_TYPE_CALL = vars(type)["__call__"]


def _register(base: type, *names: str) -> Callable[[Caller], Caller]:
    def register(fn: Caller) -> Caller:
        for name in names:
            BUILTINS[id(vars(base)[name])] = fn
        return fn

    return register


# -- list ---------------------------------------------------------------------------------------


def _list_self(fn: Var, args: Args) -> tuple[Var, Var]:
    """The method's ``self`` and a list Var over its contents (itself, for a plain list)."""
    name = fn.value.__name__
    if not args:
        raise Unsupported(f"list.{name}() called without self (TypeError in eager)")
    target = args[0]
    if target.kind == "list":
        return target, target
    if target.kind == "userobj" and isinstance(target.box.items, ListBox):
        return target, Var("list", box=target.box.items)
    raise Unsupported(f"list.{name}() of a {target.kind} value")


_LIST_METHODS = ("append", "extend", "insert", "pop", "clear", "reverse", "sort", "index", "count", "copy")


@_register(list, *_LIST_METHODS)
def _list_named(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # list.copy of a subclass makes a plain list, as list_method's does.
    _, view = _list_self(fn, args)
    return list_method(frame, view, fn.value.__name__, args[1:], kwargs)


def _one_argument(fn: Var, args: Args, kwargs: Kwargs, count: int) -> None:
    if len(args) != count or kwargs:
        raise Unsupported(f"list.{fn.value.__name__}() got {len(args) - 1} arguments (TypeError in eager)")


@_register(list, "__len__")
def _list_len(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _one_argument(fn, args, kwargs, 1)
    return const(len(_list_self(fn, args)[1].box.items))


@_register(list, "__getitem__")
def _list_getitem(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # A slice of a list subclass is a plain list, as getitem makes it.
    _one_argument(fn, args, kwargs, 2)
    return getitem(frame, _list_self(fn, args)[1], args[1])


@_register(list, "__setitem__")
def _list_setitem(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _one_argument(fn, args, kwargs, 3)
    setitem(frame, _list_self(fn, args)[1], args[1], args[2])
    return const(None)


@_register(list, "__delitem__")
def _list_delitem(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _one_argument(fn, args, kwargs, 2)
    delitem(frame, _list_self(fn, args)[1], args[1])
    return const(None)


@_register(list, "__contains__")
def _list_contains(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _one_argument(fn, args, kwargs, 2)
    return const(contains(frame, args[1], _list_self(fn, args)[1]))


@_register(list, "__iter__")
def _list_iter(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # CPython's list iterator reads by index, so it sees later changes; ``over`` is the object
    # itself, so an iterator that outlives the graph is rebuilt over the rebuilt object.
    _one_argument(fn, args, kwargs, 1)
    target, view = _list_self(fn, args)
    return Var("iter", box=IterBox(view.box.items, over=target))


@_register(list, "__init__")
def _list_init(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # list.__init__ empties the list, then extends it from the iterable.
    if len(args) > 2 or kwargs:
        raise Unsupported("list() takes at most one iterable (TypeError in eager)")
    target, view = _list_self(fn, args)
    view.box.items[:] = sequence_items(frame, args[1]) if len(args) > 1 else []
    if target.source is not None:
        frame.state.side_effects.mutate_contents(target)
    return const(None)


@_register(list, "__add__", "__iadd__")
def _list_add(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _one_argument(fn, args, kwargs, 2)
    target, view = _list_self(fn, args)
    other = args[1]
    if other.kind == "userobj" and isinstance(other.box.items, ListBox):
        other = Var("list", box=other.box.items)
    if fn.value.__name__ == "__iadd__":
        list_method(frame, view, "extend", [other], {})
        return target
    if other.kind != "list":
        raise Unsupported(f"list + {other.kind} (TypeError in eager, or a subclass's own __radd__)")
    return binary(frame, "+", view, other)


# -- set ----------------------------------------------------------------------------------------

# Methods that only read the set (their results are new plain sets, numbers or flags) and those
# that change it in place (the ``__i*__`` operators return the set itself).
_SET_READS = (
    "__contains__", "__len__", "issubset", "issuperset", "isdisjoint", "union", "intersection", "difference",
    "symmetric_difference", "copy", "__or__", "__and__", "__sub__", "__xor__", "__eq__", "__ne__", "__le__", "__lt__",
    "__ge__", "__gt__",
)  # fmt: skip
_SET_CHANGES = (
    "add", "discard", "remove", "pop", "clear", "update", "intersection_update", "difference_update",
    "symmetric_difference_update", "__ior__", "__iand__", "__isub__", "__ixor__",
)  # fmt: skip


def _set_storage(var: Var) -> set[Any] | None:
    if var.kind == "userobj" and isinstance(var.box.items, set):
        return var.box.items
    return None


def _set_argument(var: Var) -> Any:
    storage = _set_storage(var)
    return storage if storage is not None else as_const(var, "a set method argument")


@_register(set, *_SET_READS, *_SET_CHANGES)
def _set_method(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # The contents are Python constants held by a set made in this trace: the method runs
    # natively on it (a set from the frame is not a userobj and never reaches here).
    name = fn.value.__name__
    storage = _set_storage(args[0]) if args else None
    if storage is None or kwargs:
        raise Unsupported(f"set.{name}() of a {args[0].kind if args else 'missing'} value")
    try:
        result = getattr(set, name)(storage, *[_set_argument(a) for a in args[1:]])
    except Exception as exc:
        raise Raised(f"set.{name} raised {type(exc).__name__} at trace time", exc) from exc
    if result is storage:
        return args[0]
    return from_python(result)


@_register(set, "__iter__")
def _set_iter(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    storage = _set_storage(args[0]) if len(args) == 1 and not kwargs else None
    if storage is None:
        raise Unsupported("set.__iter__() of a value without set contents")
    return Var("iter", box=IterBox([const(v) for v in storage]))


@_register(set, "__init__")
def _set_init(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # set.__init__ empties the set, then adds the iterable's items.
    storage = _set_storage(args[0]) if args else None
    if storage is None or len(args) > 2 or kwargs:
        raise Unsupported("set() takes at most one iterable (TypeError in eager)")
    items = [as_const(v, "a set item") for v in sequence_items(frame, args[1])] if len(args) > 1 else []
    storage.clear()
    try:
        storage.update(items)
    except TypeError as exc:
        raise Raised("set() of an unhashable item", exc) from exc
    return const(None)


# -- tuple --------------------------------------------------------------------------------------


def _tuple_new(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # tuple.__new__(cls, iterable=()): the items of the iterable, as a tuple of class cls.
    cls = args[0].value if args and args[0].kind in ("callable", "const") else None
    if not (isinstance(cls, type) and issubclass(cls, tuple)) or len(args) > 2 or kwargs:
        raise Unsupported("tuple.__new__() takes a tuple subclass and at most one iterable (TypeError in eager)")
    overridden = overridden_tuple_slot(cls)
    if overridden is not None:
        raise Unsupported(f"a {cls.__qualname__} object, a tuple subclass with its own {overridden}")
    items = tuple(sequence_items(frame, args[1])) if len(args) > 1 else ()
    return Var("tuple", cls, items=items)


BUILTINS[id(tuple.__new__)] = _tuple_new


def _make_namedtuple(cls: type, args: Args, kwargs: Kwargs) -> Var:
    # The fields bound as the generated __new__(cls, field, ...) binds them, defaults included.
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    defaults: dict[str, Any] = getattr(cls, "_field_defaults", {})
    values = dict(zip(fields, args))
    if len(args) > len(fields):
        raise Unsupported(f"{cls.__name__}() got too many arguments (TypeError in eager)")
    for key, value in kwargs.items():
        if key not in fields or key in values:
            raise Unsupported(f"{cls.__name__}() got a bad keyword {key!r} (TypeError in eager)")
        values[key] = value
    for key in fields:
        if key not in values:
            if key not in defaults:
                raise Unsupported(f"{cls.__name__}() is missing {key!r} (TypeError in eager)")
            values[key] = from_python(defaults[key])
    return Var("tuple", cls, items=tuple(values[f] for f in fields))


def _namedtuple_new(cls: type) -> Any:
    """The ``__new__`` collections.namedtuple generated for ``cls`` or a base of it, or None."""
    for klass in cls.__mro__:
        if "_fields" in vars(klass) and "_make" in vars(klass):
            return vars(klass).get("__new__")
    return None


def construct_tuple(frame: Frame, cls_var: Var, args: Args, kwargs: Kwargs) -> Var:
    """Trace ``cls(*args, **kwargs)`` for a tuple subclass: its ``__new__``, then its ``__init__``
    on what that returned when it is an instance of the class (``type.__call__``'s order)."""
    cls: type = cls_var.value
    if class_attr(type(cls), "__call__") is not _TYPE_CALL:
        raise Unsupported(f"constructing {cls.__qualname__} objects: its metaclass has its own __call__")
    new = class_attr(cls, "__new__")
    init = class_attr(cls, "__init__")
    if new is not None and new is _namedtuple_new(cls) and init is object.__init__ and overridden_tuple_slot(cls) is None:
        return _make_namedtuple(cls, args, kwargs)
    if new is tuple.__new__:
        made = _tuple_new(frame, const(new), [cls_var, *args], kwargs)
    elif isinstance(new, staticmethod) and isinstance(new.__func__, types.FunctionType):
        made = inline_function(frame, new.__func__, None, [cls_var, *args], kwargs)
    else:
        raise Unsupported(f"constructing {cls.__qualname__} objects: its __new__ is not Python code")
    if not issubclass(python_type(made), cls):
        return made
    if isinstance(init, types.FunctionType):
        result = inline_function(frame, init, None, [made, *args], kwargs)
        if not (result.kind == "const" and result.value is None):
            raise Unsupported(f"{cls.__qualname__}.__init__ returned a value (TypeError in eager)")
    elif init is not object.__init__:
        raise Unsupported(f"constructing {cls.__qualname__} objects: its __init__ is not Python code")
    return made

