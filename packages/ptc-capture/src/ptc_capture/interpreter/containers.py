"""Methods of lists, dicts and tuples built or read in the trace (mutations of frame objects are side effects)."""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any

from ptc_capture.interpreter.calls import BUILTINS, Caller, call, caller
from ptc_capture.interpreter.objects import call_slot, class_attr, dict_base, dict_storage
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.interpreter.values import as_const, from_python, key_var, sequence_items
from ptc_capture.interpreter.views import make_view
from ptc_capture.variables import DictBox, ListBox, Var, const, is_python_value, python_value

__all__ = ["dict_items", "list_method", "mapping_items", "sort_vars"]


def dict_items(frame: Frame, source: Var, ordered: bool = False) -> dict[Any, Var]:
    """The entries ``dict(source)`` (``ordered``: ``OrderedDict(source)``) would have: a mapping's
    (anything with ``keys``), or the pairs of an iterable of pairs."""
    entries = mapping_items(frame, source, raw=not ordered)
    if entries is not None:
        return entries
    entries = {}
    for pair in sequence_items(frame, source):
        parts = sequence_items(frame, pair)
        if len(parts) != 2:
            raise Unsupported("a dict entry that is not a pair (ValueError in eager)")
        entries[as_const(parts[0], "a dict key")] = parts[1]
    return entries


def mapping_items(frame: Frame, source: Var, raw: bool = True) -> dict[Any, Var] | None:
    """The entries of ``source`` read as CPython's dict merge reads a mapping, or None when it has no ``keys``.

    A dict is copied; a dict subclass that keeps dict's own ``__iter__`` is read from its
    storage when ``raw`` (dict's C merge does, past the subclass's ``keys``/``__getitem__``;
    OrderedDict's update does not); anything else with ``keys`` is read as
    ``{k: source[k] for k in source.keys()}``, running the object's own methods
    (https://docs.python.org/3/library/stdtypes.html#dict.update).
    """
    from ptc_capture.interpreter.attrs import load_attr
    from ptc_capture.interpreter.ops import getitem

    if source.kind == "dict":
        return dict(source.box.items)
    cls = _class_of(source)
    if cls is None or class_attr(cls, "keys") is None:
        return None
    if raw and dict_base(cls) is not None and class_attr(cls, "__iter__") is dict.__iter__:
        return dict(dict_storage(frame, source)[0].items)
    entries: dict[Any, Var] = {}
    for key in sequence_items(frame, call(frame, load_attr(frame, source, "keys"), [], {})):
        entries[as_const(key, "a dict key")] = getitem(frame, source, key)
    return entries


def _class_of(var: Var) -> type | None:
    # The class whose attributes decide how a value merges; None for the interpreter's own
    # containers and constants (tuples, lists, iterators), which have no ``keys``.
    if var.kind == "userobj":
        return var.value  # type: ignore[no-any-return]
    if var.kind in ("object", "module"):
        return type(var.value)
    return None


def sort_vars(frame: Frame, items: list[Var], key: Var | None, reverse: Var | None) -> list[Var]:
    """``sorted(items, key=key, reverse=reverse)`` over Vars: the items keep their identity, and
    the order comes from their keys, which must have Python values (a tensor key would be data)."""
    if key is None or (key.kind == "const" and key.value is None):
        keys = [as_const(v, "a sorted item") for v in items]
    elif _native_key(key, items):
        # A C function (len, str.lower, an itemgetter) over Python values: applied natively.
        try:
            keys = [key.value(as_const(v, "a sorted item")) for v in items]
        except Exception as exc:
            raise Unsupported(f"a sort key raised {type(exc).__name__} at trace time") from exc
    else:
        # A key function, written in Python or not, is traced once per item in eager's order.
        keys = [as_const(call(frame, key, [v], {}), "a sort key") for v in items]
    backwards = bool(as_const(reverse, "reverse=")) if reverse is not None else False
    try:
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=backwards)
    except TypeError as exc:
        raise Unsupported("sorting compared values that do not order (TypeError in eager)") from exc
    return [items[i] for i in order]


