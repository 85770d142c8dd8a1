"""Handlers for attribute reads and writes, and what an attribute of each kind of Var is."""

from __future__ import annotations

import dis
import types
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.guards import Source
from ptc_capture.interpreter.calls import BUILTINS, call, inline_function
from ptc_capture.interpreter.classes import made_in_trace, unwrap_descriptor
from ptc_capture.interpreter.loop import handler
from ptc_capture.interpreter.objects import class_attr, has_instance_dict, is_slot, store_attr
from ptc_capture.interpreter.state import PY312, Frame, Raised, Unsupported
from ptc_capture.interpreter.values import from_python, graph_call, module_child_source
from ptc_capture.symbolic_sizes import concrete
from ptc_capture.variables import DictBox, Var, const, size_var
from ptc_spec import TensorMeta

# Tensor attributes that are static under the guards (shape, dtype, device, requires_grad).
_TENSOR_CONST_ATTRS: dict[str, Callable[[TensorMeta], Any]] = {
    "dtype": lambda m: m.dtype,
    "device": lambda m: m.device,
    "ndim": lambda m: len(m.shape),
    "requires_grad": lambda m: m.requires_grad,
    "is_cuda": lambda m: m.device.type == "cuda",
    "is_cpu": lambda m: m.device.type == "cpu",
    "layout": lambda m: torch.strided,
    "is_sparse": lambda m: False,
    "is_nested": lambda m: False,
    "is_quantized": lambda m: False,
    "is_meta": lambda m: m.device.type == "meta",
}

# Tensor properties that are ops: recorded as the method eager runs.
_TENSOR_OP_ATTRS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "T": ("permute", ()),
    "mT": ("transpose", (-2, -1)),
    "H": ("adjoint", ()),
    "mH": ("adjoint", ()),
}

_STABLE_MODULE_PREFIXES = ("torch", "math", "operator", "builtins", "functools", "itertools", "collections")


def tensor_attr(frame: Frame, obj: Var, name: str) -> Var:
    """The Var of ``tensor.<name>``."""
    assert obj.meta is not None
    if name in _TENSOR_CONST_ATTRS:
        return const(_TENSOR_CONST_ATTRS[name](obj.meta))
    if name == "shape":
        # Dynamic dims read as symbolic sizes (the meta tensor's SymInts), static ones as ints.
        sizes = obj.example.shape if obj.example is not None else obj.meta.shape
        return Var("tuple", torch.Size, items=tuple(size_var(s) for s in sizes))
    if name == "T":
        dims = tuple(range(len(obj.meta.shape) - 1, -1, -1))
        return graph_call(frame, "call_method", "permute", (obj, *[const(d) for d in dims]), {})
    if name in ("mT", "H", "mH"):
        method, args = _TENSOR_OP_ATTRS[name]
        return graph_call(frame, "call_method", method, (obj, *[const(a) for a in args]), {})
    if name in ("real", "imag"):
        # Views of a complex tensor's parts (real of a real tensor is itself; imag raises).
        return graph_call(frame, "call_function", getattr(torch, name), (obj,), {})
    attr = getattr(torch.Tensor, name, None)
    if callable(attr):
        return Var("tensor_method", name, items=(obj,))
    raise Unsupported(f"tensor attribute .{name} is not supported")


# Py_TPFLAGS_IMMUTABLETYPE (https://docs.python.org/3/c-api/typeobj.html#c.Py_TPFLAGS_IMMUTABLETYPE):
# the attributes of such a type (object, dict, int) cannot be set or deleted.
_IMMUTABLE_TYPE = 1 << 8
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _stable_module(value: Any) -> bool:
    # torch.Tensor's attributes (its methods, read unbound) and the overloads of a torch.ops
    # packet are as fixed as torch's functions; an immutable type's attributes cannot change.
    if value is torch.Tensor or isinstance(value, torch._ops.OpOverloadPacket):
        return True
    if isinstance(value, type) and value.__flags__ & _IMMUTABLE_TYPE:
        return True
    return isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in _STABLE_MODULE_PREFIXES


