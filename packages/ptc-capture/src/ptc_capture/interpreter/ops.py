"""Handlers for operators: binary/unary arithmetic, comparisons, identity, membership, subscripts."""

from __future__ import annotations

import collections
import dis
import operator
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.guards import Guard
from ptc_capture.interpreter.loop import handler
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.interpreter.values import (
    as_const,
    from_python,
    graph_call,
    is_plain_tuple,
    iter_next,
    module_child_source,
    sequence_items,
    truth,
)
from ptc_capture.variables import DictBox, IterBox, ListBox, Var, const, is_python_value, python_value

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift,
    "@": operator.matmul, "*": operator.mul, "%": operator.mod, "|": operator.or_,
    "**": operator.pow, ">>": operator.rshift, "-": operator.sub, "/": operator.truediv,
    "^": operator.xor,
}  # fmt: skip

# In-place operators on a tensor mutate it (``x += y`` is ``x.add_(y)``), so they are
# recorded as the in-place Tensor method that eager calls.
_TENSOR_INPLACE: dict[str, str] = {
    "+=": "add_", "-=": "sub_", "*=": "mul_", "/=": "div_", "&=": "bitwise_and_",
    "|=": "bitwise_or_", "^=": "bitwise_xor_", "//=": "floor_divide_", "%=": "remainder_",
    "**=": "pow_", "<<=": "bitwise_left_shift_", ">>=": "bitwise_right_shift_",
}  # fmt: skip

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
    ">=": operator.ge,
}  # fmt: skip


# Kinds that operators turn into torch calls: graph tensors, and values of calls that run after
# the graph (deferred: graph_call defers the operator too, or breaks the graph).
_TENSORS = ("tensor", "deferred")


def has_sym(var: Var) -> bool:
    """True when ``var`` is a symbolic size or a tuple/list/slice holding one."""
    if var.kind == "sym":
        return True
    if var.kind in ("tuple", "slice"):
        return any(has_sym(v) for v in var.items)
    if var.kind == "list":
        return any(has_sym(v) for v in var.box.items)
    return False


def _fold_symbolic(fn: Callable[..., Any], values: tuple[Var, ...]) -> Var | None:
    # Python arithmetic and comparisons on SymInts are symbolic (the SymbolEnv simplifies them);
    # an operation they do not support falls back to the specialized values (None).
    try:
        args = [python_value(v) for v in values]
        return from_python(fn(*args))
    except Exception:
        return None


def fold(fn: Callable[..., Any], *values: Var) -> Var:
    """Apply ``fn`` to the Python values of ``values`` at trace time (symbolically on sizes)."""
    if any(has_sym(v) for v in values):
        found = _fold_symbolic(fn, values)
        if found is not None:
            return found
    args = [as_const(v, getattr(fn, "__name__", "operator")) for v in values]
    try:
        return from_python(fn(*args))
    except Exception as exc:
        # The eager run raises the same error with the user's traceback.
        raise Raised(f"{getattr(fn, '__name__', fn)} raised {type(exc).__name__} at trace time", exc) from exc


def binary(frame: Frame, symbol: str, a: Var, b: Var) -> Var:
    """The Var of ``a <symbol> b`` (symbol as in dis, e.g. ``+`` or ``+=``)."""
    inplace = symbol.endswith("=") and symbol not in _COMPARE
    base = symbol[:-1] if inplace else symbol
    fn = _BINARY[base]
    if a.kind in _TENSORS or b.kind in _TENSORS:
        if inplace and a.kind == "tensor":
            graph_call(frame, "call_method", _TENSOR_INPLACE[symbol], (a, b), {})
            return a
        return graph_call(frame, "call_function", fn, (a, b), {})
    if a.kind == "userobj" or b.kind == "userobj":
        return _object_binary(frame, fn.__name__.rstrip("_"), inplace, a, b)
    sequence = _sequence_binary(frame, base, inplace, a, b)
    if sequence is not None:
        return sequence
    return fold(fn, a, b)


def _special_method(frame: Frame, obj: Var, method: str, other: Var) -> Var | None:
    """``obj.<method>(other)`` for an object made in the trace, None where its class lacks the
    method or it returned NotImplemented."""
    from ptc_capture.interpreter.objects import call_slot, has_slot

    if obj.kind != "userobj":
        return None
    if method == "__ne__" and not has_slot(obj, "__ne__"):
        # object.__ne__ inverts __eq__ (https://docs.python.org/3/reference/datamodel.html#object.__ne__).
        equal = _special_method(frame, obj, "__eq__", other)
        return None if equal is None else const(not truth(equal, frame))
    if not has_slot(obj, method):
        return None
    result = call_slot(frame, obj, method, [other])
    return None if result.kind == "const" and result.value is NotImplemented else result


