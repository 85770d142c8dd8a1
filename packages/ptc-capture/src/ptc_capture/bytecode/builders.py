"""Builders for instruction sequences whose shape differs between CPython versions.

Code generators (resume functions, calls into compiled graphs, stack restoration) use these
instead of spelling version-specific opcodes: e.g. a call is ``PRECALL n; CALL n`` on 3.11,
``CALL n`` on 3.12 and ``CALL n`` / ``CALL_KW n`` on 3.13, and the NULL that accompanies a
callable sits below it up to 3.12 but above it on 3.13.
"""

from __future__ import annotations

from typing import Any

from ptc_capture.bytecode import opcodes
from ptc_capture.bytecode.instructions import Instruction, create_instruction

__all__ = [
    "create_build_tuple",
    "create_call",
    "create_call_function",
    "create_call_method",
    "create_copy",
    "create_jump",
    "create_load_attr",
    "create_load_const",
    "create_load_fast",
    "create_load_global",
    "create_load_method",
    "create_push_null",
    "create_return_value",
    "create_store_fast",
    "create_swap",
    "prologue_end",
]

_NULL_ABOVE_CALLABLE = opcodes.PY_VERSION >= (3, 13)


def create_load_const(value: Any) -> Instruction:
    """Return ``LOAD_CONST value``."""
    return create_instruction("LOAD_CONST", argval=value)


def create_load_fast(name: str) -> Instruction:
    """Return ``LOAD_FAST name`` (the name is added to co_varnames if new)."""
    return create_instruction("LOAD_FAST", argval=name)


def create_store_fast(name: str) -> Instruction:
    """Return ``STORE_FAST name`` (the name is added to co_varnames if new)."""
    return create_instruction("STORE_FAST", argval=name)


def create_load_global(name: str, *, push_null: bool = False) -> Instruction:
    """Return ``LOAD_GLOBAL name``, also pushing the NULL a following call needs if ``push_null``."""
    return create_instruction("LOAD_GLOBAL", argval=name, flags=int(push_null))


def create_load_attr(name: str) -> Instruction:
    """Return an attribute load that replaces TOS with ``TOS.name``."""
    return create_instruction("LOAD_ATTR", argval=name)


def create_load_method(name: str) -> Instruction:
    """Return the method load that prepares ``TOS.name(...)`` for :func:`create_call_method`."""
    if opcodes.PY_VERSION < (3, 12):
        return create_instruction("LOAD_METHOD", argval=name)
    return create_instruction("LOAD_ATTR", argval=name, flags=1)


def create_push_null() -> Instruction:
    """Return ``PUSH_NULL``."""
    return create_instruction("PUSH_NULL")


def create_call(nargs: int, kw_names: tuple[str, ...] = ()) -> list[Instruction]:
    """Return the instructions calling a callable (with its NULL slot) and ``nargs`` arguments on the stack.

    ``nargs`` counts keyword arguments too; their names are ``kw_names``, matching the last
    ``len(kw_names)`` values pushed.
    """
    insts: list[Instruction] = []
    if opcodes.PY_VERSION >= (3, 13):
        if kw_names:
            insts.append(create_load_const(tuple(kw_names)))
            insts.append(create_instruction("CALL_KW", arg=nargs))
        else:
            insts.append(create_instruction("CALL", arg=nargs))
        return insts
    if kw_names:
        insts.append(create_instruction("KW_NAMES", argval=tuple(kw_names)))
    if opcodes.PY_VERSION < (3, 12):
        insts.append(create_instruction("PRECALL", arg=nargs))
    insts.append(create_instruction("CALL", arg=nargs))
    return insts


def create_call_method(nargs: int) -> list[Instruction]:
    """Return the call that follows :func:`create_load_method` and ``nargs`` pushed arguments."""
    return create_call(nargs)


def create_call_function(
    load_callable: list[Instruction],
    args: list[list[Instruction]],
    kw_names: tuple[str, ...] = (),
) -> list[Instruction]:
    """Return a full call: push the callable and its NULL in this version's order, each argument, then call."""
    null = [create_push_null()]
    insts = load_callable + null if _NULL_ABOVE_CALLABLE else null + load_callable
    for arg in args:
        insts.extend(arg)
    insts.extend(create_call(len(args), kw_names))
    return insts


def create_jump(target: Instruction, opname: str = "JUMP_FORWARD") -> Instruction:
    """Return a jump to ``target``; the assembler turns it around if the target lies behind.

    ``opname`` may use the 3.12 spelling of conditional jumps (``POP_JUMP_IF_FALSE``); on 3.11
    it becomes the ``POP_JUMP_FORWARD_IF_FALSE`` form.
    """
    if opname not in opcodes.JUMP_OPS and opname.startswith("POP_JUMP_IF_"):
        opname = opname.replace("POP_JUMP_IF_", "POP_JUMP_FORWARD_IF_")
    return create_instruction(opname, target=target)


def create_swap(n: int) -> Instruction:
    """Return ``SWAP n`` (exchange TOS with the n-th item)."""
    return create_instruction("SWAP", arg=n)


def create_copy(n: int) -> Instruction:
    """Return ``COPY n`` (push a copy of the n-th item)."""
    return create_instruction("COPY", arg=n)


def create_build_tuple(n: int) -> Instruction:
    """Return ``BUILD_TUPLE n``."""
    return create_instruction("BUILD_TUPLE", arg=n)


def create_return_value() -> Instruction:
    """Return ``RETURN_VALUE``."""
    return create_instruction("RETURN_VALUE")


def prologue_end(insts: list[Instruction]) -> int:
    """Return the index just after the function prologue (the first RESUME), where new code may go."""
    for i, inst in enumerate(insts):
        if inst.opname == "RESUME":
            return i + 1
    return 0