def object_attr(frame: Frame, obj: Var, name: str, read: Callable[[Any, str], Any] = getattr) -> Var:
    """The Var of ``obj.<name>`` for modules, objects, functions and classes (read natively by ``read``)."""
    stored = frame.state.side_effects.load_attr(obj, name)
    if stored is not None:
        return stored
    value = obj.value
    generic = read is not getattr
    if isinstance(value, torch.nn.Module) and not generic:
        for table in ("_parameters", "_buffers", "_modules"):
            found = value.__dict__.get(table, {})
            if name in found:
                # Read through the table, as the trace did: `m._parameters['w']` is a dict
                # lookup, where `m.w` falls back to nn.Module.__getattr__ (about 1 us per step
                # of every guard check and input fetch, hundreds of times a call in a model).
                if table == "_modules":
                    source = module_child_source(obj, name)
                else:
                    source = obj.source.attr(table).item(name) if obj.source is not None else None
                if found[name] is None:
                    return const(None, source)
                return frame.state.wrap(found[name], source)
    found = class_attr(type(value), name) if obj.kind == "object" and not generic else None
    if isinstance(found, property) and isinstance(found.fget, types.FunctionType) and frame.state.side_effects.has_stores(obj):
        # The real object does not have the trace's stores yet (they are replayed after the
        # graph): a property read after them is traced, so it sees what the trace stored.
        return inline_function(frame, found.fget, None, [obj], {})
    try:
        attr = read(value, name)
    except Exception as exc:
        raise Raised(f"reading .{name} of a {type(value).__name__} raised {type(exc).__name__}", exc) from exc
    if isinstance(attr, types.MethodType) and attr.__self__ is value and isinstance(attr.__func__, types.FunctionType):
        return Var("method", attr.__func__, items=(obj,))
    if isinstance(attr, types.BuiltinMethodType) and attr.__self__ is value and not isinstance(value, type):
        # A C method the object's class inherits (keys/items/get of a dict subclass such as a
        # model output): bound to the Var, so the method's rule reads it through its source.
        descriptor = class_attr(type(value), name)
        if id(descriptor) in BUILTINS:
            return Var("method", descriptor, items=(obj,))
    if _stable_module(value):
        # Functions of torch, math and friends are not expected to be monkey-patched per call.
        return frame.state.wrap(attr, None) if not isinstance(attr, torch.Tensor) else _unsupported_tensor(name)
    if made_in_trace(value):
        # A class created in this trace: only the trace can change it.
        return frame.state.wrap(attr, None)
    source = None
    if obj.source is not None:
        source = Source("raw_attr", name, obj.source) if generic else obj.source.attr(name)
    if source is None and not isinstance(attr, (types.FunctionType, types.BuiltinFunctionType, type)):
        if plain_data(attr):
            return from_python(attr)
        raise Unsupported(f"attribute .{name} of an object without a source")
    return frame.state.wrap(attr, source)


_PLAIN_TYPES = (int, float, str, bool, type(None), torch.dtype, torch.device)

PLAIN_DATA_TYPES: set[type] = set()
"""More immutable value types read as constants (registered by other rules: c10d's reduce ops)."""


def plain_data(value: Any) -> bool:
    """Immutable Python data (numbers, strings, dtypes and tuples of them): its value is all the
    trace needs, so it is read as a constant even without a source (a kernel_size tuple)."""
    if type(value) is tuple:
        return all(plain_data(v) for v in value)
    return isinstance(value, _PLAIN_TYPES) or type(value) in PLAIN_DATA_TYPES or _type_annotation(value)


def _type_annotation(value: Any) -> bool:
    """A typing construct (``int | None``, ``list[int]``, ``Optional[str]``): immutable, as a
    class is (a dataclass field's ``type`` that validators read)."""
    ty = type(value)
    return ty in (types.UnionType, types.GenericAlias) or ty.__module__ == "typing" and hasattr(value, "__origin__")


