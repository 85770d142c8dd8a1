"""Call instructions and what calling each kind of Var does: inline, record a torch op, or fold."""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import math
import operator
import sys
import types
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ptc_capture.autocast_state import AutocastExit
from ptc_capture.guards import Source
from ptc_capture.interpreter.constant_tensors import constant_tensor
from ptc_capture.interpreter.dispatcher_ops import binding_op, custom_op_overload, dispatcher_call, is_dispatcher_op
from ptc_capture.interpreter.loop import handler, run_frame
from ptc_capture.interpreter.ops import has_sym
from ptc_capture.interpreter.state import Frame, Raised, Unsupported, call_operands, iarg, pop_call_ex_operands
from ptc_capture.interpreter.values import (
    STORAGE_MUTATORS,
    as_const,
    from_python,
    graph_call,
    has_tensor,
    sequence_items,
)
from ptc_capture.variables import (
    NULL,
    CellBox,
    DictBox,
    IterBox,
    Var,
    const,
    python_value,
)
from ptc_spec import is_allowed_target

Caller = Callable[[Frame, Var, list[Var], dict[str, Var]], Var]
CALLERS: dict[str, Caller] = {}
"""Var kind -> what calling a Var of that kind does."""

BUILTINS: dict[int, Caller] = {}
"""id(builtin or function) -> its trace-time implementation (filled by interpreter.builtins)."""

ALLOW_IN_GRAPH: dict[int, Any] = {}
"""id(function) -> function, recorded as one graph node instead of being inlined."""

DISABLED_ATTR = "__ptc_disabled__"



def caller(*kinds: str) -> Callable[[Caller], Caller]:
    """Register the decorated function as what calling a Var of ``kinds`` does."""

    def register(fn: Caller) -> Caller:
        for kind in kinds:
            CALLERS[kind] = fn
        return fn

    return register


