"""Class statements in traced code: the body is traced, the class is created at trace time.

``class C(Base): ...`` compiles to ``__build_class__(body, "C", Base)``. The body is traced like an
inlined call whose locals are the class namespace (``LOAD_NAME``/``STORE_NAME``), so what it reads
is guarded and what it does is recorded. The class is then created by its metaclass from the
namespace made real ("realized"): functions made in the trace become real functions over real
cells. The trace keeps the link (``CaptureState.closure_of``), so calling one of those functions
later traces the original closure, with its traced cells and defaults (and their sources, hence
guards), never the trace-time snapshot held by the real cells.

The class exists only while tracing: a compiled frame does not create it. So it must not leave the
graph (``made_in_trace`` lets the runner refuse it, and instances of it, as values to rebuild), and
only class creation without effects is done: effects of metaclasses, ``__init_subclass__`` and
``__set_name__`` would run once at trace time where eager runs them on every call.
"""

from __future__ import annotations

import abc
import builtins
import dis
import inspect
import types
import weakref
from typing import Any

import torch

from ptc_capture.interpreter.calls import BUILTINS, MadeFunction
from ptc_capture.interpreter.loop import handler, run_frame
from ptc_capture.interpreter.stack import load_cell, load_global
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.interpreter.values import as_const
from ptc_capture.symbolic_sizes import concrete
from ptc_capture.variables import DictBox, Var

__all__ = ["made_in_trace", "realize"]

# Metaclasses whose class creation only builds the class: type's, the abstract-method bookkeeping
# of ABCMeta, and autograd.Function's (it also makes the matching backward class).
_METACLASSES: tuple[type, ...] = (type, abc.ABCMeta, type(torch.autograd.Function))

# Descriptor types whose __set_name__ (property's, from 3.10 on) only records the attribute name.
_PLAIN_DESCRIPTORS = (property, staticmethod, classmethod)

# Classes and functions made by traces. Weak, so it forgets them with the capture that made them;
# module level because the runner, which must refuse them, sees no CaptureState.
_MADE: weakref.WeakSet[Any] = weakref.WeakSet()