def _special_pair(frame: Frame, a: Var, own: str, b: Var, reflected: str) -> Var | None:
    """``a.<own>(b)``, else ``b.<reflected>(a)``, in the data model's order: the reflected one first
    where b's class is a subclass of a's that overrides it
    (https://docs.python.org/3/reference/datamodel.html#object.__radd__); None where neither answers."""
    from ptc_capture.interpreter.builtins import python_type
    from ptc_capture.interpreter.objects import class_attr

    left, right = python_type(a), python_type(b)
    order = [(a, own, b), (b, reflected, a)]
    if left is not right and issubclass(right, left) and class_attr(right, reflected) is not class_attr(left, reflected):
        order.reverse()
    for obj, method, other in order:
        done = _special_method(frame, obj, method, other)
        if done is not None:
            return done
    return None


def _object_binary(frame: Frame, name: str, inplace: bool, a: Var, b: Var) -> Var:
    """``a <op> b`` where an operand is an object made in the trace: its class's special methods
    (``__i<op>__`` first for an in-place operator, then ``__<op>__`` and ``__r<op>__``)."""
    done = _special_method(frame, a, f"__i{name}__", b) if inplace else None
    if done is None:
        done = _special_pair(frame, a, f"__{name}__", b, f"__r{name}__")
    if done is None:
        raise Unsupported(f"operator {name} of a {a.kind} and a {b.kind} value that define no {name}")
    return done


def _sequence_binary(frame: Frame, op: str, inplace: bool, a: Var, b: Var) -> Var | None:
    if op == "+" and a.kind == "tuple" and b.kind == "tuple":
        # tuple's + and * make plain tuples, of namedtuples too; torch.Size's own make a Size.
        return Var("tuple", torch.Size if torch.Size in (a.value, b.value) else tuple, items=a.items + b.items)
    if op == "+" and a.kind == "list" and b.kind in ("list", "tuple"):
        extra = b.box.items if b.kind == "list" else list(b.items)
        if inplace:
            a.box.items.extend(extra)
            if a.source is not None:
                frame.state.side_effects.mutate_contents(a)
            return a
        if b.kind == "list":
            return Var("list", box=ListBox(a.box.items + extra))
    if op == "|" and a.kind == "dict" and b.kind == "dict":
        # dict union (PEP 584): the right operand's values win; |= updates in place.
        if not inplace:
            # OrderedDict's __or__ (or __ror__, tried first for the subclass) makes an OrderedDict.
            ordered = collections.OrderedDict in (a.value, b.value)
            return Var("dict", collections.OrderedDict if ordered else None, box=DictBox({**a.box.items, **b.box.items}))
        a.box.items.update(b.box.items)
        if a.source is not None:
            frame.state.side_effects.mutate_contents(a)
        return a
    if op == "*" and a.kind in ("tuple", "list") and b.kind == "const" and type(b.value) is int:
        if a.kind == "tuple":
            return Var("tuple", torch.Size if a.value is torch.Size else tuple, items=a.items * b.value)
        if not inplace:
            return Var("list", box=ListBox(a.box.items * b.value))
    return None


@handler("BINARY_OP")
def _binary_op(frame: Frame, inst: dis.Instruction) -> None:
    b = frame.pop()
    a = frame.pop()
    frame.push(binary(frame, dis._nb_ops[inst.arg][1], a, b))  # type: ignore[attr-defined]


def compare(frame: Frame, symbol: str, a: Var, b: Var) -> Var:
    """The Var of a rich comparison."""
    fn = _COMPARE[symbol]
    if a.kind in _TENSORS or b.kind in _TENSORS:
        return graph_call(frame, "call_function", fn, (a, b), {})
    if a.kind == "userobj" or b.kind == "userobj":
        # Its class's rich comparison (a dataclass's generated __eq__, set.__eq__ of a set
        # subclass); == and != fall back to identity where neither side answers.
        own, reflected = _RICH[symbol]
        done = _special_pair(frame, a, own, b, reflected)
        if done is not None:
            return done
        if symbol not in ("==", "!="):
            raise Unsupported(f"{symbol} between a {a.kind} and a {b.kind} value that define no ordering (TypeError in eager)")
    if symbol in ("==", "!=") and a.kind == b.kind and a.kind in ("tuple", "list"):
        # Sequences are equal when their items are, each pair by identity first, then ==.
        left, right = (a.items, b.items) if a.kind == "tuple" else (a.box.items, b.box.items)
        equal = len(left) == len(right) and all(matches(frame, x, y) for x, y in zip(left, right))
        return const(equal if symbol == "==" else not equal)
    if symbol in ("==", "!=") and not (is_python_value(a) and is_python_value(b)):
        same = _same_object(a, b)
        if same is not None:
            return const(same if symbol == "==" else not same)
    return fold(fn, a, b)