def _unsupported_tensor(name: str) -> Var:
    raise Unsupported(f"module-level tensor {name} is not supported")


def load_attr(frame: Frame, obj: Var, name: str) -> Var:
    """The Var of ``obj.<name>``."""
    kind = obj.kind
    if kind == "tensor":
        return tensor_attr(frame, obj, name)
    if kind in ("module", "object", "function", "callable"):
        return object_attr(frame, obj, name)
    if kind == "tuple" and isinstance(obj.value, type) and hasattr(obj.value, "_fields") or (
        kind == "tuple" and name in getattr(obj.value, "__match_args__", ())
    ):
        fields = getattr(obj.value, "_fields", None) or obj.value.__match_args__
        if name in fields:
            return obj.items[list(fields).index(name)]
    if kind == "sym":
        # Attributes of a size (n.bit_length, n.real) read its value: specialized, guarded.
        obj = const(concrete(obj.value))
        kind = "const"
    if kind == "const":
        try:
            return from_python(getattr(obj.value, name))
        except AttributeError as exc:
            raise Raised(f"AttributeError reading .{name} at trace time", exc) from exc
    if kind == "tuple" and isinstance(obj.value, type) and obj.value is not tuple:
        # A Python tuple subclass's own methods, properties and class attributes (a namedtuple's
        # _replace, _asdict); tuple's and C subclasses' (torch.Size.numel) are the container's.
        for klass in obj.value.__mro__:
            if klass is tuple:
                break
            if klass.__flags__ & _HEAP_TYPE and name in vars(klass):
                return class_level_attr(frame, obj, name, vars(klass)[name])
    if kind in ("list", "dict", "tuple"):
        owner = obj.value if kind != "list" and isinstance(obj.value, type) else {"list": list, "dict": dict, "tuple": tuple}[kind]
        if not hasattr(owner, name):
            # hasattr(a_namedtuple, "buckets") is False (transformers' Reformer asks): reading a
            # name the container's class lacks raises, as in eager.
            why = f"{owner.__name__!r} object has no attribute {name!r}"
            raise Raised(f"{why} (AttributeError in eager)", AttributeError(why))
        return Var("container_method", name, items=(obj,))
    if kind == "super":
        return super_attr(frame, obj.items[0], obj.items[1], name)
    if kind == "userobj":
        return userobj_attr(frame, obj, name)
    if kind == "deferred":
        return _deferred_attr(frame, obj, name)
    if kind == "partial" and name in _PARTIAL_FIELDS:
        return obj.items[_PARTIAL_FIELDS.index(name)]
    raise Unsupported(f"attribute .{name} of a {kind} is not supported")


_PARTIAL_FIELDS = ("func", "args", "keywords")
"""The attributes of a functools.partial, in the order a ``partial`` Var holds them."""


def _deferred_attr(frame: Frame, obj: Var, name: str) -> Var:
    # A method of a value that runs after the graph: calling it is deferred too (or a break,
    # see graph_call); any other attribute (.shape, .dtype) needs the value now.
    if callable(getattr(torch.Tensor, name, None)) and not name.startswith("__"):
        return Var("tensor_method", name, items=(obj,))
    call = obj.value
    raise Unsupported(f"reading .{name} of the result of {call.label}, which runs after the graph ({call.why})")


def userobj_attr(frame: Frame, obj: Var, name: str) -> Var:
    """The Var of ``obj.<name>`` for an object created while tracing: its class's Python
    ``__getattribute__`` traced, else the generic lookup."""
    getter = class_attr(obj.value, "__getattribute__")
    if isinstance(getter, types.FunctionType):
        # As transformers' PretrainedConfig, which maps names through attribute_map.
        return inline_function(frame, getter, None, [obj, const(name)], {})
    return generic_userobj_attr(frame, obj, name)