def made_in_trace(value: Any) -> bool:
    """True for a class (or a function of one) created while tracing: it has no run-time counterpart."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        return any(made_in_trace(f) for f in (value.fget, value.fset, value.fdel) if f is not None)
    try:
        return value in _MADE
    except TypeError:  # unhashable values are never made here
        return False


def _namespace_of(frame: Frame) -> dict[str, Var]:
    if frame.code.co_flags & inspect.CO_OPTIMIZED:
        raise Unsupported(f"name instructions in the function {frame.code.co_name} (only class bodies use them)")
    return frame.locals


@handler("STORE_NAME")
def _store_name(frame: Frame, inst: dis.Instruction) -> None:
    _namespace_of(frame)[inst.argval] = frame.pop()


@handler("DELETE_NAME")
def _delete_name(frame: Frame, inst: dis.Instruction) -> None:
    if _namespace_of(frame).pop(inst.argval, None) is None:
        raise Unsupported(f"name {inst.argval!r} is not defined (NameError in eager)")


@handler("LOAD_NAME")
def _load_name(frame: Frame, inst: dis.Instruction) -> None:
    found = frame.locals.get(inst.argval)
    frame.push(found if found is not None else load_global(frame, inst.argval))


@handler("LOAD_CLASSDEREF")
def _load_classderef(frame: Frame, inst: dis.Instruction) -> None:
    # 3.11: a free variable read in a class body looks in the namespace first.
    found = frame.locals.get(inst.argval)
    frame.push(found if found is not None else load_cell(frame, inst.argval))


@handler("SETUP_ANNOTATIONS")
def _setup_annotations(frame: Frame, inst: dis.Instruction) -> None:
    namespace = _namespace_of(frame)
    if "__annotations__" not in namespace:
        namespace["__annotations__"] = Var("dict", box=DictBox({}))


@handler("LOAD_LOCALS")
def _load_locals(frame: Frame, inst: dis.Instruction) -> None:
    # 3.12 pushes the namespace before LOAD_FROM_DICT_OR_*; the Var shares its table.
    frame.push(Var("dict", box=DictBox(_namespace_of(frame))))


def _from_mapping(frame: Frame, name: str) -> Var | None:
    mapping = frame.pop()
    if mapping.kind != "dict":
        raise Unsupported(f"a name lookup in a {mapping.kind}")
    found: Var | None = mapping.box.items.get(name)
    return found


@handler("LOAD_FROM_DICT_OR_DEREF")
def _load_from_dict_or_deref(frame: Frame, inst: dis.Instruction) -> None:
    found = _from_mapping(frame, inst.argval)
    frame.push(found if found is not None else load_cell(frame, inst.argval))


@handler("LOAD_FROM_DICT_OR_GLOBALS")
def _load_from_dict_or_globals(frame: Frame, inst: dis.Instruction) -> None:
    found = _from_mapping(frame, inst.argval)
    frame.push(found if found is not None else load_global(frame, inst.argval))


@handler("LOAD_BUILD_CLASS")
def _load_build_class(frame: Frame, inst: dis.Instruction) -> None:
    build = frame.state.f_builtins.get("__build_class__")
    if build is not builtins.__build_class__:
        raise Unsupported("builtins.__build_class__ is replaced")
    frame.push(Var("callable", build))


def _build_class(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``__build_class__(body, name, *bases, **keywords)``: the steps of eager's class creation, in its order."""
    if len(args) < 2 or args[0].kind != "closure":
        raise Unsupported("__build_class__ without a class body made in the trace")
    name = as_const(args[1], "a class name")
    bases = tuple(realize(frame, b) for b in args[2:])
    keywords = {k: realize(frame, v) for k, v in kwargs.items()}
    try:
        resolved = types.resolve_bases(bases)
    except Exception as exc:
        raise Unsupported(f"the bases of class {name} raised {type(exc).__name__} (as in eager)") from exc
    meta = _metaclass(name, resolved, keywords.pop("metaclass", None))
    if keywords:
        raise Unsupported(f"class {name} passes keywords {sorted(keywords)} to __init_subclass__")
    for base in resolved:
        hooked = next((k for k in base.__mro__[:-1] if "__init_subclass__" in vars(k)), None)
        if hooked is not None:
            raise Unsupported(
                f"class {name}: {hooked.__qualname__}.__init_subclass__ would run once at trace time, not per call"
            )
    namespace = _run_body(frame, args[0].value)
    real_namespace: dict[str, Any] = {}
    for key, var in namespace.items():
        value = realize(frame, var)
        if type(value) not in _PLAIN_DESCRIPTORS and getattr(type(value), "__set_name__", None) is not None:
            raise Unsupported(f"class {name}: {key} has __set_name__, which would run once at trace time, not per call")
        real_namespace[key] = value
    if resolved != bases:
        real_namespace["__orig_bases__"] = bases
    try:
        cls = meta(name, resolved, real_namespace)
    except Exception as exc:
        raise Unsupported(f"creating class {name} raised {type(exc).__name__} (as in eager)") from exc
    _MADE.add(cls)
    frame.state.keepalive.append(cls)
    var = Var("callable", cls)
    cell = namespace.get("__classcell__")
    if cell is not None and cell.kind == "cell":
        # Zero-argument super() in a method reads the class from this cell.
        cell.box.contents = var
    return var


BUILTINS[id(builtins.__build_class__)] = _build_class


def _metaclass(name: str, bases: tuple[Any, ...], explicit: Any) -> type:
    """The most derived metaclass (the data model's rule); a graph break unless its class creation has no effects."""
    meta = explicit if explicit is not None else (type(bases[0]) if bases else type)
    if isinstance(meta, type):
        for base in bases:
            other = type(base)
            if issubclass(meta, other):
                continue
            if issubclass(other, meta):
                meta = other
                continue
            raise Unsupported(f"class {name} has conflicting metaclasses (TypeError in eager)")
    if meta not in _METACLASSES:
        shown = getattr(meta, "__qualname__", repr(meta))
        raise Unsupported(f"class {name} has metaclass {shown}, which could have effects at class creation")
    return meta


