"""Instances of user classes in the trace: construction, slots (``__setattr__``, ``__getitem__``,
``__len__``, ``__iter__``, ``__bool__``) and the dict storage of dict subclasses.

An instance made while tracing is a ``userobj`` Var: its class in ``value``, its instance
attributes in an ObjBox, and for subclasses of dict/OrderedDict (dataclass-style model outputs),
list and set the container's contents in ``ObjBox.items``. A dataclass dict subclass read from
the frame (a model output whose own ``__init__``/``__setitem__`` run as frames of their own, or
one a resume function receives) is a userobj too, with a source: what the trace changes on it is
replayed onto the real object after the graph (``record_changed``). The C slots its methods reach through
``super()`` (``object.__setattr__``, ``dict.__setitem__``, ``dict.get`` ...) have rules in the
BUILTINS table, which also serve dict subclasses read from the frame (with a source) and plain
dicts; list's and set's are in container_slots.py.
"""

from __future__ import annotations

import collections
import dataclasses
import types
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.guards import Guard, Source
from ptc_capture.interpreter.calls import BUILTINS, Caller, call, inline_function
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.interpreter.values import as_const, sequence_items
from ptc_capture.variables import DictBox, ListBox, ObjBox, Var, const, constant_key, value_source

__all__ = [
    "call_slot", "class_attr", "construct", "constructible", "container_base", "dict_base", "dict_storage", "has_instance_dict", "has_slot", "is_slot",
    "iterate", "record_changed", "set_instance_attr", "store_attr", "userobj_truth", "wrap_record",
]  # fmt: skip

_DICT_BASES = (collections.OrderedDict, dict)
_CONTAINER_BASES = (*_DICT_BASES, list, set)
_TYPE_CALL = vars(type)["__call__"]
_C_INITS = (dict.__init__, collections.OrderedDict.__init__, list.__init__, set.__init__)
# Their own attribute lookup is the generic one (PyObject_GenericGetAttr), exposed per type.
_GENERIC_GETATTRIBUTE = (object.__getattribute__, dict.__getattribute__, list.__getattribute__, set.__getattribute__)


def container_base(cls: type) -> type | None:
    """The builtin container (OrderedDict, dict, list or set) whose storage instances of ``cls`` use, or None."""
    for klass in cls.__mro__:
        if klass in _CONTAINER_BASES:
            return klass
    return None


def dict_base(cls: type) -> type | None:
    """The dict type (OrderedDict or dict) whose storage instances of ``cls`` use, or None."""
    base = container_base(cls)
    return base if base in _DICT_BASES else None


def class_attr(cls: type, name: str) -> Any:
    """``name`` as found on the class (MRO order, no descriptors bound), or None."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def constructible(cls: type) -> bool:
    """True when instances of ``cls`` can be modelled as a userobj: default allocation, no attribute-read hooks."""
    # Instances are made by the metaclass's __call__: type's runs __new__ then __init__, which
    # the model below traces. A metaclass that keeps it (ABCMeta; transformers' ModelOutput
    # metaclass, which only hooks class-level stores) changes nothing about instances. Classes
    # with abstract methods left raise TypeError in eager and are refused here.
    if class_attr(type(cls), "__call__") is not _TYPE_CALL or getattr(cls, "__abstractmethods__", None):
        return False
    # torch's own classes (modules, distributions, hooks) keep state the model below does not
    # know; its dataclasses (option records such as LinearCrossEntropyOptions) are plain data.
    if (cls.__module__ or "").startswith("torch") and not dataclasses.is_dataclass(cls):
        return False
    new = getattr(cls, "__new__", None)
    base = container_base(cls)
    if not (new is object.__new__ or (base is not None and new is base.__new__)):
        return False
    init = getattr(cls, "__init__", None)
    # The containers' own __init__ (a subclass that adds only methods) have rules.
    c_init = init in _C_INITS and id(init) in BUILTINS and base is not None
    if not (isinstance(init, types.FunctionType) or c_init or (init is object.__init__ and new is object.__new__)):
        return False
    setter = getattr(cls, "__setattr__", None)
    getter = getattr(cls, "__getattribute__", None)
    # A Python __getattribute__ is traced on every read (attrs.userobj_attr).
    generic = getter in _GENERIC_GETATTRIBUTE
    return (generic or isinstance(getter, types.FunctionType)) and (
        setter is object.__setattr__ or isinstance(setter, types.FunctionType)
    )


def is_slot(cls: type, name: str) -> bool:
    """True when ``name`` is a ``__slots__`` entry of ``cls``: stored in the instance's slot, not its __dict__."""
    return type(class_attr(cls, name)) is types.MemberDescriptorType