# Each comparison's special method and its reflection (``a < b`` is also ``b.__gt__(a)``).
_RICH: dict[str, tuple[str, str]] = {
    "==": ("__eq__", "__eq__"), "!=": ("__ne__", "__ne__"), "<": ("__lt__", "__gt__"), "<=": ("__le__", "__ge__"),
    ">": ("__gt__", "__lt__"), ">=": ("__ge__", "__le__"),
}  # fmt: skip


@handler("COMPARE_OP")
def _compare_op(frame: Frame, inst: dis.Instruction) -> None:
    b = frame.pop()
    a = frame.pop()
    frame.push(compare(frame, str(inst.argval), a, b))


def _same_object(a: Var, b: Var) -> bool | None:
    if a is b:
        return True
    if a.kind == "null" or b.kind == "null":
        return a.kind == b.kind
    if a.kind == "view" or b.kind == "view":
        return False  # each keys()/values()/items() call makes a new view, in eager as here
    if is_python_value(a) and is_python_value(b) and a.kind not in ("tuple", "list", "dict"):
        return python_value(a) is python_value(b)
    if (a.kind == "const" and a.value is None) or (b.kind == "const" and b.value is None):
        return False
    if a.kind == "tensor" and b.kind == "tensor":
        return a.node is b.node
    if a.kind != b.kind:
        return False
    if a.box is not None and b.box is not None:
        return a.box is b.box
    return None


@handler("IS_OP")
def _is_op(frame: Frame, inst: dis.Instruction) -> None:
    b = frame.pop()
    a = frame.pop()
    same = _same_object(a, b)
    if same is None:
        raise Unsupported(f"identity of a {a.kind} and a {b.kind} is not known at trace time")
    frame.push(const(same != bool(inst.arg)))


def matches(frame: Frame, element: Var, item: Var) -> bool:
    """Whether a container's ``element`` is ``item`` or equals it, as ``in``, ``index`` and
    ``count`` decide (PyObject_RichCompareBool: identity first, then ``element == item``)."""
    if _same_object(element, item):
        return True
    none = (element.kind == "const" and element.value is None) or (item.kind == "const" and item.value is None)
    if none and "userobj" not in (element.kind, item.kind):
        # None equals only itself, and a tensor's == says False to it: no comparison to trace.
        return False
    # Anything else is compared, as eager does: [x] == [x] by their items, a dataclass by its
    # __eq__, two tensors by a graph op whose truth value is data (a graph break).
    return truth(compare(frame, "==", element, item), frame)


def contains(frame: Frame, item: Var, container: Var) -> bool:
    """``item in container`` at trace time."""
    if container.kind == "dict":
        return bool(as_const(item, "a dict key") in container.box.items)
    if container.kind == "view":
        from ptc_capture.interpreter.views import view_contents, view_storage

        if container.value.__name__ == "keys":
            return bool(as_const(item, "a dict key") in view_storage(frame, container))
        # values() and items() compare as a sequence of what the dict holds now.
        return contains(frame, item, Var("tuple", tuple, items=tuple(view_contents(frame, container))))
    if container.kind in ("tuple", "list"):
        items = container.items if container.kind == "tuple" else container.box.items
        return any(matches(frame, other, item) for other in items)
    if container.kind == "iter":
        # An iterator is searched by taking items until one matches (PySequence_Contains's
        # iteration): what follows the match is left for later reads, an exhausted one stays so.
        other = iter_next(frame, container)
        while other is not None:
            if matches(frame, other, item):
                return True
            other = iter_next(frame, container)
        return False
    if container.kind == "userobj":
        from ptc_capture.interpreter.objects import call_slot, has_slot

        if has_slot(container, "__contains__"):
            return truth(call_slot(frame, container, "__contains__", [item]), frame)
        # Without __contains__, ``in`` walks the iteration (the data model's fallback), stopping
        # at the first match.
        iterator = call_slot(frame, container, "__iter__", [])
        if iterator.kind != "iter":
            iterator = Var("iter", box=IterBox(sequence_items(frame, iterator)))
        return contains(frame, item, iterator)
    if container.kind == "tensor" or item.kind == "tensor":
        raise Unsupported("membership test on a tensor")
    return bool(as_const(item, "in") in as_const(container, "in"))


