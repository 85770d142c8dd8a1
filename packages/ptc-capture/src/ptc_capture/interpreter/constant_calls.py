"""Calls whose answer the trace takes as a constant: ``functools.lru_cache``/``cache`` wrappers,
and functions marked as having a constant result.

A function wrapped by ``functools.lru_cache`` answers each tuple of arguments once per process
(until ``cache_clear``): called natively here on the trace's Python-valued arguments, it answers
as eager's call does, filling the cache as eager's first call would (an object argument's
identity is guarded: the answer is that object's). Libraries mark probes whose
answer is fixed for the process (transformers' ``is_torch_greater_or_equal``, an install check)
with the attribute torch's ``assume_constant_result`` decorator sets, which torch.compile folds the
same way. Where an argument has no Python value, or the answer is not plain data, the function the
cache wraps is traced instead, as torch.compile does.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from ptc_capture.guards import Guard
from ptc_capture.interpreter.attrs import plain_data
from ptc_capture.interpreter.calls import call, inline_function
from ptc_capture.interpreter.state import Frame, Raised
from ptc_capture.interpreter.values import from_python
from ptc_capture.variables import Var, python_value

__all__ = ["constant_call", "is_constant_call"]

_LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))
_CONSTANT_MARK = "_dynamo_marked_constant"
"""The attribute torch's ``assume_constant_result`` decorator sets (libraries set it without importing torch)."""


def is_constant_call(value: Any) -> bool:
    """True for a ``functools.lru_cache`` wrapper or a Python function marked as having a constant result."""
    if type(value) is _LRU_WRAPPER:
        return True
    return isinstance(value, types.FunctionType) and getattr(value, _CONSTANT_MARK, False) is True


def _fixed(var: Var, objects: list[Var]) -> bool:
    """Whether ``var`` can be the same argument on every call the trace serves: a constant, or an
    object read from the frame (added to ``objects``, whose identities the caller guards: a cache
    answers per object, and another one of the same type may answer otherwise)."""
    if var.kind == "const":
        return True
    if var.kind == "tuple":
        return all(_fixed(v, objects) for v in var.items)
    if var.kind in ("object", "module", "function", "callable") and var.source is not None:
        objects.append(var)
        return True
    return False


def constant_call(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace a call of a cached or constant-result function: its answer now, or its body traced."""
    value = fn.value
    objects: list[Var] = []
    if all(_fixed(v, objects) for v in [*args, *kwargs.values()]):
        for obj in objects:
            assert obj.source is not None
            frame.state.guards.add(Guard("id", obj.source, obj.value))
        try:
            result = value(*[python_value(a) for a in args], **{k: python_value(v) for k, v in kwargs.items()})
        except Exception as exc:
            raise Raised(f"{getattr(value, '__qualname__', value)} raised {type(exc).__name__} at trace time", exc) from exc
        if plain_data(result):
            return from_python(result)
    if type(value) is _LRU_WRAPPER:
        source = fn.source.attr("__wrapped__") if fn.source is not None else None
        return call(frame, frame.state.wrap(value.__wrapped__, source), args, kwargs)
    return inline_function(frame, value, fn.source, args, kwargs)
