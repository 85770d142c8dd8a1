"""Small tensors whose values Python constants alone decide: ``torch.div(seq_len, 2, rounding_mode="trunc")``.

A torch function given only Python values (sizes and config numbers the trace already guards)
makes a tensor that is the same on every call the guards admit. The call stays in the graph,
so the tensor is made at run time as eager makes it, and the trace also keeps its real value
(``CaptureState.known``, by graph node), computed once at trace time. Arithmetic whose tensor
operands are all such tensors keeps a value too, and where an op needs a Python number from one
(a size of ``view``/``new_zeros``, ``.item()``), the trace reads it from that value instead of
deferring the op to after the graph. Libraries compute sizes this way (Longformer's chunk count),
and torch.compile folds them the same way.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch

from ptc_capture.deferred import vars_in
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.variables import ListBox, Var, const

__all__ = ["constant_tensor", "keep_known", "known_scalar_read", "with_known_scalars"]

_LIMIT = 64
"""The most elements a tensor the trace keeps the value of may have (they are sizes and scalars)."""

# Pure arithmetic: the same operands give the same result (random ops and in-place ones never do).
_PURE_FUNCTIONS = {
    id(f)
    for f in (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
              operator.pow, operator.neg, operator.pos, operator.abs, torch.div, torch.add, torch.sub, torch.mul,
              torch.floor_divide, torch.remainder, torch.true_divide, torch.neg, torch.abs)
}  # fmt: skip
_PURE_METHODS = frozenset({
    "add", "sub", "mul", "div", "floor_divide", "remainder", "true_divide", "neg", "abs", "int", "long", "float",
    "__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__radd__", "__rsub__", "__rmul__",
})  # fmt: skip
_SCALAR_READS = frozenset({"item", "tolist", "__index__", "__int__", "__float__"})


def _keepable(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and type(value) is torch.Tensor
        and value.layout is torch.strided
        and value.device.type == "cpu"
        and not value.requires_grad
        and value.numel() <= _LIMIT
    )


def constant_tensor(frame: Frame, fn: Any, args: list[Var], kwargs: dict[str, Var], value: Any) -> Var:
    """The tensor Var of ``fn(*args, **kwargs)`` over Python values, whose real result is ``value``."""
    if not _keepable(value):
        raise Unsupported("a tensor was produced outside the graph at trace time")
    state = frame.state
    var = state.graph.constant_call("call_function", fn, tuple(args), dict(kwargs), value)
    state.known[var.node] = value
    return var


def _pure(op: str, target: Any) -> bool:
    return target in _PURE_METHODS if op == "call_method" else id(target) in _PURE_FUNCTIONS


def _real(value: Any, known: dict[Any, torch.Tensor]) -> Any:
    """``value`` (Vars in tuples, lists and dicts) with each tensor Var replaced by its known value."""
    if isinstance(value, Var):
        if value.kind == "tensor":
            return known[value.node]
        if value.kind == "tuple":
            return tuple(_real(v, known) for v in value.items)
        if value.kind == "list":
            return [_real(v, known) for v in value.box.items]
        return value.value
    if isinstance(value, (tuple, list)):
        return type(value)(_real(v, known) for v in value)
    if isinstance(value, dict):
        return {k: _real(v, known) for k, v in value.items()}
    return value


def _leaves(value: Any) -> Iterator[Var]:
    """The Vars in a structure of arguments, inside tuple and list Vars too."""
    for var in vars_in(value):
        if var.kind == "tuple":
            yield from _leaves(var.items)
        elif var.kind == "list":
            yield from _leaves(var.box.items)
        else:
            yield var


def keep_known(state: CaptureState, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Var) -> None:
    """After a recorded op: keep the value of its result when its operands all have known values."""
    if result.kind != "tensor" or not _pure(op, target):
        return
    operands = list(_leaves((args, kwargs)))
    tensors = [v for v in operands if v.kind == "tensor"]
    if not tensors or not all(v.node in state.known for v in tensors):
        return
    if not all(v.kind in ("tensor", "const") for v in operands):
        return  # a symbolic size has no single value
    real_args = _real(args, state.known)
    real_kwargs = _real(kwargs, state.known)
    fn = getattr(real_args[0], target) if op == "call_method" else target
    try:
        value = fn(*(real_args[1:] if op == "call_method" else real_args), **real_kwargs)
    except Exception:
        return  # the graph's op raises it at run time, as eager's does
    if _keepable(value):
        state.known[result.node] = value


def known_scalar_read(state: CaptureState, op: str, target: Any, args: tuple[Any, ...]) -> Var | None:
    """``t.item()``/``t.tolist()``/``t.__index__()`` of a tensor with a known value: that value, else None."""
    if op != "call_method" or target not in _SCALAR_READS or not args:
        return None
    self = args[0]
    if not isinstance(self, Var) or self.kind != "tensor" or self.node not in state.known:
        return None
    from ptc_capture.interpreter.values import from_python

    try:
        value = getattr(state.known[self.node], target)()
    except Exception:
        return None  # (a float's __index__) left to the op's own path, which raises as eager does
    return from_python(value)


def _as_scalar(value: Any, known: dict[Any, torch.Tensor]) -> tuple[Any, bool]:
    """``value`` with each 0-d tensor Var of known value replaced by its Python number, and whether any was."""
    if isinstance(value, Var):
        if value.kind == "tensor" and value.node in known and known[value.node].dim() == 0:
            return const(known[value.node].item()), True
        if value.kind == "tuple":
            items, changed = _all_scalars(value.items, known)
            return (Var("tuple", value.value, items=tuple(items)), True) if changed else (value, False)
        if value.kind == "list":
            items, changed = _all_scalars(value.box.items, known)
            return (Var("list", box=ListBox(items)), True) if changed else (value, False)
        return value, False
    if isinstance(value, (tuple, list)):
        items, changed = _all_scalars(value, known)
        return type(value)(items), changed
    if isinstance(value, dict):
        pairs, changed = _all_scalars(list(value.values()), known)
        return dict(zip(value, pairs)), changed
    return value, False


def _all_scalars(values: Any, known: dict[Any, torch.Tensor]) -> tuple[list[Any], bool]:
    found = [_as_scalar(v, known) for v in values]
    return [v for v, _ in found], any(changed for _, changed in found)


def with_known_scalars(state: CaptureState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The arguments of an op that needs Python numbers (meta tensors cannot give them), with each
    0-d tensor of known value passed as its number, as eager's ``__index__`` reads it; None when
    there is none to replace."""
    if not state.known:
        return None
    new_args, changed = _as_scalar(args, state.known)
    new_kwargs, kw_changed = _as_scalar(kwargs, state.known)
    if not (changed or kw_changed):
        return None
    return tuple(new_args), dict(new_kwargs)
