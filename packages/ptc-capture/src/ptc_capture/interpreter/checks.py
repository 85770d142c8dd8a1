"""Checks on tensor values (``torch._check_tensor_all``, ``torch._assert_async``), run after the graph.

Eager reads the condition back and raises RuntimeError (``_check_tensor_all`` with the user's
message) when an element is False; transformers' ``torch_compilable_check`` calls it while
compiling. A check returns nothing, so as a graph node it would be folded away or dropped as
dead code by a later stage; and the trace cannot read the value. So the call itself is
deferred (see ptc_capture.deferred) and always run by the runner right after the graph, on the
condition the graph computed, whatever the backend. A tensor write traced after it ends the
graph first (the deferred rule), so no write eager would not have reached happens before the
check raises.
"""

from __future__ import annotations

import torch

from ptc_capture.interpreter.calls import BUILTINS
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.interpreter.values import defer_call
from ptc_capture.variables import Var, const

__all__: list[str] = []


def _check_after_graph(frame: Frame, fn: Var, cond: Var, message: Var | None) -> Var:
    name = getattr(fn.value, "__name__", "_check_tensor_all")
    target = fn.value
    if cond.kind != "tensor" or cond.meta is None:
        error = TypeError(f"cond must be a tensor, but got {cond.kind}")
        raise Raised(f"torch.{name}() of a {cond.kind} (TypeError in eager)", error)
    if cond.meta.dtype != torch.bool:
        error = TypeError(f"cond tensor must have dtype torch.bool, but got {cond.meta.dtype}")
        raise Raised(f"torch.{name}() of a {cond.meta.dtype} tensor (TypeError in eager)", error)
    if message is not None and not (message.kind == "const" and message.value is None):
        # The runner passes the message on, so it must be a value the runner can rebuild.
        if message.kind not in ("function", "callable", "const", "closure"):
            raise Unsupported(f"torch.{name}() with a {message.kind} as its message")
    args = (cond,) if message is None else (cond, message)
    call = defer_call(frame, target, args, "it reads the values of its condition")
    frame.state.side_effects.call_after(call)
    return const(None)


def _check_tensor_all(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # torch._check_tensor_all(cond, message=None)
    if not args or len(args) > 2 or set(kwargs) - {"message"}:
        raise Unsupported("torch._check_tensor_all() with other arguments than (cond, message)")
    message = args[1] if len(args) > 1 else kwargs.get("message")
    return _check_after_graph(frame, fn, args[0], message)


def _assert_async(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # torch._assert_async(tensor) and (tensor, message): raises when the one element is zero.
    if not args or len(args) > 2 or kwargs or args[0].kind != "tensor":
        raise Unsupported("torch._assert_async() with other arguments than (tensor, message)")
    if len(args) > 1 and args[1].kind != "const":
        raise Unsupported("torch._assert_async() with a message that is not a constant")
    call = defer_call(frame, fn.value, tuple(args), "it reads the value of its condition")
    frame.state.side_effects.call_after(call)
    return const(None)


_CHECK_TENSOR_ALL = getattr(torch, "_check_tensor_all", None)
if _CHECK_TENSOR_ALL is not None:
    BUILTINS[id(_CHECK_TENSOR_ALL)] = _check_tensor_all
BUILTINS[id(torch._assert_async)] = _assert_async
