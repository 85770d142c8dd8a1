"""Operations on Vars shared by the handler families: truth, Python folding, tensor graph calls."""

from __future__ import annotations

import collections.abc
import operator
from typing import Any

import torch

from ptc_capture.deferred import DeferredCall, deferred_in, mutates_tensors, unpacked, vars_in
from ptc_capture.graph import MetaFailure
from ptc_capture.guards import Guard, Source
from ptc_capture.interpreter.constant_tensors import keep_known, known_scalar_read, with_known_scalars
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.logs import channel
from ptc_capture.symbolic_sizes import SYM_TYPES, concrete
from ptc_capture.variables import DictBox, IterBox, ListBox, Var, const, is_python_value, python_value, size_var

__all__ = [
    "as_const", "defer_call", "from_python", "get_iter", "graph_call", "has_tensor", "is_plain_tuple", "overridden_tuple_slot", "iter_next", "key_var", "module_child_source",
    "sequence_items", "truth", "unpack_deferred",
]  # fmt: skip

_deferred_log = channel("graph_breaks")


def from_python(value: Any) -> Var:
    """A Var (without source) for a value computed at trace time."""
    ty = type(value)
    if isinstance(value, SYM_TYPES):
        return size_var(value)
    if isinstance(value, torch.Tensor):
        raise Unsupported("a tensor was produced outside the graph at trace time")
    if ty is tuple or ty is torch.Size:
        return Var("tuple", ty, items=tuple(from_python(v) for v in value))
    if ty is list:
        return Var("list", box=ListBox([from_python(v) for v in value]))
    if ty is dict:
        return Var("dict", box=DictBox({k: from_python(v) for k, v in value.items()}))
    if isinstance(value, torch.nn.Module):
        raise Unsupported("an nn.Module created inside the traced region is not supported")
    return const(value)


def key_var(key: Any) -> Var:
    """The Var of a dict key (a constant; tuple keys as tuples of constants, so they unpack and index)."""
    if type(key) is tuple:
        return Var("tuple", tuple, items=tuple(key_var(k) for k in key))
    return const(key)


def has_tensor(values: Any) -> bool:
    """True when any Var in a (nested) list/tuple/dict of Vars is a tensor or holds one."""
    if isinstance(values, Var):
        if values.kind == "tensor":
            return True
        if values.kind == "tuple":
            return any(has_tensor(v) for v in values.items)
        if values.kind == "list":
            return any(has_tensor(v) for v in values.box.items)
        if values.kind == "view" and values.items[0].kind in ("dict", "userobj"):
            target = values.items[0]
            return has_tensor(target.box.items if target.kind == "dict" else target.box.items.items)
        return False
    if isinstance(values, dict):
        return any(has_tensor(v) for v in values.values())
    if isinstance(values, (list, tuple)):
        return any(has_tensor(v) for v in values)
    return False


def as_const(var: Var, what: str) -> Any:
    """The Python value of ``var``; a graph break when it has none (e.g. a tensor).

    Symbolic sizes in it are specialized: their values at the example sizes, guarded.
    """
    try:
        return concrete(python_value(var))
    except TypeError:
        raise Unsupported(f"{what} needs a Python value but got a {var.kind}") from None


def truth(var: Var, frame: Frame | None = None) -> bool:
    """bool(var) at trace time; a graph break for tensors (data-dependent control flow).

    ``frame`` is needed for objects made in the trace whose class defines ``__bool__``/``__len__``.
    """
    kind = var.kind
    if kind == "tensor":
        raise Unsupported("data-dependent control flow: the truth value of a tensor decides a branch")
    if kind == "sym":
        # A branch on a size: decided at the example sizes, guarded by the SymbolEnv.
        value = var.value
        return bool(value if isinstance(value, torch.SymBool) else value != 0)
    if kind == "tuple":
        return len(var.items) > 0
    if kind in ("list", "dict"):
        return len(var.box.items) > 0
    if kind == "view" and frame is not None:
        from ptc_capture.interpreter.views import view_storage

        return len(view_storage(frame, var)) > 0
    if kind in ("function", "closure", "module", "callable", "method", "tensor_method", "partial"):
        return True
    if is_python_value(var):
        return bool(python_value(var))
    if kind == "userobj":
        from ptc_capture.interpreter.objects import userobj_truth

        return userobj_truth(frame, var)
    raise Unsupported(f"truth value of a {kind} is not supported")


