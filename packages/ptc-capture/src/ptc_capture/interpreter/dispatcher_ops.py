"""Calls of dispatcher ops: ``torch.ops`` packets and overloads, and torch's C bindings off the allow-list.

A graph may call any op overload of an allowed namespace (``aten``, ``ptc``, or one registered with
``ptc_spec.allow_target``; a functional custom op with a meta kernel that user code calls has
its namespace registered on the way), so these calls become one node calling an ``OpOverload``:

- an overload (``torch.ops.aten.add.Tensor``) is recorded as it is;
- a packet (``torch.ops.aten.add``) is resolved to the overload eager would run, by the same
  schema matching that ``OpOverloadPacket.__call__`` uses, applied to the traced (meta) values;
- a C binding that the allow-list leaves out (private ones such as ``torch._chunk_cat``,
  ``torch._C._nn._upsample_bilinear2d_aa``) is the Python face of the aten op of the same name,
  and is recorded as that op's overload. Their Python names are not allowed in graph files (some
  private bindings touch raw memory or global state), while the aten ops behind them are.

An op whose schema mutates an argument keeps its node even when it returns nothing.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch._library.custom_ops import CustomOpDef

from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.interpreter.values import from_python, graph_call, has_tensor
from ptc_capture.variables import Var, python_value
from ptc_spec import allow_target, fallback_problem, is_allowed_target, overload_name

__all__ = ["binding_op", "custom_op_overload", "dispatcher_call", "is_dispatcher_op"]

# The objects whose functions are torch's generated C bindings, one per aten op of the same name.
_BINDING_MODULES = tuple(
    getattr(torch._C, name) for name in ("_nn", "_linalg", "_special", "_fft", "_nested", "_sparse")
)


def is_dispatcher_op(value: Any) -> bool:
    """True for an op packet or overload read from ``torch.ops``."""
    return isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def custom_op_overload(value: Any) -> Any:
    """The op overload that a ``torch.library.custom_op`` object calls, or None for anything else.

    Calling the object is calling its overload (``CustomOpDef.__call__``); reading it there needs
    no source, so an op imported inside a function (``from m import op``, unguarded) is recorded too.
    """
    if isinstance(value, CustomOpDef):
        return value._opoverload
    return None


def binding_op(value: Any) -> Any:
    """The aten op packet behind a C binding of torch (``torch._chunk_cat``), or None for anything else."""
    if not isinstance(value, types.BuiltinFunctionType):
        return None
    name = value.__name__
    owner = value.__self__
    if owner is None:
        # Functions of torch._C._VariableFunctions (torch.<name>) are static: no __self__.
        if getattr(torch._C._VariableFunctions, name, None) is not value:
            return None
    elif not any(owner is module for module in _BINDING_MODULES):
        return None
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


def dispatcher_call(frame: Frame, op: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Record a call of an op packet or overload (a graph break when it has no allowed overload or no meta kernel)."""
    overload = _resolve(op, args, kwargs) if isinstance(op, torch._ops.OpOverloadPacket) else op
    if not is_allowed_target(overload) and fallback_problem(overload) is None:
        # A custom op (torch.library) the user's code calls: functional, with a meta (fake)
        # kernel, so every stage can carry it and the backend runs it as its eager kernel.
        allow_target(overload, overload_name(overload))
    if not is_allowed_target(overload):
        raise Unsupported(
            f"op {overload.name()} is in namespace {overload.namespace!r}, which graph files do not allow;"
            " register it with ptc_spec.allow_target to capture it"
        )
    schema = overload._schema
    if not has_tensor(args) and not has_tensor(kwargs):
        if any(a.name == "device" for a in schema.arguments):
            # A factory: it runs on the meta device, so tracing neither allocates nor draws random numbers.
            return graph_call(frame, "call_function", overload, tuple(args), kwargs, factory=True)
        return _fold(overload, args, kwargs)
    return graph_call(frame, "call_function", overload, tuple(args), kwargs, mutates=schema.is_mutable)


def _fold(overload: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # An op of Python scalars (aten.add.int, aten.sym_size-style helpers) is a pure function of
    # constants: it is evaluated at trace time.
    try:
        values = [python_value(a) for a in args]
        options = {k: python_value(v) for k, v in kwargs.items()}
    except TypeError:
        raise Unsupported(f"op {overload.name()} has arguments without a Python value") from None
    try:
        result = overload(*values, **options)
    except Exception as exc:
        raise Unsupported(f"op {overload.name()} raised {type(exc).__name__} at trace time") from exc
    return from_python(result)


def _example(value: Any) -> Any:
    """The value schema matching sees for a traced argument: meta tensors for tensors."""
    if isinstance(value, Var):
        if value.kind == "tensor":
            return value.example
        if value.kind == "tuple":
            return tuple(_example(v) for v in value.items)
        if value.kind == "list":
            return [_example(v) for v in value.box.items]
        try:
            return python_value(value)
        except TypeError:
            raise Unsupported(f"a {value.kind} value cannot be an op argument") from None
    return value


def _resolve(packet: Any, args: list[Var], kwargs: dict[str, Var]) -> Any:
    """The overload of ``packet`` that eager's call would run with these arguments."""
    try:
        name = torch._C._jit_resolve_packet(
            packet._qualified_op_name, *[_example(a) for a in args], **{k: _example(v) for k, v in kwargs.items()}
        )
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unsupported(f"no overload of {packet._qualified_op_name} takes these arguments ({first})") from exc
    return getattr(packet, name)