def _native_key(key: Var, items: list[Var]) -> bool:
    return (
        key.kind in ("const", "callable")
        and not isinstance(key.value, types.FunctionType)
        and all(is_python_value(v) for v in items)
    )


def list_method(frame: Frame, target: Var, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``target.<name>(*args, **kwargs)`` for one of list's methods on a list Var."""
    items: list[Var] = target.box.items
    result: Var = const(None)
    if kwargs and name != "sort":
        raise Unsupported(f"list.{name}() takes no keyword arguments (TypeError in eager)")
    if name == "sort":
        if args or set(kwargs) - {"key", "reverse"}:
            raise Unsupported("list.sort() takes only key= and reverse= (TypeError in eager)")
        # CPython empties the list while it sorts (a key function sees []), then puts the
        # items back in place, where iterators over it (which share its items) see the new order.
        before = list(items)
        items.clear()
        try:
            before = sort_vars(frame, before, kwargs.get("key"), kwargs.get("reverse"))
        finally:
            items[:] = before
    elif name == "append":
        items.append(args[0])
    elif name == "extend":
        items.extend(sequence_items(frame, args[0]))
    elif name == "insert":
        items.insert(as_const(args[0], "an index"), args[1])
    elif name == "pop":
        if not items:
            raise Unsupported("pop from an empty list (IndexError in eager)")
        result = items.pop(as_const(args[0], "an index") if args else -1)
    elif name == "clear":
        items.clear()
    elif name == "reverse":
        items.reverse()
    elif name in ("index", "count"):
        return _search(frame, items, name, args)
    elif name == "copy":
        return Var("list", box=ListBox(list(items)))
    else:
        raise Unsupported(f"list.{name} is not supported")
    if target.source is not None:
        frame.state.side_effects.mutate_contents(target)
    return result


def _search(frame: Frame, items: list[Var], name: str, args: list[Var]) -> Var:
    # list.index(item[, start[, stop]]) and list.count(item), comparing each element as ``in``
    # does (ops.matches): items need no Python value, and index stops at the first match.
    from ptc_capture.interpreter.ops import matches

    if not args or len(args) > (3 if name == "index" else 1):
        raise Unsupported(f"list.{name}() got {len(args)} arguments (TypeError in eager)")
    if name == "count":
        return const(sum(1 for element in items if matches(frame, element, args[0])))
    start, stop = ([as_const(a, "an index bound") for a in args[1:]] + [None, None])[:2]
    bounds = slice(start, stop)
    for position in range(len(items))[bounds]:
        if matches(frame, items[position], args[0]):
            return const(position)
    raise Raised("list.index(x): x not in list (ValueError in eager)", ValueError("list.index(x): x not in list"))


# Keyword arguments each dict method takes (OrderedDict's own methods take ``last=``).
_DICT_KEYWORDS = {"update": None, "popitem": ("last",), "move_to_end": ("last",)}


def _dict_method(frame: Frame, target: Var, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items: dict[Any, Var] = target.box.items
    ordered = target.value is collections.OrderedDict
    allowed = _DICT_KEYWORDS.get(name, ())
    if kwargs and allowed is not None and (not ordered or set(kwargs) - set(allowed)):
        raise Unsupported(f"{'OrderedDict' if ordered else 'dict'}.{name}() got unexpected keyword arguments (TypeError in eager)")
    if name == "get":
        return items.get(as_const(args[0], "a key"), args[1] if len(args) > 1 else const(None))
    if name in ("keys", "values", "items"):
        if args:
            raise Unsupported(f"dict.{name}() takes no arguments (TypeError in eager)")
        return make_view(vars(collections.OrderedDict if ordered else dict)[name], target)
    if name == "copy":
        return Var("dict", target.value, box=DictBox(dict(items)))
    if name in _DICT_MUTATORS or (ordered and name in _ORDERED_MUTATORS):
        method = _DICT_MUTATORS.get(name) or _ORDERED_MUTATORS[name]
        result = method(frame, ordered, items, args, kwargs)
        if target.source is not None:
            frame.state.side_effects.mutate_contents(target)
        return result
    raise Unsupported(f"{'OrderedDict' if ordered else 'dict'}.{name} is not supported")


def _update(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) > 1:
        raise Unsupported("dict.update() takes at most one positional argument (TypeError in eager)")
    items.update(dict_items(frame, args[0], ordered=ordered) if args else {})
    items.update(kwargs)
    return const(None)


def _pop(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = as_const(args[0], "a key")
    if key not in items and len(args) < 2:
        raise Unsupported("dict.pop of a missing key (KeyError in eager)")
    found: Var = items.pop(key, args[1] if len(args) > 1 else const(None))
    return found


def _setdefault(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    found: Var = items.setdefault(as_const(args[0], "a key"), args[1] if len(args) > 1 else const(None))
    return found


def _clear(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    items.clear()
    return const(None)


def _last(args: list[Var], kwargs: dict[str, Var]) -> bool:
    flag = kwargs.get("last", args[0] if args else None)
    return True if flag is None else bool(as_const(flag, "last="))


def _popitem(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    # dict.popitem takes the last entry (LIFO); OrderedDict.popitem(last=False) the first.
    if not items:
        raise Unsupported("popitem from an empty dict (KeyError in eager)")
    last = _last(args, kwargs) if ordered else True
    key = next(reversed(items)) if last else next(iter(items))
    return Var("tuple", tuple, items=(key_var(key), items.pop(key)))


def _move_to_end(frame: Frame, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = as_const(args[0], "a key")
    if key not in items:
        raise Unsupported(f"move_to_end of a missing key {key!r} (KeyError in eager)")
    value = items.pop(key)
    if _last(args[1:], kwargs):
        items[key] = value
    else:
        rest = dict(items)
        items.clear()
        items[key] = value
        items.update(rest)
    return const(None)


_Mutator = Callable[[Frame, bool, dict[Any, Var], list[Var], dict[str, Var]], Var]
_DICT_MUTATORS: dict[str, _Mutator] = {
    "update": _update, "pop": _pop, "setdefault": _setdefault, "clear": _clear, "popitem": _popitem,
}  # fmt: skip
_ORDERED_MUTATORS: dict[str, _Mutator] = {"move_to_end": _move_to_end}
"""Methods that change a dict (OrderedDict only: ``_ORDERED_MUTATORS``), each returning the call's result."""


# -- dict's and OrderedDict's C methods called on a dict subclass made in the trace (or on a
# dict Var through the unbound method, ``dict.update(d, other)``), found as BUILTINS rules by
# the id of the method descriptor (``super().__init__(**kw)``, ``self.update(...)``).
#
# dict's methods work on the storage directly. OrderedDict's, on a subclass, reach the
# subclass's own item methods as CPython's odict does: ``__init__`` and ``update`` store each
# entry through ``self[key] = value`` (MutableMapping.update), ``copy`` builds ``type(self)()``
# and fills it the same way; pop, popitem and setdefault read and delete through
# ``__getitem__``/``__delitem__``/``__contains__``, so a class overriding those is left to a
# graph break (https://github.com/python/cpython/blob/3.11/Objects/odictobject.c).

_ITEM_SLOTS = ("__getitem__", "__setitem__", "__delitem__", "__contains__")


def _storage_target(frame: Frame, fn: Var, args: list[Var], name: str) -> tuple[Var, dict[Any, Var], bool]:
    """The dict behind the method's ``self``, its entries, and whether the method is OrderedDict's."""
    if not args:
        raise Unsupported(f"dict.{name}() called without self (TypeError in eager)")
    target = args[0]
    box, mutable = dict_storage(frame, target)
    if not mutable:
        raise Unsupported(f"changing a {type(target.value).__name__} from the frame through its C slots")
    ordered = getattr(fn.value, "__objclass__", dict) is collections.OrderedDict
    if ordered and not issubclass(_class_of(target) or target.value or dict, collections.OrderedDict):
        raise Unsupported(f"OrderedDict.{name} of a plain dict (TypeError in eager)")
    return target, box.items, ordered


def _overrides_items(target: Var) -> bool:
    return target.kind == "userobj" and any(
        class_attr(target.value, slot) is not getattr(collections.OrderedDict, slot) for slot in _ITEM_SLOTS
    )


def _changed(frame: Frame, target: Var) -> None:
    if target.kind in ("dict", "userobj") and target.source is not None:
        frame.state.side_effects.mutate_contents(target)


def _store_entries(frame: Frame, target: Var, ordered: bool, items: dict[Any, Var], args: list[Var], kwargs: dict[str, Var]) -> None:
    """``dict.update``/``dict.__init__`` of ``target``: straight into its storage, or, for
    OrderedDict's on a subclass, one ``self[key] = value`` per entry in the class's own slot."""
    if len(args) > 1:
        raise Unsupported("dict.update() takes at most one positional argument (TypeError in eager)")
    entries = dict(dict_items(frame, args[0], ordered=ordered)) if args else {}
    entries.update(kwargs)
    if not (ordered and target.kind == "userobj"):
        items.update(entries)
        return
    for key, value in entries.items():
        call_slot(frame, target, "__setitem__", [key_var(key), value])


def _register(*names: str, ordered_only: bool = False) -> Callable[[Caller], Caller]:
    def register(fn: Caller) -> Caller:
        bases = (collections.OrderedDict,) if ordered_only else (dict, collections.OrderedDict)
        for base in bases:
            for name in names:
                BUILTINS[id(vars(base)[name])] = fn
        return fn

    return register


@_register("__init__", "update")
def _dict_store_entries(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target, items, ordered = _storage_target(frame, fn, args, fn.value.__name__)
    _store_entries(frame, target, ordered, items, args[1:], kwargs)
    _changed(frame, target)
    return const(None)


@_register("pop", "popitem", "setdefault", "clear")
def _dict_change(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = fn.value.__name__
    target, items, ordered = _storage_target(frame, fn, args, name)
    if ordered and name != "clear" and _overrides_items(target):
        raise Unsupported(f"OrderedDict.{name} of a {target.value.__name__}, whose own item methods it would call")
    if kwargs and not (ordered and name == "popitem" and set(kwargs) <= {"last"}):
        raise Unsupported(f"dict.{name}() got unexpected keyword arguments (TypeError in eager)")
    result = _DICT_MUTATORS[name](frame, ordered, items, args[1:], kwargs)
    _changed(frame, target)
    return result


@_register("move_to_end", ordered_only=True)
def _dict_move_to_end(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target, items, ordered = _storage_target(frame, fn, args, "move_to_end")
    if set(kwargs) - {"last"}:
        raise Unsupported("OrderedDict.move_to_end() got unexpected keyword arguments (TypeError in eager)")
    result = _move_to_end(frame, ordered, items, args[1:], kwargs)
    _changed(frame, target)
    return result


@_register("copy")
def _dict_copy(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target = args[0] if args else None
    if target is None or kwargs or len(args) > 1:
        raise Unsupported("dict.copy() takes no arguments (TypeError in eager)")
    items = dict_storage(frame, target)[0].items
    if getattr(fn.value, "__objclass__", dict) is dict:
        return Var("dict", box=DictBox(dict(items)))  # dict.copy makes a plain dict, even of a subclass
    if target.kind != "userobj":
        return Var("dict", target.value, box=DictBox(dict(items)))
    made = call(frame, frame.state.wrap(target.value, None), [], {})
    for key in list(items):
        value = call_slot(frame, target, "__getitem__", [key_var(key)])
        call_slot(frame, made, "__setitem__", [key_var(key), value])
    return made


@caller("container_method")
def _call_container_method(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target = fn.items[0]
    if target.kind == "list":
        return list_method(frame, target, fn.value, args, kwargs)
    if target.kind == "dict":
        return _dict_method(frame, target, fn.value, args, kwargs)
    if kwargs:
        raise Unsupported(f"{target.kind}.{fn.value}() takes no keyword arguments (TypeError in eager)")
    if target.kind == "tuple" and fn.value in ("index", "count") and is_python_value(target):
        return from_python(getattr(python_value(target), fn.value)(*[as_const(a, "an argument") for a in args]))
    raise Unsupported(f"{target.kind}.{fn.value} is not supported")