def has_instance_dict(cls: type) -> bool:
    """True when instances of ``cls`` have a ``__dict__`` (no ``__slots__``, or one naming ``__dict__``)."""
    return bool(cls.__dictoffset__)


def construct(frame: Frame, cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``cls(*args, **kwargs)``: a fresh userobj, then ``__init__`` inlined."""
    obj = Var("userobj", cls, box=ObjBox({}, _empty_storage(container_base(cls))))
    init = class_attr(cls, "__init__")
    if init is object.__init__:
        if args or kwargs:
            raise Unsupported(f"{cls.__name__}() takes no arguments (TypeError in eager)")
        return obj
    if isinstance(init, types.FunctionType):
        result = inline_function(frame, init, None, [obj, *args], kwargs)
    else:
        result = BUILTINS[id(init)](frame, const(init), [obj, *args], kwargs)
    if not (result.kind == "const" and result.value is None):
        raise Unsupported(f"{cls.__name__}.__init__ returned a value (TypeError in eager)")
    return obj


def wrap_record(state: CaptureState, value: Any, source: Source) -> Var | None:
    """The userobj Var of a dataclass dict subclass read from ``source`` (a model output), or None
    to leave it an opaque object.

    Its storage keys and instance-dict keys are guarded and each value is read past the class's
    own ``__getitem__``/``__getattribute__``, so the class's Python methods trace over the Var
    as over one made in the trace; the stores they make are logged (``record_changed``).
    """
    cls = type(value)
    base: Any = dict_base(cls)
    if base is None or cls is base or not dataclasses.is_dataclass(cls) or not constructible(cls):
        return None
    if not has_instance_dict(cls) or any(type(v) is types.MemberDescriptorType for k in cls.__mro__ for v in vars(k).values()):
        return None  # a __slots__ member holds state the instance dict does not show
    keys = tuple(base.keys(value))
    attrs = vars(value)
    # Keys without a literal form are read by position, which an OrderedDict's own order may reorder.
    if not all(type(k) in (str, int) for k in keys) or not all(type(k) is str for k in attrs):
        return None
    state.guards.add(Guard("type", source, cls))
    state.guards.add(Guard("keys", source, (cls, keys)))
    dict_source = source.attr("__dict__")
    state.guards.add(Guard("keys", dict_source, (dict, tuple(attrs))))
    items = {k: state.wrap(base.__getitem__(value, k), value_source(source, k, i, raw=True)) for i, k in enumerate(keys)}
    box = ObjBox({name: state.wrap(v, dict_source.item(name)) for name, v in attrs.items()}, DictBox(items))
    return state.remember_box(value, Var("userobj", cls, box=box, source=source))


def record_changed(frame: Frame, obj: Var, attr: str | None = None) -> None:
    """Log a change the trace made to a userobj from the frame (``attr``: that attribute was
    stored, else its contents changed), to be replayed onto the real object after the graph."""
    if obj.source is None:
        return
    effects = frame.state.side_effects
    if attr is None:
        effects.mutate_contents(obj)
    else:
        # Replayed past the class's own __setattr__, whose logic the trace already ran.
        effects.replay_store(obj, attr, obj.box.attrs[attr])


def _empty_storage(base: type | None) -> DictBox | ListBox | set[Any] | None:
    if base is None:
        return None
    if base is list:
        return ListBox([])
    return set() if base is set else DictBox({})


def _dataclass_replace(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # dataclasses.replace(obj, /, **changes) is obj.__class__(**changes) with each init field
    # not in changes read from obj (https://docs.python.org/3/library/dataclasses.html#dataclasses.replace).
    # Its fields are class-level metadata, fixed when @dataclass ran, so they are read here
    # rather than traced through the stdlib's private Field bookkeeping.
    from ptc_capture.interpreter.attrs import load_attr
    from ptc_capture.interpreter.builtins import python_type

    if len(args) != 1:
        raise Unsupported("dataclasses.replace() takes one positional argument (TypeError in eager)")
    obj = args[0]
    cls = python_type(obj)
    fields = getattr(cls, "__dataclass_fields__", None)
    if not isinstance(fields, dict):
        raise Unsupported("dataclasses.replace() of a non-dataclass instance (TypeError in eager)")
    changes = dict(kwargs)
    for field in fields.values():
        kind = getattr(field, "_field_type", None)
        if kind is getattr(dataclasses, "_FIELD_CLASSVAR", None):
            continue
        if not field.init:
            if field.name in changes:
                raise Unsupported(f"dataclasses.replace() of the init=False field {field.name!r} (ValueError in eager)")
            continue
        if field.name not in changes:
            if kind is getattr(dataclasses, "_FIELD_INITVAR", None) and field.default is dataclasses.MISSING:
                raise Unsupported(f"dataclasses.replace() without the InitVar {field.name!r} (ValueError in eager)")
            changes[field.name] = load_attr(frame, obj, field.name)
    return call(frame, frame.state.wrap(cls, None), [], changes)


BUILTINS[id(dataclasses.replace)] = _dataclass_replace


def has_slot(obj: Var, name: str) -> bool:
    """True when the class of a userobj defines ``name`` (other than object's own)."""
    found = class_attr(obj.value, name)
    return found is not None and found is not getattr(object, name, None)


def call_slot(frame: Frame, obj: Var, name: str, args: list[Var]) -> Var:
    """Trace ``type(obj).<name>(obj, *args)`` for a userobj: inline Python code, or apply the C slot's rule."""
    found = class_attr(obj.value, name)
    if isinstance(found, types.FunctionType):
        return inline_function(frame, found, None, [obj, *args], {})
    rule = BUILTINS.get(id(found))
    if rule is not None:
        return rule(frame, const(found), [obj, *args], {})
    raise Unsupported(f"{obj.value.__name__}.{name} is not supported")


def store_attr(frame: Frame, obj: Var, name: str, value: Var) -> None:
    """Trace ``obj.<name> = value`` on a userobj, through its class's ``__setattr__``."""
    setter = class_attr(obj.value, "__setattr__")
    if setter is object.__setattr__:
        set_instance_attr(frame, obj, name, value)
    elif isinstance(setter, types.FunctionType):
        # A frozen dataclass's __setattr__ raises FrozenInstanceError: a graph break, so the
        # frame runs eagerly and raises it where eager does.
        inline_function(frame, setter, None, [obj, const(name), value], {})
    else:
        raise Unsupported(f"{obj.value.__name__}.__setattr__ is not supported")


def set_instance_attr(frame: Frame, obj: Var, name: str, value: Var) -> None:
    """Trace ``object.__setattr__(obj, name, value)`` on a userobj: a property's setter, a slot, or the instance dict."""
    cls = obj.value
    found = class_attr(cls, name)
    if isinstance(found, property):
        # A data descriptor of the class takes the store (https://docs.python.org/3/howto/descriptor.html).
        if not isinstance(found.fset, types.FunctionType):
            raise Unsupported(f"property {name!r} of a {cls.__name__} object has no Python setter")
        inline_function(frame, found.fset, None, [obj, value], {})
        return
    if type(found) is not types.MemberDescriptorType:
        if found is not None and hasattr(type(found), "__set__"):
            raise Unsupported(f"attribute {name!r} of a {cls.__name__} object is a {type(found).__name__} descriptor")
        if not has_instance_dict(cls):
            raise Unsupported(f"{cls.__name__} object has no attribute {name!r} (__slots__; AttributeError in eager)")
    obj.box.attrs[name] = value
    record_changed(frame, obj, name)


def userobj_truth(frame: Frame | None, obj: Var) -> bool:
    """bool(obj) for a userobj: ``__bool__``, else ``__len__``, else True (the data model's order)."""
    from ptc_capture.interpreter.values import truth

    for name in ("__bool__", "__len__"):
        if has_slot(obj, name) or (name == "__len__" and obj.box.items is not None):
            if frame is None:
                raise Unsupported(f"truth value of a {obj.value.__name__} object here")
            return truth(call_slot(frame, obj, name, []), frame)
    return True


def dict_storage(frame: Frame, var: Var) -> tuple[DictBox, bool]:
    """The dict contents behind ``var`` and whether the trace may change them."""
    if var.kind == "dict":
        return var.box, True
    if var.kind == "userobj" and isinstance(var.box.items, DictBox):
        return var.box.items, True
    if var.kind == "object" and isinstance(var.value, dict) and var.source is not None:
        return _sourced_view(frame, var), False
    raise Unsupported(f"a dict method on a {var.kind} without dict contents")


def _sourced_view(frame: Frame, var: Var) -> DictBox:
    # A dict subclass from the frame (a registry, a model output passed in): its keys are
    # guarded and each value is read past the subclass's own __getitem__, as the C slot does.
    value = var.value
    assert var.source is not None
    base: Any = dict_base(type(value)) or dict
    keys = tuple(base.keys(value))
    literal = all(type(k) in (str, int) for k in keys)
    # Values of keys without a literal form are read by position through dict.values, whose
    # order an OrderedDict's move_to_end leaves behind its own.
    if not all(constant_key(k) for k in keys) or (not literal and base is not dict):
        raise Unsupported(f"a {type(value).__name__} with keys other than constants")
    frame.state.guards.add(Guard("keys", var.source, (type(value), keys)))
    items = {
        k: frame.state.wrap(base.__getitem__(value, k), value_source(var.source, k, i, raw=True)) for i, k in enumerate(keys)
    }
    return DictBox(items)


def _rule(*names: str) -> Callable[[Caller], Caller]:
    def register(fn: Caller) -> Caller:
        for base in _DICT_BASES:
            for name in names:
                BUILTINS[id(getattr(base, name))] = fn
        return fn

    return register


def _self_and_key(frame: Frame, args: list[Var]) -> tuple[DictBox, bool, Any]:
    box, mutable = dict_storage(frame, args[0])
    return box, mutable, as_const(args[1], "a dict key")


@_rule("get")
def _dict_get(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    box, _, key = _self_and_key(frame, args)
    found: Var = box.items.get(key, args[2] if len(args) > 2 else const(None))
    return found


@_rule("__getitem__")
def _dict_getitem(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    box, _, key = _self_and_key(frame, args)
    if key not in box.items:
        raise Unsupported(f"key {key!r} is missing (KeyError in eager)")
    found: Var = box.items[key]
    return found


@_rule("__contains__")
def _dict_contains(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    box, _, key = _self_and_key(frame, args)
    return const(key in box.items)


@_rule("__len__")
def _dict_len(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return const(len(dict_storage(frame, args[0])[0].items))


@_rule("__iter__")
def _dict_iter(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    from ptc_capture.interpreter.views import make_view, view_iter

    dict_storage(frame, args[0])
    # OrderedDict's own iterator walks its order, which move_to_end may have set apart from dict's.
    base = getattr(fn.value, "__objclass__", dict)
    return view_iter(frame, make_view(vars(base)["keys"], args[0]))


@_rule("keys", "values", "items")
def _dict_view(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # A live view over the storage (interpreter/views.py), as dict's C methods make.
    from ptc_capture.interpreter.views import make_view

    if len(args) != 1 or kwargs:
        raise Unsupported(f"dict.{fn.value.__name__}() takes no arguments (TypeError in eager)")
    dict_storage(frame, args[0])
    return make_view(fn.value, args[0])


def _mutable(frame: Frame, args: list[Var]) -> tuple[DictBox, Any]:
    box, mutable, key = _self_and_key(frame, args)
    if not mutable:
        raise Unsupported(f"changing a {type(args[0].value).__name__} from the frame through its C slots")
    if args[0].kind in ("dict", "userobj") and args[0].source is not None:
        frame.state.side_effects.mutate_contents(args[0])
    return box, key


@_rule("__setitem__")
def _dict_setitem(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    box, key = _mutable(frame, args)
    box.items[key] = args[2]
    return const(None)


@_rule("__delitem__")
def _dict_delitem(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    box, key = _mutable(frame, args)
    if key not in box.items:
        raise Unsupported(f"key {key!r} is missing (KeyError in eager)")
    del box.items[key]
    return const(None)


def _object_setattr(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # object.__setattr__ (reached as super().__setattr__ past a class's own override): the
    # plain instance-dict store, on an object made in the trace or as a replayed side effect.
    target, name_var, value = args
    name = as_const(name_var, "an attribute name")
    if target.kind == "userobj":
        set_instance_attr(frame, target, name, value)
    elif target.kind in ("object", "module") and target.source is not None:
        if isinstance(target.value, torch.nn.Module):
            raise Unsupported("object.__setattr__ on an nn.Module bypasses its parameter bookkeeping")
        frame.state.side_effects.store_attr(target, name, value, raw=True)
    else:
        raise Unsupported(f"object.__setattr__ on a {target.kind}")
    return const(None)


BUILTINS[id(object.__setattr__)] = _object_setattr


def iterate(frame: Frame, obj: Var) -> list[Var]:
    """The items of ``iter(obj)`` for a userobj."""
    return sequence_items(frame, call_slot(frame, obj, "__iter__", []))
