"""``copy.copy`` and ``copy.deepcopy`` in the traced code, modelled on the interpreter's values.

A copy is a new value of the trace: lists, dicts and instances of plain Python classes become
fresh boxes (so the runner rebuilds a new object on every call, as eager makes one), constants
are copied at trace time, and under ``deepcopy`` a tensor is cloned in the graph as
``Tensor.__deepcopy__`` clones it. ``memo`` keeps shared references shared and cycles closed,
as the copy module's memo does.

An object read from the frame is copied from its instance dict (keys guarded, each value read
and guarded through its source) when its class uses the default copy protocol: no
``__copy__``/``__deepcopy__``/``__reduce__``/``__getstate__`` of its own, default allocation.
What falls outside (nn.Modules, tensors that require grad, classes with copy hooks) is a
graph break naming the type, where eager runs the copy.
"""

from __future__ import annotations

import collections
import copy
import copyreg
import types

from ptc_capture.guards import Guard
from ptc_capture.interpreter.calls import BUILTINS, inline_function
from ptc_capture.interpreter.objects import class_attr, construct, constructible, dict_base, has_instance_dict
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.interpreter.values import graph_call
from ptc_capture.variables import DictBox, ListBox, ObjBox, Var, const, value_source

__all__ = ["copy_value"]