def sequence_items(frame: Frame, var: Var) -> list[Var]:
    """The items of an iterable Var known at trace time."""
    kind = var.kind
    if kind == "tuple":
        return list(var.items)
    if kind == "list":
        return list(var.box.items)
    if kind == "dict":
        return [key_var(k) for k in var.box.items]
    if kind == "view":
        from ptc_capture.interpreter.views import view_contents

        return view_contents(frame, var)
    if kind == "iter":
        drained = []
        item = iter_next(frame, var)
        while item is not None:
            drained.append(item)
            item = iter_next(frame, var)
        return drained
    if kind == "tensor":
        assert var.meta is not None
        if not var.meta.shape:
            raise Unsupported("iteration over a 0-d tensor")
        # Unrolling needs the count: a dynamic first dim is specialized (guarded), as in torch.compile.
        count = concrete(var.example.shape[0]) if var.example is not None else var.meta.shape[0]
        if not isinstance(count, int):
            raise Unsupported("iteration over a tensor with a symbolic first dimension")
        return [graph_call(frame, "call_function", operator.getitem, (var, const(i)), {}) for i in range(count)]
    if kind == "const" and isinstance(var.value, (range, str, tuple, bytes, frozenset, set)):
        return [const(v) for v in var.value]
    if kind == "object" and var.source is not None and is_plain_tuple(type(var.value)):
        # A tuple subclass from the frame (a namedtuple): immutable, so its items are fixed by
        # guarding each one where it is read, as for a plain tuple.
        state = frame.state
        state.guards.add(Guard("len", var.source, (type(var.value), len(var.value))))
        return [state.wrap(v, var.source.item(i)) for i, v in enumerate(var.value)]
    if kind in ("object", "const") and isinstance(var.value, (dict, tuple, list)):
        return [from_python(v) for v in var.value]
    if kind == "module" and isinstance(var.value, torch.nn.ParameterList) and var.source is not None:
        # Its items are its parameters in key order ("0", "1", ...), each read through the
        # table as ``self[i]`` reads it; which keys there are is guarded.
        table, source = var.value._parameters, var.source.attr("_parameters")
        frame.state.guards.add(Guard("keys", source, (type(table), tuple(table))))
        return [frame.state.wrap(p, source.item(name)) for name, p in table.items()]
    if kind == "module" and isinstance(var.value, (torch.nn.ModuleList, torch.nn.Sequential)):
        children = []
        for name, child in var.value._modules.items():
            children.append(frame.state.wrap(child, module_child_source(var, name)))
        return children
    if kind == "userobj":
        from ptc_capture.interpreter.objects import iterate

        return iterate(frame, var)
    if kind == "object" and var.source is not None and _reiterable(var.value):
        return _listed_items(frame, var)
    raise Unsupported(f"iteration over a {kind} ({type(var.value).__name__}) is not supported")


def module_child_source(module: Var, name: str) -> Source | None:
    """The source of the child module ``name`` of a module Var: read through the module, or,
    for a Sequential slice made in the trace (which keeps its parent's child names and holds
    the parent in ``items``), through that parent."""
    if module.source is not None:
        return module.source.attr("_modules").item(name)
    if module.items and module.items[0].kind == "module":
        return module_child_source(module.items[0], name)
    return None


def get_iter(frame: Frame, var: Var) -> Var:
    """``iter(var)``: an iterator is itself; a list's iterator reads the list as it is when
    each item is taken, a dict's or a dict view's reads the dict then; other iterables are read now."""
    if var.kind == "iter":
        return var
    if var.kind == "list":
        return Var("iter", box=IterBox(var.box.items, over=var))
    if var.kind in ("dict", "view"):
        from ptc_capture.interpreter.views import keys_view, view_iter

        return view_iter(frame, keys_view(var) if var.kind == "dict" else var)
    if var.kind == "userobj":
        from ptc_capture.interpreter.calls import BUILTINS
        from ptc_capture.interpreter.objects import call_slot, class_attr

        if id(class_attr(var.value, "__iter__")) in BUILTINS:
            # A container subclass's own C iterator: live over its contents, as list's reads
            # by index (an item appended after iter() is still reached).
            return call_slot(frame, var, "__iter__", [])
    return Var("iter", box=IterBox(sequence_items(frame, var)))