def _run_body(frame: Frame, made: MadeFunction) -> dict[str, Var]:
    """Trace the class body as a call from ``frame``; return the namespace it fills."""
    state = frame.state
    if frame.depth + 1 > state.config.inline_depth:
        raise Unsupported(f"inlining deeper than {state.config.inline_depth} calls")
    body = Frame(state, made.code, made.f_globals, made.globals_source, parent=frame, depth=frame.depth + 1)
    body.cells = dict(zip(made.code.co_freevars, made.cells))
    run_frame(body)
    return body.locals


def realize(frame: Frame, var: Var) -> Any:
    """The real value of ``var`` for code run at trace time (a class's namespace, its metaclass)."""
    kind = var.kind
    if kind in ("const", "function", "callable", "module", "object"):
        return var.value
    if kind == "sym":
        return concrete(var.value)  # a class namespace holds real values: the size is specialized
    if kind == "tuple":
        items = tuple(realize(frame, v) for v in var.items)
        if isinstance(var.value, type) and var.value is not tuple:
            return var.value._make(items) if hasattr(var.value, "_make") else var.value(items)
        return items
    if kind == "closure":
        return _realize_function(frame, var)
    if kind == "cell":
        return _realize_cell(frame, var.box)
    if kind in ("list", "dict"):
        # A fresh container, tied to the Var so a later read of it (a class attribute) sees
        # the traced contents, not this snapshot.
        real: Any
        if kind == "list":
            real = [realize(frame, v) for v in var.box.items]
        else:
            real = {k: realize(frame, v) for k, v in var.box.items.items()}
        return _remember(frame, var, real)
    raise Unsupported(f"a {kind} value cannot be part of a class created while tracing")


def _remember(frame: Frame, var: Var, real: Any) -> Any:
    state = frame.state
    state.boxes[id(real)] = var
    state.keepalive.append(real)
    return real


def _realize_cell(frame: Frame, box: Any) -> Any:
    state = frame.state
    found = state.realized.get(id(box))
    if found is not None:
        return found
    cell = types.CellType()
    state.realized[id(box)] = cell
    state.keepalive.extend((box, cell))
    if box.contents is not None:
        try:
            cell.cell_contents = realize(frame, box.contents)
        except Unsupported:
            # Left empty: the trace reads the CellBox, and the cell is never run natively
            # (the class does not leave the graph).
            pass
    return cell


def _realize_function(frame: Frame, var: Var) -> types.FunctionType:
    state = frame.state
    found = state.realized.get(id(var))
    if found is not None:
        return found  # type: ignore[no-any-return]
    made: MadeFunction = var.value
    cells = tuple(_realize_cell(frame, box) for box in made.cells)
    defaults = tuple(realize(frame, v) for v in made.defaults)
    fn = types.FunctionType(made.code, made.f_globals, made.code.co_name, defaults or None, cells or None)
    if made.kwdefaults:
        fn.__kwdefaults__ = {k: realize(frame, v) for k, v in made.kwdefaults.items()}
    state.realized[id(var)] = fn
    state.closure_of[id(fn)] = var
    state.keepalive.extend((var, fn))
    _MADE.add(fn)
    return fn


def _descriptor(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # staticmethod/classmethod/property wrapping functions of a class body: made at trace time
    # around the realized functions (they only wrap; calling through them traces the closure).
    values = [realize(frame, a) for a in args]
    options = {k: realize(frame, v) for k, v in kwargs.items()}
    try:
        made = fn.value(*values, **options)
    except Exception as exc:
        raise Unsupported(f"{fn.value.__name__}() raised {type(exc).__name__} at trace time") from exc
    frame.state.keepalive.append(made)
    return Var("object", made)


for _wrapper in (staticmethod, classmethod, property):
    BUILTINS[id(_wrapper)] = _descriptor


def unwrap_descriptor(frame: Frame, owner: Var, attr: Any) -> Var | None:
    """The Var of a staticmethod's function or of a classmethod bound to ``owner`` (a class Var); None for other values."""
    if isinstance(attr, staticmethod):
        return frame.state.wrap(attr.__func__, None)
    if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
        return Var("method", attr.__func__, items=(owner,))
    return None
