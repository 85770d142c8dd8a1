"""Trace-time implementations of Python builtins and a few torch/ptc helpers (the BUILTINS table)."""

from __future__ import annotations

import builtins
import collections
import dataclasses
import functools
import inspect
import itertools
import operator
import types
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.autocast_state import AutocastRegion
from ptc_capture.interpreter.calls import BUILTINS, Caller
from ptc_capture.interpreter.containers import dict_items, sort_vars
from ptc_capture.interpreter.ops import binary, compare, contains, fold, getitem, unary
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.interpreter.values import as_const, from_python, get_iter, iter_next, sequence_items, truth
from ptc_capture.interpreter.views import keys_view, view_iter, view_storage
from ptc_capture.symbolic_sizes import pytype_of
from ptc_capture.variables import DictBox, IterBox, ListBox, Var, const, is_python_value, python_value, size_var

Args = list[Var]
Kwargs = dict[str, Var]


def builtin(*targets: Any) -> Callable[[Caller], Caller]:
    """Register the decorated function as the trace-time version of ``targets``."""

    def register(fn: Caller) -> Caller:
        for target in targets:
            BUILTINS[id(target)] = fn
        return fn

    return register


def _eagerly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on Python values at trace time; an error it raises becomes a graph
    break, so that eager raises it with the user's traceback."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise Raised(f"{getattr(fn, '__name__', fn)} raised {type(exc).__name__} at trace time", exc) from exc


def python_type(var: Var) -> type:
    """The type eager would see for ``var``."""
    kind = var.kind
    if kind == "tensor":
        return var.value if isinstance(var.value, type) else torch.Tensor
    if kind == "tuple":
        return var.value if isinstance(var.value, type) else tuple
    if kind == "list":
        return list
    if kind == "dict":
        return var.value if isinstance(var.value, type) else dict
    if kind == "closure":
        return types.FunctionType
    if kind == "partial":
        return functools.partial
    if kind == "iter":
        return type(iter([]))
    if kind in ("const", "function", "callable", "module", "object"):
        return type(var.value)
    if kind == "userobj":
        return var.value  # type: ignore[no-any-return]
    if kind == "ctx" and isinstance(var.value, AutocastRegion):
        return var.value.manager_type
    if kind == "sym":
        # A size is an int to the traced code (isinstance(n, int)), as it is in eager.
        return pytype_of(var.value)
    if kind == "slice":
        return slice
    if kind == "view":
        return type(var.value(var.value.__objclass__()))
    raise Unsupported(f"type of a {kind} is not known")