def iter_next(frame: Frame, var: Var) -> Var | None:
    """``next(var)`` of an iterator Var, or None when it is exhausted (StopIteration in eager)."""
    box: IterBox = var.box
    if box.step is not None:
        # Counted as an instruction: an endless iterator (itertools.count) drained whole
        # stops at the interpreter's budget instead of running forever.
        state = frame.state
        state.steps += 1
        if state.steps > state.config.max_instructions:
            raise Unsupported(f"tracing took more than {state.config.max_instructions} steps (an endless iterator?)")
        made = box.step(frame)
        if made is None:
            box.step = None
        return made
    while True:
        if box.inner is not None:
            item = iter_next(frame, box.inner)
            if item is not None:
                return item
            box.inner = None
        if box.pos < len(box.items):
            box.pos += 1
            found: Var = box.items[box.pos - 1]
            return found
        if box.outer is None:
            return None
        source = iter_next(frame, box.outer)
        if source is None:
            box.outer = None
            return None
        # The next input of a chain is read only now, as eager reads it.
        box.inner, box.items, box.pos = get_iter(frame, source), [], 0


# The behaviour a tuple Var gives its items (indexing, iteration, length, membership, comparison,
# concatenation, attribute lookup): a tuple subclass that overrides none of them is one. (Named
# methods such as ``count`` may be shadowed, by a namedtuple field: attribute lookup finds those.)
_TUPLE_SLOTS = (
    "__getitem__", "__iter__", "__len__", "__contains__", "__reversed__", "__bool__", "__eq__", "__ne__", "__lt__",
    "__le__", "__gt__", "__ge__", "__hash__", "__add__", "__mul__", "__rmul__", "__getattribute__", "__setattr__",
)  # fmt: skip


def is_plain_tuple(ty: type) -> bool:
    """A tuple subclass that iterates and indexes as a tuple (namedtuples)."""
    return issubclass(ty, tuple) and ty.__iter__ is tuple.__iter__ and ty.__getitem__ is tuple.__getitem__


def overridden_tuple_slot(ty: type) -> str | None:
    """The first of tuple's slots that the tuple subclass ``ty`` overrides, or None: a tuple Var of
    a subclass made in the trace behaves as a tuple in all of them (namedtuples, a subclass adding
    methods)."""
    return next((name for name in _TUPLE_SLOTS if getattr(ty, name, None) is not getattr(tuple, name, None)), None)


_CONTAINER_ABCS = (collections.abc.Sequence, collections.abc.Set, collections.abc.Mapping, collections.abc.MappingView)


def _reiterable(value: Any) -> bool:
    # A container (or a view over one) that is not its own iterator: iterating it again, as
    # the guards do, gives the same items without consuming anything. Other iterables (data
    # loaders, streams) may load or consume on iteration and are left to a graph break.
    ty = type(value)
    return (
        isinstance(value, _CONTAINER_ABCS)
        and not hasattr(ty, "__next__")
        and not (ty.__module__ or "").startswith("torch")
    )


def _listed_items(frame: Frame, var: Var) -> list[Var]:
    assert var.source is not None
    try:
        values = list(var.value)
    except Exception as exc:
        raise Unsupported(f"iterating a {type(var.value).__name__} raised {type(exc).__name__} at trace time") from exc
    listed = Source("listed", None, var.source)
    frame.state.guards.add(Guard("len", listed, (list, len(values))))
    return [frame.state.wrap(v, listed.item(i)) for i, v in enumerate(values)]


STORAGE_MUTATORS = frozenset({"resize_", "resize_as_", "set_"})
"""In-place ops that give a tensor new storage, by method or function name."""


