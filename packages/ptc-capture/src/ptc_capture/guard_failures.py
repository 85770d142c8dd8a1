"""Why a cache entry's guards fail for a frame: the sentence the ``recompiles`` log prints.

Only the recompile path runs this (the per-call guard function just answers True/False): it
walks an entry's guards in order, reads each value again, and names the first difference
(``size of x dim 1 changed 16 -> 17``, ``guard s0 <= 512 failed with s0 = 600``).
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ptc_capture.dynamic import source_label
from ptc_capture.guards import Guard, ShapeGuards, Source, compile_guards, describe_condition, source_expr
from ptc_spec import size_symbol

__all__ = ["first_failure"]


class _Missing(Exception):
    """A guarded value can no longer be read (a missing key or attribute)."""


def _read(source: Source, scope: dict[str, Any]) -> Any:
    try:
        return eval(source_expr(source), dict(scope))
    except Exception as exc:
        raise _Missing(f"{source_label(source)} cannot be read ({type(exc).__name__})") from exc


def _value(expr: Any, values: dict[sympy.Symbol, int]) -> Any:
    if isinstance(expr, int):
        return expr
    found = expr.xreplace({s: sympy.Integer(values[s]) for s in expr.free_symbols if s in values})
    return int(found) if found.is_Integer else found


def _tensor_failure(guard: Guard, value: Any, values: dict[sympy.Symbol, int], where: dict[sympy.Symbol, str]) -> str | None:
    assert guard.source is not None
    name = source_label(guard.source)
    ty, dtype, device, shape, stride, requires_grad = guard.expected
    if type(value) is not ty:
        return f"{name} is a {type(value).__name__}, expected a {ty.__name__}"
    if value.dtype != dtype:
        return f"dtype of {name} is {value.dtype}, expected {dtype}"
    if value.device != device and not (device.index is None and value.device.type == device.type):
        return f"{name} is on {value.device}, expected {device}"
    if value.requires_grad != requires_grad:
        return f"requires_grad of {name} is {value.requires_grad}, expected {requires_grad}"
    if value.dim() != len(shape):
        return f"{name} has {value.dim()} dims, expected {len(shape)}"
    for dim, (size, actual) in enumerate(zip(shape, value.shape)):
        if isinstance(size, sympy.Symbol) and size not in values:
            values[size] = actual
            where[size] = f"{name}.size({dim})"
            continue
        expected = _value(size, values)
        if expected != actual:
            return f"size of {name} dim {dim} changed {expected} -> {actual}"
    expected_stride = tuple(_value(s, values) for s in stride)
    if tuple(value.stride()) != expected_stride:
        return f"stride of {name} is {tuple(value.stride())}, expected {expected_stride}"
    return None


def _shape_failure(shape: ShapeGuards, values: dict[sympy.Symbol, int], where: dict[sympy.Symbol, str]) -> str | None:
    for condition in shape.exprs:
        if sympy.sympify(condition.xreplace({s: sympy.Integer(v) for s, v in values.items()})) is sympy.true:
            continue
        symbols = sorted(condition.free_symbols, key=str)
        bindings = ", ".join(f"{s} = {values.get(s, '?')}" for s in symbols)
        sources = ", ".join(f"{s} is {where[s]}" for s in symbols if s in where)
        return f"guard {describe_condition(condition)} failed with {bindings}" + (f" ({sources})" if sources else "")
    return None


def first_failure(guards: list[Guard], f_locals: dict[str, Any], f_globals: dict[str, Any], f_builtins: dict[str, Any], closure: Any) -> str | None:
    """The first of ``guards`` that fails for this frame, as one sentence (None when all hold)."""
    scope = {"L": f_locals, "G": f_globals, "B": f_builtins, "C": closure}
    values: dict[sympy.Symbol, int] = {}
    where: dict[sympy.Symbol, str] = {}
    tensors: dict[int, str] = {}
    aliased: str | None = None
    for guard in guards:
        try:
            if guard.kind == "tensor" and guard.source is not None:
                value = _read(guard.source, scope)
                if not isinstance(value, torch.Tensor):
                    return f"{source_label(guard.source)} is a {type(value).__name__}, expected a tensor"
                found = _tensor_failure(guard, value, values, where)
                label = source_label(guard.source)
                if id(value) in tensors and aliased is None:
                    aliased = f"{tensors[id(value)]} and {label} are one tensor; the entry was traced with distinct ones"
                tensors.setdefault(id(value), label)
            elif guard.kind == "distinct_tensors":
                found = aliased
            elif guard.kind == "int_symbol" and guard.source is not None:
                value = _read(guard.source, scope)
                if type(value) is not int:
                    return f"{source_label(guard.source)} is a {type(value).__name__}, expected an int"
                sym = size_symbol(guard.expected)
                values[sym] = value
                where[sym] = source_label(guard.source)
                found = None
            elif guard.kind == "const" and guard.source is not None:
                value = _read(guard.source, scope)
                holds = compile_guards([guard])(f_locals, f_globals, f_builtins, closure)
                found = None if holds else f"{source_label(guard.source)} is {value!r}, expected {guard.expected!r}"
            elif guard.kind == "shape_env":
                found = _shape_failure(guard.expected, values, where)
            else:
                holds = compile_guards([guard])(f_locals, f_globals, f_builtins, closure)
                found = None if holds else f"guard failed: {guard.describe()}"
        except _Missing as exc:
            return str(exc)
        if found is not None:
            return found
    return None
