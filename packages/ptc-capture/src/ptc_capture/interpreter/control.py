"""Handlers for jumps, loops (unrolled), iterators, context managers and raise."""

from __future__ import annotations

import dis
from collections.abc import Callable

import torch

from ptc_capture.autocast_state import AutocastRegion
from ptc_capture.interpreter.autocast import enter_region
from ptc_capture.interpreter.loop import handler
from ptc_capture.interpreter.state import PY313, Frame, Raised, Unsupported, iarg
from ptc_capture.interpreter.values import as_const, get_iter, iter_next, sequence_items, truth
from ptc_capture.variables import Var, const
from ptc_spec import META_KEY


@handler("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
def _jump(frame: Frame, inst: dis.Instruction) -> None:
    frame.jump(inst.argval)


def _is_none(var: Var) -> bool:
    return var.kind == "const" and var.value is None


# POP_JUMP_* names differ between 3.11 (FORWARD/BACKWARD variants) and 3.12; the test is the same.
_POP_JUMP_TESTS: dict[str, Callable[[Var, Frame], bool]] = {
    "IF_TRUE": lambda v, f: truth(v, f),
    "IF_FALSE": lambda v, f: not truth(v, f),
    "IF_NONE": lambda v, f: _is_none(v),
    "IF_NOT_NONE": lambda v, f: not _is_none(v),
}


def _pop_jump_test(opname: str) -> str:
    for suffix in ("IF_NOT_NONE", "IF_NONE", "IF_TRUE", "IF_FALSE"):
        if opname.endswith(suffix):
            return suffix
    raise KeyError(opname)


@handler(
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
)  # fmt: skip
def _pop_jump(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.stack[-1]
    taken = _POP_JUMP_TESTS[_pop_jump_test(inst.opname)](value, frame)
    frame.pop()
    if taken:
        frame.jump(inst.argval)


@handler("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
def _jump_or_pop(frame: Frame, inst: dis.Instruction) -> None:
    value = truth(frame.stack[-1], frame)
    if value == inst.opname.startswith("JUMP_IF_TRUE"):
        frame.jump(inst.argval)
    else:
        frame.pop()


@handler("GET_ITER")
def _get_iter(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(get_iter(frame, frame.pop()))


@handler("FOR_ITER")
def _for_iter(frame: Frame, inst: dis.Instruction) -> None:
    iterator = frame.stack[-1]
    if iterator.kind != "iter":
        raise Unsupported(f"FOR_ITER over a {iterator.kind}")
    item = iter_next(frame, iterator)
    if item is not None:
        frame.push(item)
        return
    frame.pop()
    frame.jump(inst.argval)
    # 3.12 jumps to END_FOR and skips it, having popped the iterator itself
    # (https://docs.python.org/3.12/library/dis.html#opcode-FOR_ITER); 3.13 skips the
    # POP_TOP after END_FOR too (END_FOR + POP_TOP pop what 3.12's END_FOR pops).
    if frame.instructions[frame.ip].opname == "END_FOR":
        frame.ip += 2 if PY313 else 1


@handler("BEFORE_WITH")
def _before_with(frame: Frame, inst: dis.Instruction) -> None:
    manager = frame.pop()
    if manager.kind == "userobj":
        # A context manager made while tracing (contextlib.nullcontext(), a user class): its
        # __enter__ is inlined now and the bound __exit__ is what the block's end calls.
        from ptc_capture.interpreter.attrs import generic_userobj_attr
        from ptc_capture.interpreter.objects import call_slot

        exit_method = generic_userobj_attr(frame, manager, "__exit__")  # special lookup: past __getattribute__
        entered = call_slot(frame, manager, "__enter__", [])
        frame.push(exit_method)
        frame.push(entered)
        return
    if manager.kind != "ctx":
        raise Unsupported(f"with-statement over a {manager.kind} ({type(manager.value).__name__})")
    if isinstance(manager.value, AutocastRegion):
        frame.push(enter_region(frame, manager.value))
        frame.push(manager)  # torch.autocast.__enter__ returns the manager itself
        return
    previous = frame.state.grad_enabled
    set_grad_mode(frame, bool(manager.value))
    frame.push(Var("ctx_exit", previous))
    frame.push(const(None))


def set_grad_mode(frame: Frame, enabled: bool) -> None:
    """Switch grad mode for the ops traced next, and in the graph at run time."""
    if frame.state.grad_enabled == enabled:
        return
    frame.state.grad_enabled = enabled
    graph = frame.state.graph.graph
    node = graph.call_function(torch._C._set_grad_enabled, (enabled,))
    node.meta[META_KEY] = None


# A handler's bytecode, entered by interpreter/exceptions.catch with the exception (a const) on
# the stack. The exception being handled before it (sys.exc_info()) is not modelled: None.
@handler("PUSH_EXC_INFO")
def _push_exc_info(frame: Frame, inst: dis.Instruction) -> None:
    raised = frame.pop()
    frame.push(const(None))
    frame.push(raised)


@handler("CHECK_EXC_MATCH")
def _check_exc_match(frame: Frame, inst: dis.Instruction) -> None:
    kind = as_const(frame.pop(), "an except clause's class")
    raised = frame.stack[-1]
    if raised.kind != "const" or not isinstance(raised.value, BaseException):
        raise Unsupported("an except clause over an exception the trace does not hold")
    try:
        frame.push(const(isinstance(raised.value, kind)))
    except TypeError as exc:
        raise Unsupported("an except clause naming something other than exception classes") from exc


@handler("POP_EXCEPT")
def _pop_except(frame: Frame, inst: dis.Instruction) -> None:
    frame.pop()


@handler("RERAISE")
def _reraise(frame: Frame, inst: dis.Instruction) -> None:
    raised = frame.pop()
    if iarg(inst):
        frame.pop()  # the raising instruction's offset (f_lasti)
    if raised.kind != "const" or not isinstance(raised.value, BaseException):
        raise Unsupported("RERAISE: exceptions raised in the traced region run eagerly")
    raise Raised(f"the traced code re-raises {type(raised.value).__name__}", raised.value)


@handler("SETUP_FINALLY")
def _handle_exception(frame: Frame, inst: dis.Instruction) -> None:
    raise Unsupported(f"{inst.opname}: exceptions raised in the traced region run eagerly")


@handler("RAISE_VARARGS")
def _raise(frame: Frame, inst: dis.Instruction) -> None:
    # `raise E` / `raise E from cause`: the exception is the deeper of the (one or two) operands.
    count = iarg(inst)
    raised = frame.stack[-count] if count else None
    value = raised.value if raised is not None and raised.kind in ("const", "callable", "object") else None
    if isinstance(value, type) and issubclass(value, BaseException):
        value = value.__new__(value)
    if isinstance(value, BaseException):
        raise Raised(f"the traced code raises {type(value).__name__}", value)
    raise Unsupported(f"{inst.opname}: exceptions raised in the traced region run eagerly")


@handler("RETURN_GENERATOR")
def _return_generator(frame: Frame, inst: dis.Instruction) -> None:
    # The generator object this pushes is popped at once by the POP_TOP that follows.
    if frame.yielded is None:
        raise Unsupported("RETURN_GENERATOR outside an inlined generator")
    frame.push(const(None))


@handler("GET_YIELD_FROM_ITER")
def _yield_from(frame: Frame, inst: dis.Instruction) -> None:
    # ``yield from it`` in an inlined generator: it is run to completion like the generator
    # (its items join the yielded ones) and the SEND loop is skipped. The loop's value (the
    # subgenerator's return value) must be discarded, as a statement does.
    if frame.yielded is None:
        raise Unsupported("yield from outside an inlined generator")
    load, send = frame.instructions[frame.ip], frame.instructions[frame.ip + 1]
    if load.opname != "LOAD_CONST" or send.opname != "SEND":
        raise Unsupported(f"yield from compiled as {load.opname}, {send.opname}")
    after = frame.index_of[send.argval]
    if frame.instructions[after].opname == "END_SEND":
        after += 1
    if frame.instructions[after].opname != "POP_TOP":
        raise Unsupported("the value of a yield from expression (a subgenerator's return value)")
    source = frame.pop()
    frame.yielded.extend(sequence_items(frame, source))
    frame.ip = after
    frame.push(const(None))


@handler("YIELD_VALUE")
def _yield_value(frame: Frame, inst: dis.Instruction) -> None:
    if frame.yielded is None:
        raise Unsupported("yield outside an inlined generator")
    frame.yielded.append(frame.pop())
    frame.push(const(None))