def graph_call(
    frame: Frame,
    op: str,
    target: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    mutates: bool = False,
    factory: bool = False,
) -> Var:
    """Record a torch op in the graph, or defer it to after the graph when meta tensors cannot
    describe its result (see ptc_capture.deferred); a graph break when neither is possible."""
    state = frame.state
    name = target if op == "call_method" else getattr(target, "__name__", "")
    if name in STORAGE_MUTATORS:
        # A tensor given new storage (resize_, set_) cannot be expressed by a graph of
        # functional ops; eager's call runs outside the graph.
        raise Unsupported(f"{_call_label(op, target)} changes the size or storage of a tensor in place; it runs outside the graph")
    if any(v.kind == "view" for v in vars_in((args, kwargs))):
        # Deferred to after the graph, it would read the dict as it is then, not as it is now.
        raise Unsupported(f"{_call_label(op, target)} takes a dict view; it runs outside the graph")
    pending = deferred_in(args, kwargs)
    writes = mutates_tensors(op, target, kwargs, mutates)
    if pending:
        first = pending[0].value
        if not state.fullgraph or writes or factory:
            raise Unsupported(f"{_call_label(op, target)} uses the result of {first.label}, which runs after the graph ({first.why})")
        return _defer(state, op, target, args, kwargs, f"it takes the result of {first.label}")
    if state.deferred and writes:
        raise Unsupported(
            f"{_call_label(op, target)} writes a tensor, which must not happen before {state.deferred[0].value.label}"
            " (deferred to after the graph) reads its arguments"
        )
    if writes:
        # The write may reach a tensor of known value, directly or through a view of it: no
        # kept value can be trusted after it.
        state.known.clear()
    known = known_scalar_read(state, op, target, args)
    if known is not None:
        return known
    try:
        result = state.graph.call(op, target, args, kwargs, state.grad_enabled, mutates, factory)
    except MetaFailure as exc:
        # A size given as a tensor Python constants decide (Longformer's chunk count): eager's
        # __index__ reads its number, which the trace knows (a method's self stays the tensor).
        head, rest = (args[:1], args[1:]) if op == "call_method" else ((), args)
        numbers = with_known_scalars(state, rest, kwargs)
        if numbers is not None and not (writes or factory):
            try:
                return state.graph.call(op, target, head + numbers[0], numbers[1], state.grad_enabled, mutates, factory)
            except MetaFailure:
                pass
        if writes or factory:
            raise Unsupported(str(exc)) from exc
        return _defer(state, op, target, args, kwargs, _meta_reason(exc))
    if state.known and not writes:
        keep_known(state, op, target, args, kwargs, result)
    return result


def _meta_reason(exc: MetaFailure) -> str:
    # The meta kernel's own message can run to paragraphs; its first sentence says enough.
    text = str(exc).split(" failed on meta tensors: ", 1)[-1].strip().splitlines()[0]
    return f"meta tensors cannot describe its result: {text[:120]}"


def _call_label(op: str, target: Any) -> str:
    return f"Tensor.{target}" if op == "call_method" else getattr(target, "__name__", None) or repr(target)


def unpack_deferred(frame: Frame, value: Var, count: int) -> list[Var]:
    """``a, b = <deferred>``: ``count`` deferred items (the unpacking checks the length after the graph)."""
    why = f"it unpacks the result of {value.value.label}"
    whole = _defer(frame.state, "call_function", unpacked, (value, const(count)), {}, why)
    return [_defer(frame.state, "call_function", operator.getitem, (whole, const(i)), {}, why) for i in range(count)]


def defer_call(frame: Frame, target: Any, args: tuple[Any, ...], why: str) -> Var:
    """Record ``target(*args)`` to run eagerly after the graph (see ptc_capture.deferred)."""
    return _defer(frame.state, "call_function", target, args, {}, why)


def _defer(state: CaptureState, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], why: str) -> Var:
    call = DeferredCall(op, target, tuple(args), dict(kwargs), why)
    var = Var("deferred", call)
    state.deferred.append(var)
    _deferred_log.debug("%s runs eagerly after the graph: %s", call.label, why)
    return var