def generic_userobj_attr(frame: Frame, obj: Var, name: str) -> Var:
    """``object.__getattribute__(obj, name)`` for an object created while tracing (instance dict, then class)."""
    if name in obj.box.attrs:
        found: Var = obj.box.attrs[name]
        return found
    if name == "__dict__" and has_instance_dict(obj.value):
        # The instance dict itself: the Var shares the ObjBox's attribute table, so writes
        # through ``obj.__dict__`` are attribute writes.
        if any(is_slot(obj.value, attr) for attr in obj.box.attrs):
            raise Unsupported(f"the __dict__ of a {obj.value.__name__} object that also has __slots__ values")
        return Var("dict", box=DictBox(obj.box.attrs))
    if name == "__class__":
        return frame.state.wrap(obj.value, None)
    for klass in obj.value.__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            break
    else:
        return _missing_attr(frame, obj, name, f"{obj.value.__name__!r} object has no attribute {name!r}")
    if type(attr) is types.MemberDescriptorType:
        return _missing_attr(frame, obj, name, f"slot {name!r} of a {obj.value.__name__} object is not set")
    return class_level_attr(frame, obj, name, attr)


def class_level_attr(frame: Frame, obj: Var, name: str, attr: Any) -> Var:
    """``obj.<name>`` where the lookup found ``attr`` on the class of ``obj`` (an instance made in the
    trace: a userobj, or a tuple Var of a subclass): methods bound, descriptors applied."""
    if isinstance(attr, types.FunctionType):
        return Var("method", attr, items=(obj,))
    unwrapped = unwrap_descriptor(frame, frame.state.wrap(obj.value, None), attr)
    if unwrapped is not None:
        return unwrapped
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        return inline_function(frame, attr.fget, None, [obj], {})
    if isinstance(attr, property) and attr.fget is not None:
        # A getter that is not Python code (``property(operator.itemgetter(0))``, as
        # NamedTuple-like classes write fields) is called as any callable.
        return call(frame, frame.state.wrap(attr.fget, None), [obj], {})
    if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)) and id(attr) in BUILTINS:
        # A C method the class inherits (dict.keys of a dict subclass): its rule takes self first.
        return Var("method", attr, items=(obj,))
    if isinstance(attr, (staticmethod, classmethod)) or hasattr(attr, "__get__"):
        raise Unsupported(f"descriptor {name!r} of a {obj.value.__name__} object")
    return frame.state.wrap(attr, None)


def _missing_attr(frame: Frame, obj: Var, name: str, why: str) -> Var:
    # The normal lookup raised AttributeError: CPython then calls the class's __getattr__, if any
    # (https://docs.python.org/3/reference/datamodel.html#object.__getattr__).
    getter = class_attr(obj.value, "__getattr__")
    if isinstance(getter, types.FunctionType):
        return inline_function(frame, getter, None, [obj, const(name)], {})
    raise Raised(f"{why} (AttributeError in eager)", AttributeError(why))


def super_attr(frame: Frame, cls: Var, self_var: Var, name: str) -> Var:
    """The Var of ``super(cls, self).<name>`` (methods are bound to ``self_var``)."""
    made_here = self_var.kind == "userobj" or (self_var.kind == "tuple" and isinstance(self_var.value, type))
    if made_here and cls.kind in ("callable", "const"):
        return _userobj_super_attr(cls.value, self_var, name)
    # super(C, cls) in a __new__ or a classmethod: a class, read natively as objects are.
    of_class = self_var.kind == "callable" and isinstance(self_var.value, type)
    if cls.kind not in ("callable", "const", "object") or (self_var.kind not in ("module", "object") and not of_class):
        raise Unsupported(f"super() over a {self_var.kind}")
    try:
        attr = getattr(super(cls.value, self_var.value), name)
    except Exception as exc:
        raise Raised(f"super().{name} raised {type(exc).__name__} at trace time", exc) from exc
    slot = _slot_after(cls.value, type(self_var.value), name)
    if slot is not None:
        # super().__getattribute__ in a class that overrides it binds object's C slot; tracing
        # the slot (rather than giving up on an unknown C function) keeps such classes in graph.
        return Var("method", slot, items=(self_var,))
    if isinstance(attr, types.MethodType) and isinstance(attr.__func__, types.FunctionType):
        return Var("method", attr.__func__, items=(self_var,))
    if isinstance(attr, torch.Tensor):
        raise Unsupported("a tensor read through super()")
    return frame.state.wrap(attr, None)