@handler("CONTAINS_OP")
def _contains_op(frame: Frame, inst: dis.Instruction) -> None:
    container = frame.pop()
    item = frame.pop()
    frame.push(const(contains(frame, item, container) != bool(inst.arg)))


_UNARY: dict[str, Callable[[Any], Any]] = {
    "UNARY_NEGATIVE": operator.neg,
    "UNARY_POSITIVE": operator.pos,
    "UNARY_INVERT": operator.invert,
}


def unary(frame: Frame, fn: Callable[[Any], Any], value: Var) -> Var:
    """The Var of a unary operator."""
    if value.kind in _TENSORS:
        return graph_call(frame, "call_function", fn, (value,), {})
    return fold(fn, value)


@handler("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(unary(frame, _UNARY[inst.opname], frame.pop()))


@handler("UNARY_NOT")
def _unary_not(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(const(not truth(frame.pop(), frame)))


@handler("CALL_INTRINSIC_1")
def _call_intrinsic_1(frame: Frame, inst: dis.Instruction) -> None:
    # 3.12 moved a few rare operations behind CALL_INTRINSIC_1; see the dis docs
    # (https://docs.python.org/3.12/library/dis.html#opcode-CALL_INTRINSIC_1).
    name = str(inst.argrepr)
    value = frame.pop()
    if name == "INTRINSIC_UNARY_POSITIVE":
        frame.push(unary(frame, operator.pos, value))
    elif name == "INTRINSIC_LIST_TO_TUPLE":
        frame.push(Var("tuple", tuple, items=tuple(value.box.items)))
    else:
        raise Unsupported(f"CALL_INTRINSIC_1 {name} is not supported")


def getitem(frame: Frame, obj: Var, index: Var) -> Var:
    """The Var of ``obj[index]``."""
    kind = obj.kind
    if kind in _TENSORS:
        return graph_call(frame, "call_function", operator.getitem, (obj, index), {})
    if kind in ("tuple", "list"):
        items = obj.items if kind == "tuple" else obj.box.items
        key = as_const(index, "a sequence index")
        if isinstance(key, slice):
            picked = items[key]
            if kind == "tuple":
                # A slice of torch.Size is a Size; of any other tuple subclass (a namedtuple), a tuple.
                return Var("tuple", torch.Size if obj.value is torch.Size else tuple, items=tuple(picked))
            return Var("list", box=ListBox(list(picked)))
        try:
            return items[operator.index(key)]
        except (IndexError, TypeError) as exc:
            raise Raised(f"index {key!r} raised {type(exc).__name__} at trace time", exc) from exc
    if kind == "dict":
        key = as_const(index, "a dict key")
        if key not in obj.box.items:
            raise Raised(f"key {key!r} is missing (KeyError at trace time)", KeyError(key))
        found: Var = obj.box.items[key]
        return found
    if kind == "module" and isinstance(obj.value, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)):
        key = as_const(index, "a module index")
        child = obj.value[key]
        if isinstance(child, torch.nn.Module):
            named = [(name, m) for name, m in obj.value._modules.items() if m is not None]
            picked = [(name, m) for name, m in named if m is child]
            if isinstance(key, slice) and obj.source is not None:
                # Which children a slice picks depends on the parent's children.
                modules = obj.value._modules
                frame.state.guards.add(Guard("keys", obj.source.attr("_modules"), (type(modules), tuple(modules))))
            if isinstance(key, slice) and isinstance(obj.value, torch.nn.ModuleList):
                # A fresh ModuleList each call (self.layers[:n]): traced as the list of its
                # modules, each read through the parent, so nothing guards the new object.
                picked = named[key]
                return Var("list", box=ListBox([_child(frame, obj, name, m) for name, m in picked]))
            if isinstance(key, slice) and isinstance(obj.value, torch.nn.Sequential):
                # A fresh Sequential each call (self.seq[1:3]) that keeps its parent's child
                # names: the real slice, its children read through the parent (module_child_source).
                return Var("module", child, items=(obj,))
            if len(picked) == 1 and not isinstance(key, slice):
                return _child(frame, obj, *picked[0])
        raise Unsupported(f"slicing a {type(obj.value).__name__} is not supported (ModuleList and Sequential slices are)")
    if kind == "userobj":
        from ptc_capture.interpreter.objects import call_slot

        return call_slot(frame, obj, "__getitem__", [index])
    if kind == "object" and index.kind == "const" and obj.source is not None:
        if isinstance(index.value, slice):
            # A slice has no source of its own (and is unhashable before 3.12): a tuple from the
            # frame is sliced over its guarded items; other objects may slice as they like.
            if not is_plain_tuple(type(obj.value)):
                raise Unsupported(f"slicing a {type(obj.value).__name__} from the frame")
            return getitem(frame, Var("tuple", tuple, items=tuple(sequence_items(frame, obj))), index)
        try:
            value = obj.value[index.value]
        except Exception as exc:
            raise Raised(f"subscript raised {type(exc).__name__} at trace time", exc) from exc
        return frame.state.wrap(value, obj.source.item(index.value))
    return fold(operator.getitem, obj, index)


def _child(frame: Frame, container: Var, name: str, module: torch.nn.Module) -> Var:
    return frame.state.wrap(module, module_child_source(container, name))


@handler("BINARY_SUBSCR")
def _binary_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index = frame.pop()
    obj = frame.pop()
    frame.push(getitem(frame, obj, index))


@handler("BINARY_SLICE")
def _binary_slice(frame: Frame, inst: dis.Instruction) -> None:
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    frame.push(getitem(frame, obj, slice_var(start, stop, const(None))))


def slice_var(start: Var, stop: Var, step: Var) -> Var:
    """The Var of ``slice(start, stop, step)``: a constant, or a ``slice`` Var when a bound is a symbolic size."""
    parts = [start, stop, step]
    if all(p.kind == "const" for p in parts):
        return const(slice(start.value, stop.value, step.value))
    if all(p.kind in ("const", "sym") for p in parts):
        return Var("slice", items=(start, stop, step))
    raise Unsupported("slice bounds must be known at trace time")


def setitem(frame: Frame, obj: Var, index: Var, value: Var) -> None:
    """Trace ``obj[index] = value``."""
    if obj.kind == "tensor":
        graph_call(frame, "call_function", operator.setitem, (obj, index, value), {}, mutates=True)
        return
    if obj.kind == "list":
        key = as_const(index, "a list index")
        try:
            if isinstance(key, slice):
                obj.box.items[key] = _iter_items(value)
            else:
                obj.box.items[operator.index(key)] = value
        except (IndexError, TypeError, ValueError) as exc:
            raise Unsupported(f"list assignment raised {type(exc).__name__} at trace time") from exc
    elif obj.kind == "dict":
        obj.box.items[as_const(index, "a dict key")] = value
    elif obj.kind == "userobj":
        from ptc_capture.interpreter.objects import call_slot

        call_slot(frame, obj, "__setitem__", [index, value])
        return
    else:
        raise Unsupported(f"item assignment on a {obj.kind} is not supported")
    if obj.source is not None:
        frame.state.side_effects.mutate_contents(obj)


def _iter_items(value: Var) -> list[Var]:
    if value.kind == "tuple":
        return list(value.items)
    if value.kind == "list":
        return list(value.box.items)
    raise Unsupported("slice assignment from a non-sequence")


@handler("STORE_SUBSCR")
def _store_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    setitem(frame, obj, index, value)


@handler("STORE_SLICE")
def _store_slice(frame: Frame, inst: dis.Instruction) -> None:
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    setitem(frame, obj, slice_var(start, stop, const(None)), value)


@handler("DELETE_SUBSCR")
def _delete_subscr(frame: Frame, inst: dis.Instruction) -> None:
    index = frame.pop()
    obj = frame.pop()
    delitem(frame, obj, index)


def delitem(frame: Frame, obj: Var, index: Var) -> None:
    """Trace ``del obj[index]``."""
    if obj.kind == "userobj":
        from ptc_capture.interpreter.objects import call_slot

        call_slot(frame, obj, "__delitem__", [index])
        return
    if obj.kind not in ("list", "dict"):
        raise Unsupported(f"item deletion on a {obj.kind} is not supported")
    key = as_const(index, "an index")
    try:
        del obj.box.items[key]
    except (IndexError, KeyError, TypeError) as exc:
        raise Unsupported(f"del raised {type(exc).__name__} at trace time") from exc
    if obj.source is not None:
        frame.state.side_effects.mutate_contents(obj)
