"""Methods of lists, dicts and tuples built or read in the trace (mutations of frame objects are side effects)."""

from __future__ import annotations

from typing import Any

from ptc_capture.interpreter.calls import caller
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.interpreter.values import as_const, from_python, key_var, sequence_items
from ptc_capture.variables import DictBox, ListBox, Var, const, is_python_value, python_value

__all__: list[str] = []


def _list_method(frame: Frame, target: Var, name: str, args: list[Var]) -> Var:
    items: list[Var] = target.box.items
    result: Var = const(None)
    if name == "append":
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
    elif name in ("index", "count", "copy", "__len__"):
        if name == "copy":
            return Var("list", box=ListBox(list(items)))
        return from_python(getattr(python_value(target), name)(*[as_const(a, "an argument") for a in args]))
    else:
        raise Unsupported(f"list.{name} is not supported")
    if target.source is not None:
        frame.state.side_effects.mutate_contents(target)
    return result


def _dict_method(frame: Frame, target: Var, name: str, args: list[Var]) -> Var:
    items: dict[Any, Var] = target.box.items
    if name == "get":
        return items.get(as_const(args[0], "a key"), args[1] if len(args) > 1 else const(None))
    if name == "keys":
        return Var("tuple", tuple, items=tuple(key_var(k) for k in items))
    if name == "values":
        return Var("tuple", tuple, items=tuple(items.values()))
    if name == "items":
        return Var("tuple", tuple, items=tuple(Var("tuple", tuple, items=(key_var(k), v)) for k, v in items.items()))
    if name == "copy":
        return Var("dict", box=DictBox(dict(items)))
    if name in ("update", "pop", "setdefault", "clear"):
        if name == "update":
            if args[0].kind != "dict":
                raise Unsupported("dict.update from a non-dict")
            items.update(args[0].box.items)
            result: Var = const(None)
        elif name == "pop":
            key = as_const(args[0], "a key")
            if key not in items and len(args) < 2:
                raise Unsupported("dict.pop of a missing key (KeyError in eager)")
            result = items.pop(key, args[1] if len(args) > 1 else const(None))
        elif name == "setdefault":
            result = items.setdefault(as_const(args[0], "a key"), args[1] if len(args) > 1 else const(None))
        else:
            items.clear()
            result = const(None)
        if target.source is not None:
            frame.state.side_effects.mutate_contents(target)
        return result
    raise Unsupported(f"dict.{name} is not supported")


@caller("container_method")
def _call_container_method(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target = fn.items[0]
    if kwargs:
        raise Unsupported("keyword arguments to container methods")
    if target.kind == "list":
        return _list_method(frame, target, fn.value, args)
    if target.kind == "dict":
        return _dict_method(frame, target, fn.value, args)
    if target.kind == "tuple" and fn.value in ("index", "count") and is_python_value(target):
        return from_python(getattr(python_value(target), fn.value)(*[as_const(a, "an argument") for a in args]))
    raise Unsupported(f"{target.kind}.{fn.value} is not supported")