def _userobj_super_attr(cls: Any, self_var: Var, name: str) -> Var:
    mro = self_var.value.__mro__
    if not isinstance(cls, type) or cls not in mro:
        raise Unsupported("super() with a class outside the object's MRO (TypeError in eager)")
    for klass in mro[mro.index(cls) + 1 :]:
        if name in vars(klass):
            attr = vars(klass)[name]
            if isinstance(attr, types.FunctionType) or id(attr) in BUILTINS:
                return Var("method", attr, items=(self_var,))
            raise Unsupported(f"super().{name} of a {self_var.value.__name__} object")
    raise Raised(f"super() object has no attribute {name!r} (AttributeError in eager)", AttributeError(name))


def _slot_after(cls: Any, instance_type: type, name: str) -> Any:
    """The C slot that ``super(cls, obj).<name>`` finds when the interpreter has a rule for it, else None."""
    if not isinstance(cls, type) or cls not in instance_type.__mro__:
        return None
    mro = instance_type.__mro__
    for klass in mro[mro.index(cls) + 1 :]:
        if name in vars(klass):
            found = vars(klass)[name]
            slot_types = (types.WrapperDescriptorType, types.MethodDescriptorType)
            return found if type(found) in slot_types and id(found) in BUILTINS else None
    return None


@handler("LOAD_SUPER_ATTR")
def _load_super_attr(frame: Frame, inst: dis.Instruction) -> None:
    # 3.12 compiles super().name to LOAD_SUPER_ATTR over (super, class, self); the low bit of
    # the argument asks for a method load (https://docs.python.org/3.12/library/dis.html#opcode-LOAD_SUPER_ATTR).
    self_var = frame.pop()
    cls = frame.pop()
    frame.pop()
    value = super_attr(frame, cls, self_var, inst.argval)
    if inst.arg is not None and inst.arg & 1:
        frame.push_callable(value)
    else:
        frame.push(value)


@handler("LOAD_ATTR")
def _load_attr(frame: Frame, inst: dis.Instruction) -> None:
    obj = frame.pop()
    value = load_attr(frame, obj, inst.argval)
    # 3.12 folds LOAD_METHOD into LOAD_ATTR with the low bit set
    # (https://docs.python.org/3.12/library/dis.html#opcode-LOAD_ATTR).
    if _is_method_load(inst):
        frame.push_callable(value)
    else:
        frame.push(value)


def _is_method_load(inst: dis.Instruction) -> bool:
    return PY312 and inst.arg is not None and bool(inst.arg & 1)


@handler("LOAD_METHOD")
def _load_method(frame: Frame, inst: dis.Instruction) -> None:
    obj = frame.pop()
    frame.push_callable(load_attr(frame, obj, inst.argval))


@handler("STORE_ATTR")
def _store_attr(frame: Frame, inst: dis.Instruction) -> None:
    obj = frame.pop()
    value = frame.pop()
    store_attribute(frame, obj, inst.argval, value)