@builtin(print)
def _print(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    raise Unsupported("print() writes output: it runs outside the graph")


@builtin(len)
def _len(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    (value,) = args
    if value.kind == "tensor":
        assert value.meta is not None and value.example is not None
        if not value.meta.shape:
            raise Unsupported("len() of a 0-d tensor (TypeError in eager)")
        return size_var(value.example.shape[0])
    if value.kind == "tuple":
        return const(len(value.items))
    if value.kind in ("list", "dict"):
        return const(len(value.box.items))
    if value.kind == "view":
        return const(len(view_storage(frame, value)))
    if value.kind == "module":
        return const(len(value.value))
    if value.kind == "userobj":
        from ptc_capture.interpreter.objects import call_slot

        return call_slot(frame, value, "__len__", [])
    return const(len(as_const(value, "len()")))


@builtin(isinstance)
def _isinstance(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    value, classes = args
    return const(issubclass(python_type(value), as_const(classes, "isinstance() classes")))


@builtin(issubclass)
def _issubclass(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(issubclass(as_const(args[0], "a class"), as_const(args[1], "a class")))


@builtin(callable)
def _callable(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    value = args[0]
    if value.kind in ("function", "closure", "method", "tensor_method", "module", "partial"):
        return const(True)
    if value.kind in ("tensor", "tuple", "list", "dict", "iter", "view"):
        return const(False)
    return const(callable(value.value))


@builtin(getattr)
def _getattr(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    from ptc_capture.interpreter.attrs import load_attr

    name = as_const(args[1], "an attribute name")
    if len(args) > 2:
        try:
            return load_attr(frame, args[0], name)
        except Raised as exc:
            # getattr's default stands in for an AttributeError only, raised anywhere in the
            # lookup (a Python __getattribute__ or __getattr__ included); other errors propagate.
            if isinstance(exc.error, AttributeError):
                return args[2]
            raise
        except Unsupported:
            if args[0].kind in ("module", "object") and not hasattr(args[0].value, name):
                return args[2]
            if args[0].kind == "userobj" and not truth(_hasattr(frame, fn, args[:2], {})):
                return args[2]
            raise
    return load_attr(frame, args[0], name)


@builtin(setattr)
def _setattr(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # setattr(obj, name, value) is the STORE_ATTR of obj.<name> = value
    # (https://docs.python.org/3/library/functions.html#setattr).
    from ptc_capture.interpreter.attrs import store_attribute

    if len(args) != 3 or kwargs:
        raise Unsupported("setattr() takes exactly three positional arguments (TypeError in eager)")
    name = as_const(args[1], "an attribute name")
    if not isinstance(name, str):
        raise Unsupported("setattr() with a non-string attribute name (TypeError in eager)")
    store_attribute(frame, args[0], name, args[2])
    return const(None)


@builtin(hasattr)
def _hasattr(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    obj, name_var = args
    name = as_const(name_var, "an attribute name")
    if obj.kind == "tensor":
        return const(hasattr(torch.Tensor, name) or name in ("shape", "dtype", "device"))
    if obj.kind in ("module", "object", "function", "callable", "const"):
        return const(hasattr(obj.value, name))
    if obj.kind == "userobj":
        from ptc_capture.interpreter.objects import class_attr, has_instance_dict, is_slot

        if class_attr(obj.value, "__getattr__") is not None:
            return _has_by_lookup(frame, obj, name)
        if name in obj.box.attrs or (name == "__dict__" and has_instance_dict(obj.value)):
            return const(True)
        # An unset slot's descriptor is on the class, but reading it raises AttributeError.
        return const(class_attr(obj.value, name) is not None and not is_slot(obj.value, name))
    return _has_by_lookup(frame, obj, name)


def _has_by_lookup(frame: Frame, obj: Var, name: str) -> Var:
    """hasattr as CPython does it: read the attribute; False exactly when that raises AttributeError."""
    from ptc_capture.interpreter.attrs import load_attr

    try:
        load_attr(frame, obj, name)
    except Raised as exc:
        if isinstance(exc.error, AttributeError):
            return const(False)
        raise
    return const(True)


@builtin(range)
def _range(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(range(*[as_const(a, "range()") for a in args]))


_NOT_CALLABLE = ("tensor", "tuple", "list", "dict", "iter", "sym", "slice", "null", "view")


@builtin(functools.partial)
def _partial(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    target = args[0] if args else None
    if target is None or target.kind in _NOT_CALLABLE or (target.kind == "const" and not callable(target.value)):
        raise Unsupported("functools.partial of a value that is not callable (TypeError in eager)")
    bound = Var("tuple", tuple, items=tuple(args[1:]))
    if target.kind in ("callable", "const") and is_python_value(bound) and all(is_python_value(v) for v in kwargs.values()):
        # A builtin or torch function (guarded by identity) over constants: a real partial
        # object, a constant (calls apply it, see calls.py).
        values = [as_const(a, "a partial argument") for a in args[1:]]
        keywords = {k: as_const(v, "a partial argument") for k, v in kwargs.items()}
        return const(_eagerly(functools.partial, target.value, *values, **keywords))
    # Anything else (a Python function, guarded by its code only, a closure, bound tensors):
    # a traced partial whose parts are Vars, each keeping its own guards.
    return Var("partial", functools.partial, items=(target, bound, Var("dict", box=DictBox(dict(kwargs)))))


@builtin(reversed)
def _reversed(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if args[0].kind in ("dict", "view"):
        # A dict's reverse iterator is live as its forward one (interpreter/views.py).
        return view_iter(frame, keys_view(args[0]) if args[0].kind == "dict" else args[0], reverse=True)
    return Var("iter", box=IterBox(list(reversed(sequence_items(frame, args[0])))))


@builtin(iter)
def _iter(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if len(args) != 1 or kwargs:
        raise Unsupported("iter() with a sentinel")
    return get_iter(frame, args[0])


@builtin(next)
def _next(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    it = args[0]
    if it.kind != "iter":
        raise Unsupported(f"next() on a {it.kind}")
    item = iter_next(frame, it)
    if item is None:
        if len(args) > 1:
            return args[1]
        raise Unsupported("next() on an exhausted iterator (StopIteration in eager)")
    return item


@builtin(list)
def _list(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return Var("list", box=ListBox(sequence_items(frame, args[0]) if args else []))


@builtin(tuple)
def _tuple(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return Var("tuple", tuple, items=tuple(sequence_items(frame, args[0]) if args else ()))


@builtin(dict, collections.OrderedDict)
def _dict(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # An OrderedDict is a dict Var whose ``value`` is the class: the interpreter's dicts keep
    # insertion order already, and the class decides type(), its extra methods and its rebuild.
    ordered = fn.value is collections.OrderedDict
    if len(args) > 1:
        raise Unsupported(f"{fn.value.__name__}() takes at most one positional argument (TypeError in eager)")
    items = dict_items(frame, args[0], ordered=ordered) if args else {}
    items.update(kwargs)
    return Var("dict", collections.OrderedDict if ordered else None, box=DictBox(items))


@builtin(vars(dict)["fromkeys"])
def _dict_fromkeys(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # Every key maps to the one value object, as in eager.
    if not 1 <= len(args) <= 2 or kwargs:
        raise Unsupported("dict.fromkeys() takes an iterable and a value (TypeError in eager)")
    value = args[1] if len(args) > 1 else const(None)
    return Var("dict", box=DictBox({as_const(k, "a dict key"): value for k in sequence_items(frame, args[0])}))


def _reduce(frame: Frame, values: list[Var], symbol: str, start: Var | None) -> Var:
    total = start
    for value in values:
        total = value if total is None else binary(frame, symbol, total, value)
    if total is None:
        raise Unsupported("reduction of an empty sequence")
    return total


@builtin(sum)
def _sum(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    start = kwargs.get("start", args[1] if len(args) > 1 else const(0))
    return _reduce(frame, sequence_items(frame, args[0]), "+", start)


def _min_max(frame: Frame, args: Args, kwargs: Kwargs, pick: Callable[..., Any], symbol: str) -> Var:
    values = sequence_items(frame, args[0]) if len(args) == 1 else list(args)
    if kwargs:
        raise Unsupported(f"{pick.__name__}() with keyword arguments")
    if any(v.kind == "sym" for v in values) and all(_is_number(v) for v in values):
        # max(n, 8) of sizes stays symbolic (torch.sym_max), rather than a guarded choice.
        sym_pick: Callable[[Any, Any], Any] = torch.sym_max if pick is max else torch.sym_min
        best = python_value(values[0])
        for value in values[1:]:
            best = sym_pick(best, python_value(value))
        return from_python(best)
    if all(is_python_value(v) for v in values):
        return from_python(pick(*[as_const(v, pick.__name__ + "()") for v in values]))
    if any(v.kind == "tensor" for v in values):
        raise Unsupported(f"{pick.__name__}() compares tensors (data-dependent)")
    best = values[0]
    for value in values[1:]:
        if truth(compare(frame, symbol, value, best)):
            best = value
    return best


@builtin(min)
def _min(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return _min_max(frame, args, kwargs, min, "<")


@builtin(max)
def _max(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return _min_max(frame, args, kwargs, max, ">")


@builtin(abs)
def _abs(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return unary(frame, operator.abs, args[0])


@builtin(any)
def _any(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(any(truth(v) for v in sequence_items(frame, args[0])))


@builtin(all)
def _all(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(all(truth(v) for v in sequence_items(frame, args[0])))


@builtin(sorted)
def _sorted(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if len(args) != 1 or set(kwargs) - {"key", "reverse"}:
        raise Unsupported("sorted() takes one iterable, key= and reverse= (TypeError in eager)")
    items = sort_vars(frame, sequence_items(frame, args[0]), kwargs.get("key"), kwargs.get("reverse"))
    return Var("list", box=ListBox(items))


def _is_number(var: Var) -> bool:
    if var.kind == "sym":
        return not isinstance(var.value, torch.SymBool)
    return var.kind == "const" and type(var.value) in (int, float)


# int() and float() of a size stay symbolic (float() is torch.sym_float; int() of a float size
# truncates with torch.sym_int); other conversions need the value and specialize it.
_SYMBOLIC_CONVERSIONS: dict[type, Callable[[Any], Any]] = {int: torch.sym_int, float: torch.sym_float}


def _scalar(kind: type) -> Caller:
    def convert(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
        if args and args[0].kind == "tensor":
            known = frame.state.known.get(args[0].node)
            if known is not None and len(args) == 1 and not kwargs and kind is not str:
                # A tensor Python numbers alone decide (interpreter/constant_tensors.py).
                return from_python(_eagerly(kind, known))
            raise Unsupported(f"{kind.__name__}() of a tensor reads its data (data-dependent)")
        if len(args) == 1 and not kwargs and args[0].kind == "sym" and kind in _SYMBOLIC_CONVERSIONS:
            value = args[0].value
            if kind is int and isinstance(value, torch.SymInt):
                return args[0]
            if not isinstance(value, torch.SymBool):
                return from_python(_SYMBOLIC_CONVERSIONS[kind](value))
        if kind is bool and len(args) == 1 and args[0].kind in ("sym", "view"):
            return const(truth(args[0], frame))
        return from_python(kind(*[as_const(a, f"{kind.__name__}()") for a in args]))

    return convert


for _kind in (int, float, bool, str, complex):
    BUILTINS[id(_kind)] = _scalar(_kind)


@builtin(type)
def _type(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if len(args) != 1:
        raise Unsupported("type() with three arguments")
    return const(python_type(args[0]))


@builtin(operator.getitem)
def _op_getitem(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return getitem(frame, args[0], args[1])


@builtin(operator.contains)
def _op_contains(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(contains(frame, args[1], args[0]))


def _binary_builtin(symbol: str) -> Caller:
    def apply(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
        return binary(frame, symbol, args[0], args[1])

    return apply


for _fn, _symbol in ((operator.add, "+"), (operator.sub, "-"), (operator.mul, "*"), (operator.truediv, "/"),
                     (operator.floordiv, "//"), (operator.mod, "%"), (operator.pow, "**"), (operator.matmul, "@")):
    BUILTINS[id(_fn)] = _binary_builtin(_symbol)  # fmt: skip


@builtin(torch.no_grad, torch.enable_grad)
def _grad_ctx(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return Var("ctx", fn.value is torch.enable_grad)


@builtin(torch.set_grad_enabled)
def _set_grad_enabled(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return Var("ctx", bool(as_const(args[0], "set_grad_enabled()")))


@builtin(torch.is_grad_enabled)
def _is_grad_enabled(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(frame.state.grad_enabled)


@builtin(super)
def _super(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if args:
        if len(args) != 2:
            raise Unsupported("super() with one argument")
        return Var("super", items=(args[0], args[1]))
    # Zero-argument super() reads the __class__ cell and the first argument of the calling
    # method (https://docs.python.org/3/reference/datamodel.html#creating-the-class-object).
    from ptc_capture.interpreter.stack import load_cell, load_local

    code = frame.code
    if "__class__" not in code.co_freevars or code.co_argcount == 0:
        raise Unsupported("super() outside a method")
    first = code.co_varnames[0]
    # A first argument captured by an inner function lives in a cell; super() reads the cell's
    # contents then, as CPython's super_init_without_args does.
    self_var = load_cell(frame, first) if first in frame.cells else load_local(frame, first)
    return Var("super", items=(load_cell(frame, "__class__"), self_var))


@builtin(torch.finfo, torch.iinfo, torch.device)
def _type_info(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    values = [as_const(a, "a dtype") for a in args]
    return const(_eagerly(fn.value, *values, **{k: as_const(v, "an argument") for k, v in kwargs.items()}))


@builtin(builtins.id, hash)
def _fold_builtin(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return from_python(fn.value(*[as_const(a, fn.value.__name__) for a in args]))


@builtin(round, divmod, pow)
def _number_builtin(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # On Python numbers (sizes included) these are arithmetic; on a tensor they dispatch to
    # its dunder, which the graph records through the operator instead.
    if kwargs or any(a.kind not in ("const", "sym") for a in args):
        raise Unsupported(f"{fn.value.__name__}() of a {', '.join(sorted({a.kind for a in args}))} value")
    return fold(fn.value, *args)


@builtin(set, frozenset)
def _set(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # Sets hold hashable Python values: a constant, as BUILD_SET makes.
    if len(args) > 1 or kwargs:
        raise Unsupported(f"{fn.value.__name__}() takes at most one iterable (TypeError in eager)")
    items = [as_const(v, "a set item") for v in sequence_items(frame, args[0])] if args else []
    return const(_eagerly(fn.value, items))


@builtin(functools.reduce)
def _functools_reduce(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    from ptc_capture.interpreter.calls import call

    if len(args) not in (2, 3) or kwargs:
        raise Unsupported("reduce() takes a function, an iterable and an initial value (TypeError in eager)")
    items = list(sequence_items(frame, args[1]))
    if len(args) > 2:
        acc = args[2]
    elif items:
        acc = items.pop(0)
    else:
        raise Unsupported("reduce() of an empty sequence with no initial value (TypeError in eager)")
    for item in items:
        acc = call(frame, args[0], [acc, item], {})
    return acc


def _pools(frame: Frame, args: Args) -> list[list[Var]]:
    return [list(sequence_items(frame, a)) for a in args]


@builtin(itertools.product)
def _product(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # product, combinations and permutations read their inputs whole when made (CPython
    # copies them into tuples), so taking the items now is what eager does.
    repeat = int(as_const(kwargs["repeat"], "product(repeat=)")) if "repeat" in kwargs else 1
    rows = _eagerly(itertools.product, *_pools(frame, args), repeat=repeat)
    return Var("iter", box=IterBox([Var("tuple", tuple, items=tuple(row)) for row in rows]))


@builtin(itertools.combinations, itertools.permutations)
def _combinatoric(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if not args:
        raise Unsupported(f"{fn.value.__name__}() without an iterable (TypeError in eager)")
    (pool,) = _pools(frame, args[:1])
    options = [as_const(a, fn.value.__name__) for a in args[1:]] + [as_const(v, fn.value.__name__) for v in kwargs.values()]
    rows = _eagerly(fn.value, pool, *options)
    return Var("iter", box=IterBox([Var("tuple", tuple, items=tuple(row)) for row in rows]))


@builtin(itertools.chain)
def _chain(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # chain takes an iterator of each input only when it gets there, so a list changed
    # before then is read as changed (iter_next starts each input).
    if kwargs:
        raise Unsupported("itertools.chain() takes no keyword arguments (TypeError in eager)")
    inputs = Var("iter", box=IterBox(list(args)))
    return Var("iter", box=IterBox([], outer=inputs))


@builtin(vars(itertools.chain)["from_iterable"])
def _chain_from_iterable(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # The outer iterable is iterated lazily too: an input appended before it is reached is chained.
    if len(args) != 1 or kwargs:
        raise Unsupported("chain.from_iterable() takes one iterable (TypeError in eager)")
    return Var("iter", box=IterBox([], outer=get_iter(frame, args[0])))


@builtin(operator.itemgetter, operator.attrgetter)
def _getter(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # Made from constant keys: a constant, which calls apply key by key (see calls.py).
    return const(_eagerly(fn.value, *[as_const(a, fn.value.__name__) for a in args]))


@builtin(torch.Size)
def _torch_size(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    items = tuple(sequence_items(frame, args[0])) if args else ()
    if any(not (_is_number(v) and python_type(v) is int) for v in items):
        raise Unsupported("torch.Size() of values other than ints")
    return Var("tuple", torch.Size, items=items)


@builtin(torch.as_tensor)
def _as_tensor(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # as_tensor of a tensor is the tensor itself when its dtype and device match, else a copy
    # "as if using data.to(dtype=dtype, device=device)"
    # (https://pytorch.org/docs/stable/generated/torch.as_tensor.html): Tensor.to, which does both.
    from ptc_capture.interpreter.calls import call, torch_call

    if len(args) == 1 and args[0].kind == "tensor" and set(kwargs) <= {"dtype", "device"}:
        data, meta = args[0], args[0].meta
        assert meta is not None
        chosen = {k: v for k, v in kwargs.items() if not (v.kind == "const" and v.value is None)}
        dtype = as_const(chosen["dtype"], "as_tensor(dtype=)") if "dtype" in chosen else meta.dtype
        device = as_const(chosen["device"], "as_tensor(device=)") if "device" in chosen else meta.device
        if dtype == meta.dtype and torch.device(device) == meta.device:
            return data  # the same tensor object, as eager returns it
        return call(frame, Var("tensor_method", "to", items=(data,)), [], chosen)
    return torch_call(frame, torch.as_tensor, args, kwargs)


@builtin(torch._C._is_tracing)
def _is_jit_tracing(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # torch.jit.is_tracing() ends in this C query, which models probe on every forward
    # (transformers' is_tracing()); breaking on it split every such frame. Its value at capture
    # time is folded without a guard, so an entry captured outside torch.jit.trace and reused
    # inside one keeps the not-tracing branch (capturing under torch.jit.trace is unsupported).
    return const(bool(fn.value()))


@builtin(object.__getattribute__)
def _object_getattribute(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # The generic attribute lookup that a custom __getattribute__ falls back to
    # (https://docs.python.org/3/reference/datamodel.html#object.__getattribute__): read it
    # natively on the real object, bypassing the override exactly as eager does.
    from ptc_capture.interpreter.attrs import generic_userobj_attr, object_attr

    if len(args) != 2 or kwargs or args[0].kind not in ("object", "module", "userobj"):
        raise Unsupported("object.__getattribute__ on a value without a real object")
    name = as_const(args[1], "an attribute name")
    if not isinstance(name, str):
        raise Unsupported("object.__getattribute__ with a non-string name (TypeError in eager)")
    if args[0].kind == "userobj":
        return generic_userobj_attr(frame, args[0], name)
    return object_attr(frame, args[0], name, object.__getattribute__)


def _overrides_torch_function(var: Var) -> bool:
    kind = var.kind
    if kind == "tensor":
        return False  # only plain Tensor and Parameter reach the trace (subclasses break)
    if kind == "tuple":
        return any(_overrides_torch_function(v) for v in var.items)
    if kind == "list":
        return any(_overrides_torch_function(v) for v in var.box.items)
    if kind in ("const", "callable", "function", "module", "object"):
        # As the C check: any __torch_function__ on a non-tensor type except the disabled one.
        method = inspect.getattr_static(type(var.value), "__torch_function__", None)
        method = getattr(method, "__func__", method)
        return method is not None and method is not torch._C._disabled_torch_function_impl
    raise Unsupported(f"__torch_function__ override check on a {kind}")


@builtin(torch._C._has_torch_function, torch._C._has_torch_function_unary, torch._C._has_torch_function_variadic)
def _has_torch_function(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # The dispatch check that functional code runs before every op: answered from the Vars'
    # types (torch.overrides.has_torch_function is this C function).
    return const(any(_overrides_torch_function(a) for a in args))


@builtin(slice)
def _slice(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(slice(*[as_const(a, "a slice bound") for a in args]))


def _class_of(var: Var) -> type:
    """The class whose dataclass fields describe ``var`` (a class or an instance)."""
    if var.kind in ("const", "callable") and isinstance(var.value, type):
        return var.value
    return python_type(var)


@builtin(dataclasses.fields)
def _dataclass_fields(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # Fields are class-level metadata (fixed when @dataclass ran), so they fold to constants
    # whatever the instance holds; an instance made in the trace has no real object to ask.
    try:
        found = dataclasses.fields(_class_of(args[0]))
    except TypeError as exc:
        raise Unsupported("dataclasses.fields() of a non-dataclass (TypeError in eager)") from exc
    return Var("tuple", tuple, items=tuple(const(f) for f in found))


@builtin(dataclasses.is_dataclass)
def _is_dataclass(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    return const(dataclasses.is_dataclass(_class_of(args[0])))


@builtin(inspect.signature)
def _signature(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    # A signature is computed from the code object and defaults, which the trace already
    # relies on when it inlines the function; bound methods drop their first parameter.
    target = args[0]
    options = {k: as_const(v, "a signature option") for k, v in kwargs.items()}
    if target.kind not in ("method", "function", "callable", "const"):
        raise Unsupported(f"inspect.signature of a {target.kind}")
    value: Any = target.value
    if target.source is not None and isinstance(value, types.FunctionType):
        # Defaults are part of the signature; the code object is guarded with the function.
        frame.state.wrap(value.__defaults__, target.source.attr("__defaults__"))
        frame.state.wrap(value.__kwdefaults__, target.source.attr("__kwdefaults__"))
    if target.kind == "method":
        # Bound to a stand-in: the signature of a bound method drops its first parameter.
        value = types.MethodType(value, object())
    try:
        return const(inspect.signature(value, **options))
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"inspect.signature raised {type(exc).__name__} at trace time") from exc


def register_is_compiling(function: Any) -> None:
    """Make ``function()`` trace as True (ptc_capture.is_compiling)."""

    def answer(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
        state = frame.state
        if state.compile_path_from is None:
            state.compile_path_from = state.steps
        return const(True)

    BUILTINS[id(function)] = answer


# torch.compiler.is_compiling() is documented as the switch libraries use to take their
# compile-friendly path (skipping context-variable bookkeeping and data-dependent checks); a
# ptc trace is such a compile, so the traced code takes that path.
register_is_compiling(torch.compiler.is_compiling)

__all__ = ["builtin", "python_type", "register_is_compiling"]
