"""Predicates on torch's global state, folded at trace time under a guard.

Library code asks the dispatcher about modes around the call (``torch._C._get_tracing_state()``
is None outside ``torch.jit.trace``; ``torch._C._are_functorch_transforms_active()`` is False
outside ``vmap``/``grad``) and takes a Python branch on the answer, as
``torch.autograd.Function.apply`` and transformers' Bloom do. Such a C function takes no
arguments and sees no tensor, so its answer is a constant of the trace: it is read once and a
guard calls it again on every call (one C call), so that code run under another mode misses the
cache instead of reusing the other branch.
"""

from __future__ import annotations

from typing import Any

import torch

from ptc_capture.guards import Guard
from ptc_capture.interpreter.calls import BUILTINS
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.variables import Var, const

__all__ = ["STATE_PREDICATES"]

STATE_PREDICATES: tuple[Any, ...] = tuple(
    fn
    for fn in (
        getattr(torch._C, "_get_tracing_state", None),
        getattr(torch._C, "_are_functorch_transforms_active", None),
    )
    if fn is not None
)
"""The C predicates folded: argument-free, and answering None or a bool outside their mode."""


def _fold_predicate(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    predicate = fn.value
    name = getattr(predicate, "__name__", "a torch._C predicate")
    if args or kwargs:
        raise Unsupported(f"torch._C.{name} takes no arguments (TypeError in eager)")
    value = predicate()
    if value is not None and not isinstance(value, bool):
        # Inside the mode the answer is an object (a JIT tracing state) the trace cannot hold.
        raise Unsupported(f"torch._C.{name}() returned a {type(value).__name__} (inside its mode)")
    frame.state.guards.add(Guard("state_call", None, (predicate, value)))
    return const(value)


for _predicate in STATE_PREDICATES:
    BUILTINS[id(_predicate)] = _fold_predicate