def store_attribute(frame: Frame, obj: Var, name: str, value: Var) -> None:
    """Trace ``obj.<name> = value`` (the STORE_ATTR instruction, and ``setattr`` with a constant name)."""
    if obj.kind == "userobj":
        store_attr(frame, obj, name, value)
        return
    if obj.kind not in ("module", "object") or obj.source is None:
        raise Unsupported(f"attribute assignment on a {obj.kind} is not supported")
    if obj.kind == "object":
        cls = type(obj.value)
        setter = class_attr(cls, "__setattr__")
        if isinstance(setter, types.FunctionType):
            # The class's own __setattr__ decides (a frozen dataclass's raises FrozenInstanceError,
            # which must surface before anything after it runs): traced, it ends in
            # object.__setattr__, a side effect, or in a graph break.
            source = obj.source.attr("__class__").attr("__setattr__")
            inline_function(frame, setter, source, [obj, const(name), value], {})
            return
        found = class_attr(cls, name)
        if setter is object.__setattr__ and isinstance(found, property):
            # A data descriptor of the class takes the store (https://docs.python.org/3/howto/descriptor.html):
            # its setter is traced, so later reads in the trace see what it stored.
            if not isinstance(found.fset, types.FunctionType):
                raise Unsupported(f"property {name!r} of a {cls.__name__} object has no Python setter")
            inline_function(frame, found.fset, None, [obj, value], {})
            return
        if setter is object.__setattr__ and found is not None and hasattr(type(found), "__set__") and not is_slot(cls, name):
            raise Unsupported(f"attribute {name!r} of a {cls.__name__} object is a {type(found).__name__} descriptor")
        if setter is object.__setattr__ and not has_instance_dict(cls) and not is_slot(cls, name):
            raise Unsupported(f"{cls.__name__} object has no attribute {name!r} (__slots__; AttributeError in eager)")
    if isinstance(obj.value, torch.nn.Module) and value.kind == "tensor" and name in obj.value._parameters:
        raise Unsupported("assigning to a parameter inside the traced region is not supported")
    frame.state.side_effects.store_attr(obj, name, value)


@handler("DELETE_ATTR")
def _delete_attr(frame: Frame, inst: dis.Instruction) -> None:
    delete_attribute(frame, frame.pop(), inst.argval)


def delete_attribute(frame: Frame, obj: Var, name: str) -> None:
    """Trace ``del obj.<name>`` (and ``delattr``) on an object made in the trace: its instance
    dict loses the entry. Elsewhere (objects from the frame) a graph break."""
    if obj.kind != "userobj" or obj.source is not None:
        raise Unsupported(f"deleting attribute {name!r} of a {obj.kind} from the frame is not supported")
    cls = obj.value
    deleter = class_attr(cls, "__delattr__")
    if isinstance(deleter, types.FunctionType):
        inline_function(frame, deleter, None, [obj, const(name)], {})
        return
    if deleter is not object.__delattr__:
        raise Unsupported(f"{cls.__name__}.__delattr__ is not supported")
    found = class_attr(cls, name)
    if found is not None and hasattr(type(found), "__delete__"):
        # A data descriptor (property, slot) takes the delete.
        raise Unsupported(f"deleting attribute {name!r} of a {cls.__name__} object through its {type(found).__name__}")
    if name not in obj.box.attrs:
        error = AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
        raise Raised(f"AttributeError deleting .{name} of a {cls.__name__} object", error)
    del obj.box.attrs[name]


def _object_delattr(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # object.__delattr__, reached through super() past a class's own __delattr__.
    if len(args) != 2 or kwargs or args[0].kind != "userobj" or args[0].source is not None:
        raise Unsupported("object.__delattr__ on a value not made in the trace")
    name = args[1].value if args[1].kind == "const" else None
    if not isinstance(name, str):
        raise Unsupported("object.__delattr__ with a non-constant name")
    cls = args[0].value
    if name not in args[0].box.attrs or hasattr(type(class_attr(cls, name)), "__delete__"):
        raise Unsupported(f"object.__delattr__ of {name!r} on a {cls.__name__} object")
    del args[0].box.attrs[name]
    return const(None)


def _delattr(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 2 or kwargs:
        raise Unsupported("delattr() takes exactly two positional arguments (TypeError in eager)")
    name = args[1].value if args[1].kind == "const" else None
    if not isinstance(name, str):
        raise Unsupported("delattr() with a non-constant or non-string name")
    delete_attribute(frame, args[0], name)
    return const(None)


BUILTINS[id(delattr)] = _delattr
BUILTINS[id(object.__delattr__)] = _object_delattr