# The copy protocol's hooks, in the order the copy module looks for them; a class keeping
# object's, dict's or OrderedDict's own (OrderedDict.__reduce__ gives the class, the instance
# dict and the items) follows the default protocol the model below reproduces.
_HOOKS = ("__copy__", "__deepcopy__", "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
_DEFAULTS = {id(getattr(base, name, None)) for base in (object, dict, collections.OrderedDict) for name in _HOOKS}
_DICT_SETITEM = {id(dict.__setitem__)}


def _default_protocol(cls: type, deep: bool) -> bool:
    """True when copying instances of ``cls`` takes the default route: reduce to (class, state).

    A shallow copy's ``__copy__`` is inlined by the caller; each kind of copy ignores the other's hook.
    """
    if cls in copyreg.dispatch_table:
        return False
    for name in _HOOKS:
        if name == "__copy__" or (not deep and name == "__deepcopy__"):
            continue
        found = class_attr(cls, name)
        if found is not None and id(found) not in _DEFAULTS:
            return False
    return True


def copy_value(frame: Frame, var: Var, deep: bool, memo: dict[int, Var] | None = None) -> Var:
    """The Var of ``copy.deepcopy(var)`` (``deep``) or ``copy.copy(var)``."""
    memo = {} if memo is None else memo
    found = memo.get(id(var))
    if found is not None:
        return found
    kind = var.kind
    if kind == "const":
        try:
            value = copy.deepcopy(var.value) if deep else copy.copy(var.value)
        except Exception as exc:
            raise Unsupported(f"copying a {type(var.value).__name__} raised {type(exc).__name__} at trace time") from exc
        # Immutable values come back as themselves: the Var (and its source) stays.
        result = var if value is var.value else const(value)
    elif kind in ("sym", "slice", "function", "callable"):
        # Sizes are ints, slices immutable; functions and classes are atomic to the copy module.
        result = var
    elif kind == "tensor":
        result = _copy_tensor(frame, var, deep)
    elif kind == "tuple":
        if not deep:
            return var
        memo[id(var)] = var  # placeholder for cycles through a tuple, as the copy module's
        items = tuple(copy_value(frame, v, deep, memo) for v in var.items)
        same = all(a is b for a, b in zip(items, var.items))
        result = var if same else Var("tuple", var.value, items=items)
    elif kind == "list":
        result = Var("list", box=ListBox([]))
        memo[id(var)] = result
        result.box.items.extend(copy_value(frame, v, deep, memo) if deep else v for v in var.box.items)
    elif kind == "dict":
        result = Var("dict", var.value, box=DictBox({}))
        memo[id(var)] = result
        for key, value in var.box.items.items():
            result.box.items[key] = copy_value(frame, value, deep, memo) if deep else value
    elif kind == "userobj" and var.box.items is not None and not isinstance(var.box.items, DictBox):
        # copy refills a list or set subclass through its own extend/add (copyreg's reduce).
        raise Unsupported(f"copy.{'deepcopy' if deep else 'copy'} of a {var.value.__name__} object, a list or set subclass")
    elif kind == "userobj":
        result = _copy_object(frame, var, var.value, dict(var.box.attrs), var.box.items, deep, memo)
    elif kind == "object" and var.source is not None:
        result = _copy_sourced(frame, var, deep, memo)
    elif kind == "module":
        raise Unsupported(f"copy.{'deepcopy' if deep else 'copy'} of an nn.Module ({type(var.value).__name__})")
    else:
        raise Unsupported(f"copy.{'deepcopy' if deep else 'copy'} of a {kind} value")
    memo[id(var)] = result
    return result


def _copy_tensor(frame: Frame, var: Var, deep: bool) -> Var:
    assert var.meta is not None
    if not deep:
        # copy.copy goes through Tensor.__reduce_ex__: a new tensor over the same storage.
        raise Unsupported("copy.copy of a tensor (a new tensor sharing its storage)")
    if var.meta.requires_grad and frame.state.grad_enabled:
        # Eager makes a new leaf (or refuses a non-leaf): not a value the graph can give.
        raise Unsupported("copy.deepcopy of a tensor that requires grad")
    return graph_call(frame, "call_method", "clone", (var,), {})


def _copy_object(
    frame: Frame, var: Var, cls: type, attrs: dict[str, Var], items: DictBox | None, deep: bool, memo: dict[int, Var]
) -> Var:
    name = "deepcopy" if deep else "copy"
    if not deep:
        copier = class_attr(cls, "__copy__")
        if copier is not None and id(copier) not in _DEFAULTS:
            if not isinstance(copier, types.FunctionType):
                raise Unsupported(f"copy.copy of a {cls.__name__} object, whose __copy__ is not Python code")
            return inline_function(frame, copier, None, [var], {})
    if not _default_protocol(cls, deep):
        raise Unsupported(f"copy.{name} of a {cls.__name__} object, whose class customizes copying")
    setitem = class_attr(cls, "__setitem__")
    if items is not None and id(setitem) not in _DICT_SETITEM and id(setitem) != id(getattr(dict_base(cls), "__setitem__", None)):
        # The copy module refills a dict subclass through its own __setitem__.
        raise Unsupported(f"copy.{name} of a {cls.__name__} object, a dict subclass with its own __setitem__")
    if items is not None and dict_base(cls) is collections.OrderedDict:
        # OrderedDict.__reduce__ rebuilds with ``cls()``: its __init__ runs, unlike object's reduce.
        result = construct(frame, cls, [], {})
    else:
        result = Var("userobj", cls, box=ObjBox({}, DictBox({}) if items is not None else None))
    memo[id(var)] = result
    # The state is written straight into the instance dict (and slots), past __setattr__, as
    # copy._reconstruct does; then the dict contents.
    for key, value in attrs.items():
        result.box.attrs[key] = copy_value(frame, value, deep, memo) if deep else value
    if items is not None:
        for key, value in items.items.items():
            result.box.items.items[key] = copy_value(frame, value, deep, memo) if deep else value
    return result


def _copy_sourced(frame: Frame, var: Var, deep: bool, memo: dict[int, Var]) -> Var:
    """A copy of an object read from the frame, from its instance dict."""
    value, source = var.value, var.source
    assert source is not None
    cls = type(value)
    name = "deepcopy" if deep else "copy"
    slots = any(type(v) is types.MemberDescriptorType for klass in cls.__mro__ for v in vars(klass).values())
    if not constructible(cls) or dict_base(cls) is not None or not has_instance_dict(cls) or slots:
        raise Unsupported(f"copy.{name} of a {cls.__name__} object from outside the trace (its class customizes storage or attribute access)")
    if frame.state.side_effects.has_stores(var):
        raise Unsupported(f"copy.{name} of a {cls.__name__} object this trace changed")
    state = vars(value)
    dict_source = source.attr("__dict__")
    frame.state.guards.add(Guard("keys", dict_source, (dict, tuple(state))))
    attrs = {k: frame.state.wrap(v, value_source(dict_source, k, i)) for i, (k, v) in enumerate(state.items())}
    return _copy_object(frame, var, cls, attrs, None, deep, memo)


def _deepcopy(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Unsupported("copy.deepcopy with a memo argument")
    return copy_value(frame, args[0], True)


def _copy(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Unsupported("copy.copy takes one argument (TypeError in eager)")
    return copy_value(frame, args[0], False)


BUILTINS[id(copy.deepcopy)] = _deepcopy
BUILTINS[id(copy.copy)] = _copy