def call(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``fn(*args, **kwargs)``."""
    found = CALLERS.get(fn.kind)
    if found is None:
        raise Unsupported(f"calling a {fn.kind} is not supported")
    return found(frame, fn, args, kwargs)


def _split_call(frame: Frame, nargs: int) -> tuple[Var, list[Var], dict[str, Var]]:
    values = frame.popn(nargs)
    first, second = frame.popn(2)
    kw_names = frame.kw_names
    frame.kw_names = ()
    fn, args = call_operands(first, second, values, NULL)
    kwargs: dict[str, Var] = {}
    if kw_names:
        positional = len(args) - len(kw_names)
        kwargs = dict(zip(kw_names, args[positional:]))
        args = args[:positional]
    return fn, args, kwargs


@handler("KW_NAMES")
def _kw_names(frame: Frame, inst: dis.Instruction) -> None:
    # dis does not resolve KW_NAMES' argument in 3.11; it indexes co_consts.
    frame.kw_names = tuple(frame.code.co_consts[iarg(inst)])


@handler("PRECALL")
def _precall(frame: Frame, inst: dis.Instruction) -> None:
    return None


@handler("CALL")
def _call(frame: Frame, inst: dis.Instruction) -> None:
    fn, args, kwargs = _split_call(frame, iarg(inst))
    frame.push(call(frame, fn, args, kwargs))


@handler("CALL_KW")
def _call_kw(frame: Frame, inst: dis.Instruction) -> None:
    # 3.13 replaces KW_NAMES + CALL: the keyword names are a tuple on top of the arguments
    # (https://docs.python.org/3.13/library/dis.html#opcode-CALL_KW).
    frame.kw_names = tuple(as_const(frame.pop(), "keyword names"))
    _call(frame, inst)


@handler("CALL_FUNCTION_EX")
def _call_function_ex(frame: Frame, inst: dis.Instruction) -> None:
    fn, args_var, kwargs_var = pop_call_ex_operands(frame.stack, iarg(inst), NULL)
    args = sequence_items(frame, args_var)
    kwargs: dict[str, Var] = {}
    if kwargs_var is not None:
        if kwargs_var.kind != "dict":
            raise Unsupported("**kwargs from a non-dict")
        kwargs = dict(kwargs_var.box.items)
    frame.push(call(frame, fn, args, kwargs))


@dataclass(frozen=True, slots=True)
class MadeFunction:
    """A function created by MAKE_FUNCTION while tracing."""

    code: types.CodeType
    defaults: tuple[Var, ...]
    kwdefaults: dict[str, Var]
    cells: tuple[CellBox, ...]
    f_globals: dict[str, Any]
    globals_source: Source | None


@handler("MAKE_FUNCTION")
def _make_function(frame: Frame, inst: dis.Instruction) -> None:
    code_var = frame.pop()
    if code_var.kind != "const" or not isinstance(code_var.value, types.CodeType):
        frame.pop()  # 3.10-style qualname; 3.11+ has only the code
        raise Unsupported("MAKE_FUNCTION without a code object")
    flags = iarg(inst) or 0
    cells: tuple[CellBox, ...] = ()
    if flags & 0x08:
        cells = tuple(v.box for v in frame.pop().items)
    if flags & 0x04:
        frame.pop()
    kwdefaults: dict[str, Var] = {}
    if flags & 0x02:
        kwdefaults = {str(k): v for k, v in frame.pop().box.items.items()}
    defaults: tuple[Var, ...] = ()
    if flags & 0x01:
        defaults = tuple(frame.pop().items)
    made = MadeFunction(code_var.value, defaults, kwdefaults, cells, frame.f_globals, frame.globals_source)
    frame.push(Var("closure", made))


@handler("SET_FUNCTION_ATTRIBUTE")
def _set_function_attribute(frame: Frame, inst: dis.Instruction) -> None:
    # 3.13's MAKE_FUNCTION takes only the code; each attribute MAKE_FUNCTION's flags named
    # before is set on the new function by one of these, same flag values
    # (https://docs.python.org/3.13/library/dis.html#opcode-SET_FUNCTION_ATTRIBUTE).
    fn = frame.pop()
    value = frame.pop()
    made = fn.value
    flag = iarg(inst)
    if flag == 0x08:
        made = dataclasses.replace(made, cells=tuple(v.box for v in value.items))
    elif flag == 0x02:
        made = dataclasses.replace(made, kwdefaults={str(k): v for k, v in value.box.items.items()})
    elif flag == 0x01:
        made = dataclasses.replace(made, defaults=tuple(value.items))
    elif flag != 0x04:  # annotations are not kept, as with MAKE_FUNCTION
        raise Unsupported(f"SET_FUNCTION_ATTRIBUTE {flag:#x}")
    frame.push(Var("closure", made))


class _WrappedOnUse(Mapping[Any, Var]):
    """A function's defaults by position (or name), each wrapped the first time it is read."""

    def __init__(self, values: dict[Any, Any], wrap: Callable[[Any, Any], Var]) -> None:
        self._values = values
        self._wrap = wrap
        self._wrapped: dict[Any, Var] = {}

    def __getitem__(self, key: Any) -> Var:
        found = self._wrapped.get(key)
        if found is None:
            found = self._wrapped[key] = self._wrap(key, self._values[key])
        return found

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def bind_arguments(
    code: types.CodeType, args: list[Var], kwargs: dict[str, Var], defaults: Sequence[Var] | Mapping[int, Var], kwdefaults: Mapping[str, Var]
) -> dict[str, Var]:
    """Bind call arguments to the parameter names of ``code`` (a graph break where eager raises TypeError)."""
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    bound: dict[str, Var] = dict(zip(names[:npos], args))
    extra = args[npos:]
    if extra and not has_varargs:
        raise Unsupported(f"{code.co_name}() got too many positional arguments (TypeError in eager)")
    keyword_ok = set(names[code.co_posonlyargcount : npos + nkw])
    extra_kw: dict[str, Var] = {}
    for key, value in kwargs.items():
        if key in keyword_ok:
            if key in bound:
                raise Unsupported(f"{code.co_name}() got multiple values for {key!r} (TypeError in eager)")
            bound[key] = value
        elif has_varkw:
            extra_kw[key] = value
        else:
            raise Unsupported(f"{code.co_name}() got an unexpected keyword {key!r} (TypeError in eager)")
    first_default = npos - len(defaults)
    for i, name in enumerate(names[:npos]):
        if name not in bound and i >= first_default:
            bound[name] = defaults[i - first_default]
    for name in names[npos : npos + nkw]:
        if name not in bound and name in kwdefaults:
            bound[name] = kwdefaults[name]
    missing = [n for n in names[: npos + nkw] if n not in bound]
    if missing:
        raise Unsupported(f"{code.co_name}() is missing arguments {missing} (TypeError in eager)")
    index = npos + nkw
    if has_varargs:
        bound[names[index]] = Var("tuple", tuple, items=tuple(extra))
        index += 1
    if has_varkw:
        bound[names[index]] = Var("dict", box=DictBox(extra_kw))
    return bound


def inline(
    frame: Frame,
    code: types.CodeType,
    bound: dict[str, Var],
    f_globals: dict[str, Any],
    globals_source: Source | None,
    free: dict[str, tuple[Any, Source | None]],
    cells: dict[str, CellBox],
) -> Var:
    """Interpret ``code`` as a call made from ``frame`` and return its result."""
    if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise Unsupported(f"calling the coroutine function {code.co_name} is not supported")
    if frame.depth + 1 > frame.state.config.inline_depth:
        raise Unsupported(f"inlining deeper than {frame.state.config.inline_depth} calls")
    child = Frame(frame.state, code, f_globals, globals_source, parent=frame, depth=frame.depth + 1)
    child.locals = dict(bound)
    child.free_sources = free
    child.cells = dict(cells)
    if code.co_flags & inspect.CO_GENERATOR:
        # A generator consumed in the frame is run to completion at the call: its yields
        # become the items of an iterator (same values as eager for generators without
        # side effects interleaved with their consumer).
        child.yielded = []
        run_frame(child)
        return Var("iter", box=IterBox(child.yielded))
    return run_frame(child)


def inline_function(frame: Frame, fn: types.FunctionType, source: Source | None, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Inline a real Python function (its defaults and closure are read through ``source``)."""
    state = frame.state
    traced = state.closure_of.get(id(fn))
    if traced is not None:
        # Made from a closure of the trace for a class created in it (interpreter/classes.py):
        # its real cells are a snapshot, the closure has the traced ones.
        return _call_closure(frame, traced, args, kwargs)
    # Defaults are wrapped (and so guarded) only when the call leaves their parameter unset:
    # one the caller passes is never read, and a guard on it would only cost every call.
    defaults = _WrappedOnUse(
        dict(enumerate(fn.__defaults__ or ())), lambda i, v: state.wrap(v, source.attr("__defaults__").item(i) if source else None)
    )
    kwdefaults = _WrappedOnUse(
        dict(fn.__kwdefaults__ or {}), lambda k, v: state.wrap(v, source.attr("__kwdefaults__").item(k) if source else None)
    )
    bound = bind_arguments(fn.__code__, args, kwargs, defaults, kwdefaults)
    free: dict[str, tuple[Any, Source | None]] = {}
    for i, name in enumerate(fn.__code__.co_freevars):
        cell = (fn.__closure__ or ())[i]
        try:
            contents = cell.cell_contents
        except ValueError:
            continue
        free[name] = (contents, source.attr("__closure__").item(i).attr("cell_contents") if source else None)
    if fn.__globals__ is state.f_globals:
        globals_source = None
    else:
        globals_source = source.attr("__globals__") if source else None
    return inline(frame, fn.__code__, bound, fn.__globals__, globals_source, free, {})


def is_graph_target(fn: Any) -> bool:
    """True when ``fn`` may be the target of a call_function node of the torch dialect."""
    return bool(is_allowed_target(fn))


# Torch functions without tensor inputs or outputs that are safe to evaluate at trace time.
_PURE_TORCH = {
    id(f)
    for f in (torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.is_grad_enabled, torch.get_default_dtype,
              torch.numel, torch.result_type, torch.promote_types, torch.can_cast,
              torch.finfo, torch.iinfo)
}  # fmt: skip


# math functions whose C implementation would specialize a SymInt (math.sqrt reads it as a
# double), and torch's symbolic counterparts that keep it a size expression.
_SYMBOLIC_MATH: dict[Any, Any] = {math.sqrt: torch.sym_sqrt}

_FACTORIES: dict[int, bool] = {}


def _is_factory(fn: Any) -> bool:
    """Whether a torch function called without tensors makes one: its aten schemas take a device.

    Functions of sizes and scalars (torch.broadcast_shapes) are not factories and fold at trace
    time; a Python function is never one (factories are C bindings); an unknown binding is
    taken for one, whose meta run then says whether it is.
    """
    found = _FACTORIES.get(id(fn))
    if found is None:
        if isinstance(fn, types.FunctionType):
            found = False
        else:
            schemas = torch._C._jit_get_schemas_for_operator(f"aten::{getattr(fn, '__name__', '')}")
            found = not schemas or any(arg.name == "device" for schema in schemas for arg in schema.arguments)
        _FACTORIES[id(fn)] = found
    return found


def torch_call(frame: Frame, fn: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Record a call of a torch function (or fold it when it is pure and sees no tensor)."""
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] in ("math", "operator", "_operator") and not has_tensor(args) and not has_tensor(kwargs):
        if not kwargs and any(has_sym(a) for a in args):
            # math.floor(n / 2), operator.mul(n, 2), math.prod(x.shape): SymInts compute
            # symbolically where they can (others, math.sqrt(n) say, specialize by themselves).
            try:
                return from_python(_SYMBOLIC_MATH.get(fn, fn)(*[python_value(a) for a in args]))
            except Exception:
                pass
        values = [as_const(a, getattr(fn, "__name__", "call")) for a in args]
        kw = {k: as_const(v, "a keyword") for k, v in kwargs.items()}
        try:
            return from_python(fn(*values, **kw))
        except Exception as exc:
            raise Unsupported(f"{fn.__name__} raised {type(exc).__name__} at trace time") from exc
    if not has_tensor(args) and not has_tensor(kwargs):
        if id(fn) in _PURE_TORCH or not _is_factory(fn):
            try:
                value = fn(*[as_const(a, "an argument") for a in args], **{k: as_const(v, "an argument") for k, v in kwargs.items()})
            except Exception as exc:
                raise Unsupported(f"{fn.__name__} raised {type(exc).__name__} at trace time") from exc
            if isinstance(value, torch.Tensor):
                return constant_tensor(frame, fn, args, kwargs, value)
            return from_python(value)
        # A call without tensor inputs must be a tensor factory; it runs on the meta device so
        # tracing neither allocates nor advances the random generator.
        return graph_call(frame, "call_function", fn, tuple(args), kwargs, factory=True)
    return graph_call(frame, "call_function", fn, tuple(args), kwargs)


def _call_python_object(frame: Frame, fn: Var, value: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if getattr(value, DISABLED_ATTR, False):
        raise Unsupported(f"{getattr(value, '__qualname__', value)} is marked ptc_capture.disable")
    builtin = BUILTINS.get(id(value)) or _class_method_rule(value)
    if builtin is not None:
        return builtin(frame, fn, args, kwargs)
    if id(value) in ALLOW_IN_GRAPH:
        return graph_call(frame, "call_function", value, tuple(args), kwargs)
    if is_dispatcher_op(value):
        return dispatcher_call(frame, value, args, kwargs)
    overload = custom_op_overload(value)
    if overload is not None:
        return dispatcher_call(frame, overload, args, kwargs)
    method = tensor_method_name(value)
    if method is not None and args and args[0].kind == "tensor":
        # torch.Tensor.add_(x, y) is x.add_(y): the same rules (in-place results, effects).
        return _call_tensor_method(frame, Var("tensor_method", method, items=(args[0],)), args[1:], kwargs)
    if is_graph_target(value):
        if isinstance(value, types.FunctionType) and not all(_graph_argument(v) for v in [*args, *kwargs.values()]):
            # A node cannot take a module, function or object (F.triplet_margin_with_distance_loss's
            # distance_function), but a torch function written in Python can be traced through.
            return inline_function(frame, value, fn.source, args, kwargs)
        return torch_call(frame, value, args, kwargs)
    from ptc_capture.interpreter.constant_calls import constant_call, is_constant_call

    if is_constant_call(value):
        return constant_call(frame, fn, args, kwargs)
    if isinstance(value, types.MethodType) and is_constant_call(value.__func__):
        # A cached function bound as a method (transformers' Logger.warning_once).
        self_var = frame.state.wrap(value.__self__, fn.source.attr("__self__") if fn.source else None)
        func_var = frame.state.wrap(value.__func__, fn.source.attr("__func__") if fn.source else None)
        return constant_call(frame, func_var, [self_var, *args], kwargs)
    if isinstance(value, types.FunctionType):
        return inline_function(frame, value, fn.source, args, kwargs)
    if isinstance(value, torch.nn.Module):
        return call_module(frame, fn, args, kwargs)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        from ptc_capture.interpreter.autograd_function import apply_function, is_apply_of

        owner = value.__self__
        if is_apply_of(value.__func__, owner) and isinstance(owner, type):
            class_var = frame.state.wrap(owner, fn.source.attr("__self__") if fn.source else None)
            return apply_function(frame, class_var, owner, args, kwargs)
        self_var = frame.state.wrap(value.__self__, fn.source.attr("__self__") if fn.source else None)
        func_source = fn.source.attr("__func__") if fn.source else None
        return inline_function(frame, value.__func__, func_source, [self_var, *args], kwargs)
    if isinstance(value, types.BuiltinMethodType):
        from ptc_capture.interpreter.autograd_function import apply_function, c_apply_owner

        apply_owner = c_apply_owner(value)
        if apply_owner is not None:
            class_var = frame.state.wrap(apply_owner, fn.source.attr("__self__") if fn.source else None)
            return apply_function(frame, class_var, apply_owner, args, kwargs)
    if type(value) is weakref.ReferenceType and not args and not kwargs and fn.source is not None:
        # A weak reference from the frame (nn.RNNBase's refs to its flat weights): its referent,
        # read and guarded through the call, as eager's call returns it (None once it is gone).
        return frame.state.wrap(value(), Source("called", None, fn.source))
    if isinstance(value, torch.jit.ScriptFunction):
        original = getattr(value, "_torchdynamo_inline", None)
        if isinstance(original, types.FunctionType):
            # torch.jit.script keeps the Python function it compiled (for compilers to inline):
            # eager runs TorchScript's build of that same code, so tracing it gives eager's values.
            source = fn.source.attr("_torchdynamo_inline") if fn.source else None
            return inline_function(frame, original, source, args, kwargs)
    name = getattr(value, "__qualname__", None) or type(value).__name__
    if isinstance(value, type) and issubclass(value, tuple):
        from ptc_capture.interpreter.container_slots import construct_tuple

        return construct_tuple(frame, fn, args, kwargs)
    if isinstance(value, type):
        from ptc_capture.interpreter.objects import construct, constructible

        if constructible(value):
            return construct(frame, value, args, kwargs)
    if isinstance(value, type) and issubclass(value, torch.nn.Module):
        return _module_made_in_trace(frame, value, args, kwargs)
    if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == "builtins":
        # A builtin exception built to be raised (`raise AttributeError(name)`): plain data.
        values = [as_const(a, "an exception argument") for a in args]
        return const(value(*values, **{k: as_const(v, "an exception argument") for k, v in kwargs.items()}))
    if isinstance(value, type):
        raise Unsupported(f"constructing {name} objects is not supported yet")
    if type(value) in (operator.itemgetter, operator.attrgetter) and len(args) == 1 and not kwargs:
        return _apply_getter(frame, value, args[0])
    if type(value) is functools.partial and (fn.source is not None or fn.kind == "const"):
        # partial(f, *a, **k)(*args, **kwargs) is f(*a, *args, **{**k, **kwargs}); the parts of
        # one from the frame are read (and guarded) through the object's attributes, those of
        # one made in the trace are its constants.
        source = fn.source
        inner = frame.state.wrap(value.func, source.attr("func") if source else None)
        front = [frame.state.wrap(a, source.attr("args").item(i) if source else None) for i, a in enumerate(value.args)]
        fixed = {k: frame.state.wrap(v, source.attr("keywords").item(k) if source else None) for k, v in value.keywords.items()}
        return call(frame, inner, [*front, *args], {**fixed, **kwargs})
    call_impl = next((k.__dict__["__call__"] for k in type(value).__mro__ if "__call__" in k.__dict__), None)
    if isinstance(call_impl, types.FunctionType) and fn.source is not None:
        return inline_function(frame, call_impl, None, [fn, *args], kwargs)
    packet = binding_op(value)
    if packet is not None:
        return dispatcher_call(frame, packet, args, kwargs)
    if _is_numpy_ufunc(value) and not kwargs:
        return _numpy_scalar_math(value, args)
    bound = _bound_builtin_rule(value)
    if bound is not None and fn.source is not None:
        # MAPPING.get(key) of a dict (list, set) read from the frame: the unbound method's rule,
        # with the container traced (and guarded) through the method's __self__.
        self_var = frame.state.wrap(value.__self__, fn.source.attr("__self__"))
        return bound(frame, const(getattr(type(value.__self__), value.__name__)), [self_var, *args], kwargs)
    raise Unsupported(f"call to {getattr(value, '__module__', '?')}.{name} is not supported (unknown C function)")


def _is_numpy_ufunc(value: Any) -> bool:
    # Checked by type name so that tracing never imports numpy itself.
    ty = type(value)
    return ty.__name__ == "ufunc" and ty.__module__ == "numpy"


_SCALARS = (int, float, complex)


def _numpy_scalar_math(ufunc: Any, args: list[Var]) -> Var:
    """``numpy.sqrt(head_dim)`` and friends on Python numbers: a numpy scalar, computed now as eager would."""
    values = [as_const(a, f"an argument of numpy.{ufunc.__name__}") for a in args]
    numpy = sys.modules["numpy"]
    if not all(isinstance(v, (_SCALARS, numpy.generic)) for v in values):
        raise Unsupported(f"numpy.{ufunc.__name__} on values other than Python or numpy numbers")
    try:
        result = ufunc(*values)
    except Exception as exc:
        raise Raised(f"numpy.{ufunc.__name__} raised {type(exc).__name__} at trace time", exc) from exc
    if type(result) is not numpy.float64:
        raise Unsupported(f"numpy.{ufunc.__name__} made a {type(result).__name__}, which the graph cannot hold")
    # A float64 scalar computes as a Python float does (both IEEE doubles), and a graph holds
    # only Python numbers: the value is kept as a float.
    return const(result.item())


def _module_made_in_trace(frame: Frame, cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """An nn.Module constructed in the traced code (transformers' ``ACT2FN["relu"]`` makes an
    ``nn.ReLU()`` on every call): one of torch's own modules that holds no tensors is made now,
    at trace time, from Python values, as eager makes it; its forward then reads only those."""
    if not (cls.__module__ or "").startswith("torch.nn."):
        raise Unsupported(f"constructing a {cls.__name__} module inside the traced region is not supported")
    values = [as_const(a, f"an argument of {cls.__name__}()") for a in args]
    options = {k: as_const(v, f"an argument of {cls.__name__}()") for k, v in kwargs.items()}
    try:
        module = cls(*values, **options)
    except Exception as exc:
        raise Unsupported(f"{cls.__name__}() raised {type(exc).__name__} at trace time") from exc
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        # Its tensors would be new on every eager call (and initialized from the random generator).
        raise Unsupported(f"an nn.{cls.__name__} with parameters or buffers is constructed inside the traced region")
    frame.state.keepalive.append(module)
    return Var("module", module)


def _apply_getter(frame: Frame, getter: Any, obj: Var) -> Var:
    """``operator.itemgetter(*keys)(obj)`` / ``attrgetter(*names)(obj)``, key by key."""
    from ptc_capture.interpreter.attrs import load_attr
    from ptc_capture.interpreter.ops import getitem

    keys = getter.__reduce__()[1]
    if type(getter) is operator.itemgetter:
        found = [getitem(frame, obj, const(k)) for k in keys]
    else:
        found = []
        for dotted in keys:
            value = obj
            for name in dotted.split("."):
                value = load_attr(frame, value, name)
            found.append(value)
    return found[0] if len(found) == 1 else Var("tuple", tuple, items=tuple(found))


def _class_method_rule(value: Any) -> Caller | None:
    """The rule of a C classmethod read from its class (bound anew on every read, so its rule
    is registered under the descriptor in the class's dict: ``itertools.chain.from_iterable``)."""
    owner = getattr(value, "__self__", None)
    if not isinstance(value, types.BuiltinMethodType) or not isinstance(owner, type):
        return None
    descriptor = vars(owner).get(value.__name__)
    return None if descriptor is None else BUILTINS.get(id(descriptor))


def _bound_builtin_rule(value: Any) -> Caller | None:
    """The rule of a C method bound to a plain container (``{...}.get``), if there is one."""
    owner = getattr(value, "__self__", None)
    if not isinstance(value, types.BuiltinMethodType) or type(owner) not in (dict, list, set, tuple):
        return None
    return BUILTINS.get(id(getattr(type(owner), value.__name__, None)))


def _graph_argument(var: Var) -> bool:
    """Whether ``var`` can be an argument of a graph node (tensors, constants, and tuples and lists of them)."""
    if var.kind == "tuple":
        return all(_graph_argument(v) for v in var.items)
    if var.kind == "list":
        return all(_graph_argument(v) for v in var.box.items)
    # "deferred": a call run after the graph (ptc_capture.deferred), which graph_call handles;
    # "sym"/"slice": sizes, which the graph computes from its inputs.
    return var.kind in ("tensor", "const", "deferred", "sym", "slice")


def tensor_method_name(value: Any) -> str | None:
    """The name of ``value`` when it is a method of torch.Tensor read from the class (unbound), else None."""
    name = getattr(value, "__name__", None)
    if not isinstance(name, str):
        return None
    try:
        found = inspect.getattr_static(torch.Tensor, name)
    except AttributeError:
        return None
    # Static methods (Tensor._make_subclass) read through the class are not this; they are
    # stored wrapped, so the raw class attribute is not the value read.
    return name if found is value else None


@caller("function", "callable", "object")
def _call_value(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return _call_python_object(frame, fn, fn.value, args, kwargs)


@caller("userobj")
def _call_userobj(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    call_impl = next((k.__dict__["__call__"] for k in fn.value.__mro__ if "__call__" in k.__dict__), None)
    if not isinstance(call_impl, types.FunctionType):
        raise Unsupported(f"{fn.value.__name__} objects are not callable")
    return inline_function(frame, call_impl, None, [fn, *args], kwargs)


@caller("const")
def _call_const(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    value = fn.value
    if isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and isinstance(
        getattr(value, "__self__", None), (str, int, float, tuple, bytes, frozenset, set, range, torch.dtype, torch.device)
    ):
        values = [as_const(a, "an argument") for a in args]
        kw = {k: as_const(v, "an argument") for k, v in kwargs.items()}
        try:
            return from_python(value(*values, **kw))
        except Exception as exc:
            raise Unsupported(f"{value.__name__} raised {type(exc).__name__} at trace time") from exc
    return _call_python_object(frame, fn, value, args, kwargs)


@caller("method")
def _call_method(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    self_var = fn.items[0]
    func = fn.value
    builtin = BUILTINS.get(id(func))
    if builtin is not None:
        # A C slot bound through super() (see attrs.super_attr): its rule takes self first.
        return builtin(frame, const(func), [self_var, *args], kwargs)
    if getattr(func, DISABLED_ATTR, False):
        raise Unsupported(f"{func.__qualname__} is marked ptc_capture.disable")
    from ptc_capture.interpreter.autograd_function import apply_function, is_apply_of

    if is_apply_of(func, self_var.value):
        return apply_function(frame, self_var, self_var.value, args, kwargs)
    source = None
    if self_var.source is not None:
        source = self_var.source.attr(func.__name__).attr("__func__")
    return inline_function(frame, func, source if _same_func(self_var, func) else None, [self_var, *args], kwargs)


def _same_func(self_var: Var, func: Any) -> bool:
    bound = getattr(self_var.value, func.__name__, None)
    return getattr(bound, "__func__", None) is func


@caller("tensor_method")
def _call_tensor_method(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = fn.value
    if fn.items[0].source is not None and _changes_metadata(name):
        # The caller's tensor itself must change shape; a compiled graph returns new tensors
        # and cannot re-view its inputs, so the call runs as eager's, outside the graph.
        raise Unsupported(f"Tensor.{name}() changes the shape or strides of a tensor from outside the graph; it runs outside the graph")
    if not is_graph_target(getattr(torch.Tensor, name, None)):
        # A method graphs may not name (private ones): the aten op it binds, if there is one.
        packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
        if packet is not None:
            return dispatcher_call(frame, packet, [fn.items[0], *args], kwargs)
    result = graph_call(frame, "call_method", name, (fn.items[0], *args), kwargs)
    if result.kind == "const" and result.value is None:
        if not name.endswith("_"):
            raise Unsupported(f"Tensor.{name} has effects outside the graph")
        graph_call(frame, "call_method", name, (fn.items[0], *args), kwargs, mutates=True)
        return result
    if name.endswith("_") and result.kind == "tensor" and not name.startswith("__"):
        # In-place methods return self; keep identity so ``y = x.add_(1); y is x`` holds.
        return result
    return result


_METADATA_MUTATORS = STORAGE_MUTATORS | {"as_strided_"}


@functools.cache
def _changes_metadata(name: str) -> bool:
    """Whether ``Tensor.<name>`` changes its tensor's sizes or strides in place (``unsqueeze_``, ``t_``)."""
    if name in _METADATA_MUTATORS:
        return True
    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() and name.endswith("_") else None
    if packet is None:
        return False
    return any(torch.Tag.inplace_view in getattr(packet, overload).tags for overload in packet.overloads())


@caller("closure")
def _call_closure(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    made: MadeFunction = fn.value
    bound = bind_arguments(made.code, args, kwargs, made.defaults, made.kwdefaults)
    cells = dict(zip(made.code.co_freevars, made.cells))
    return inline(frame, made.code, bound, made.f_globals, made.globals_source, {}, cells)


@caller("partial")
def _call_partial(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # partial(f, *a, **k)(*args, **kwargs) is f(*a, *args, **{**k, **kwargs}).
    target, bound, keywords = fn.items
    return call(frame, target, [*bound.items, *args], {**keywords.box.items, **kwargs})


@caller("ctx_exit")
def _call_ctx_exit(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    from ptc_capture.interpreter.autocast import exit_region
    from ptc_capture.interpreter.control import set_grad_mode

    if isinstance(fn.value, AutocastExit):
        exit_region(frame, fn.value)
    else:
        set_grad_mode(frame, bool(fn.value))
    return const(None)


def call_module(frame: Frame, module_var: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``module(*args, **kwargs)``: forward pre-hooks, forward (inlined), forward hooks."""
    module = module_var.value
    from torch.nn.modules import module as module_impl

    unsupported = (
        module._backward_hooks, module._backward_pre_hooks, module._forward_hooks_with_kwargs,
        module._forward_pre_hooks_with_kwargs, module_impl._global_forward_hooks,
        module_impl._global_forward_pre_hooks, module_impl._global_backward_hooks,
    )  # fmt: skip
    if any(unsupported):
        raise Unsupported(f"backward, keyword or global hooks on {type(module).__name__} are not supported yet")
    if "forward" in vars(module):
        # _call_impl calls ``self.forward``: a callable stored on the instance (timm's FasterNet
        # binds ``self.forward = self.forward_split_cat`` in __init__) shadows the class's.
        return _call_instance_forward(frame, module_var, args, kwargs)
    forward = type(module).forward
    if not isinstance(forward, types.FunctionType):
        raise Unsupported(f"{type(module).__name__}.forward is not a Python function")
    # Hooks run in the order nn.Module._call_impl runs them (pre-hooks may replace the
    # arguments, hooks may replace the output); see torch.nn.Module.register_forward_hook.
    for hook in _hooks(frame, module_var, "_forward_pre_hooks"):
        replaced = call(frame, hook, [module_var, Var("tuple", tuple, items=tuple(args))], {})
        if not (replaced.kind == "const" and replaced.value is None):
            args = list(replaced.items) if replaced.kind == "tuple" else [replaced]
    # Read through the class so a decorated forward's closure (the wrapped function, read by
    # wrappers as ``func.__code__``) has a source to guard.
    source = module_var.source.attr("__class__").attr("forward") if module_var.source is not None else None
    out = inline_function(frame, forward, source, [module_var, *args], kwargs)
    for hook in _hooks(frame, module_var, "_forward_hooks"):
        replaced = call(frame, hook, [module_var, Var("tuple", tuple, items=tuple(args)), out], {})
        if not (replaced.kind == "const" and replaced.value is None):
            out = replaced
    return out


def _call_instance_forward(frame: Frame, module_var: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Call the ``forward`` stored in a module's instance dict (guarded through its source)."""
    module = module_var.value
    if module._forward_pre_hooks or module._forward_hooks:
        raise Unsupported(f"forward hooks on {type(module).__name__}, whose forward is an instance attribute")
    if module_var.source is None:
        raise Unsupported(f"{type(module).__name__}.forward is an instance attribute of a module made in the trace")
    forward = frame.state.wrap(vars(module)["forward"], module_var.source.attr("forward"))
    return call(frame, forward, args, kwargs)


def _hooks(frame: Frame, module_var: Var, table: str) -> list[Var]:
    hooks = getattr(module_var.value, table)
    if not hooks:
        return []
    source = module_var.source.attr(table) if module_var.source is not None else None
    if source is None:
        raise Unsupported("hooks on a module without a source")
    wrapped = frame.state.wrap(hooks, source)
    if wrapped.kind != "dict":
        raise Unsupported(f"{table} of an unexpected type")
    return list(wrapped.box.items.values())


@caller("module")
def _call_module(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return call_module(frame, fn, args, kwargs)


__all__ = ["ALLOW_IN_GRAPH", "BUILTINS", "CALLERS", "call", "caller", "inline_function", "is_graph_target", "torch_call"]
