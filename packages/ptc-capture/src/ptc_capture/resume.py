"""Graph breaks: resume functions and the native run of the instruction that broke the graph.

A resume function continues a frame at a byte offset. It is the original code object with a
short prologue in front: the frame's locals are its first parameters (so every LOAD_FAST keeps
its index), the live stack values follow as extra parameters, and the prologue pushes them,
deletes locals that were unbound at the break, and jumps to the offset. The frame hook
captures resume functions like any other frame, so the code after a break is compiled too.
"""

from __future__ import annotations

import dis
import inspect
import logging
import opcode
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ptc_capture.bytecode.exceptiontable import ExceptionTableEntry, decode_exception_table, encode_exception_table
from ptc_capture.interpreter.state import Unsupported, call_operands, pop_call_ex_operands
from ptc_capture.logs import channel

__all__ = [
    "NATIVE", "NULL_MARK", "GradModeExit", "Native", "in_try_block", "make_resume_code", "native_step",
    "resume_parameters", "strip_nulls",
]  # fmt: skip

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
_log = channel("bytecode")


class _Null:
    """Stands for CPython's NULL stack entry between the graph call and the resume function."""

    def __repr__(self) -> str:
        return "<NULL>"


NULL_MARK = _Null()

_HASFREE = frozenset(dis.hasfree)
_PAIR_OPS = ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")
_HASLOCAL_PAIR = frozenset(opcode.opmap[name] for name in _PAIR_OPS if name in opcode.opmap)
_HASLOCAL = frozenset(dis.haslocal) - _HASLOCAL_PAIR
_EXTENDED_ARG = opcode.opmap["EXTENDED_ARG"]
_CACHE = opcode.opmap.get("CACHE", 0)
# One "no location" line-table entry (code 15) covers up to 8 code units
# (https://github.com/python/cpython/blob/3.11/Objects/locations.md).
_NO_LOCATION = 0x80 | (15 << 3)


def _unit(opname: str, arg: int) -> bytes:
    return bytes((opcode.opmap[opname], arg))


class GradModeExit:
    """Stands for a grad-mode context manager's ``__exit__`` on the stack of a resumed with-block."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode

    def __call__(self, *exc_info: Any) -> None:
        torch.set_grad_enabled(self.mode)


def _is_with_handler(code: types.CodeType, target: int) -> bool:
    # A with-block's handler is PUSH_EXC_INFO; WITH_EXCEPT_START (it calls the __exit__ kept on
    # the stack), unlike a try block's; resuming inside a with keeps that stack entry.
    names = [inst.opname for inst in dis.get_instructions(code) if inst.offset >= target][:2]
    return names == ["PUSH_EXC_INFO", "WITH_EXCEPT_START"]


def in_try_block(code: types.CodeType, offset: int) -> bool:
    """Whether the instruction at byte ``offset`` is guarded by a try block's handler (with-blocks do not count)."""
    for entry in decode_exception_table(code.co_exceptiontable):
        if entry.start <= offset < entry.end and not _is_with_handler(code, entry.target):
            return True
    return False


def resume_parameters(code: types.CodeType) -> tuple[str, ...]:
    """The leading parameters of a resume function of ``code``: its locals, then its cell variables."""
    return code.co_varnames + tuple(c for c in code.co_cellvars if c not in code.co_varnames)


# Resume codes already made, per original code object: a recompile of the frame (a size that
# changed, say) reuses its resume function, so the resume function's own cache entries and
# size memory (ptc_capture.dynamic) carry over instead of starting again with a new code.
_MADE: weakref.WeakKeyDictionary[types.CodeType, dict[tuple[Any, ...], types.CodeType]] = weakref.WeakKeyDictionary()


def make_resume_code(
    code: types.CodeType, offset: int, stack_nulls: tuple[bool, ...], unbound: frozenset[str]
) -> types.CodeType:
    """Return a code object running ``code`` from byte ``offset`` (see the module docstring).

    The same arguments give the same code object.
    """
    made = _MADE.setdefault(code, {})
    key = (offset, stack_nulls, unbound)
    found = made.get(key)
    if found is None:
        found = made[key] = _make_resume_code(code, offset, stack_nulls, unbound)
    return found


def _make_resume_code(
    code: types.CodeType, offset: int, stack_nulls: tuple[bool, ...], unbound: frozenset[str]
) -> types.CodeType:
    """Return a new code object running ``code`` from byte ``offset``.

    Its parameters are ``resume_parameters(code)`` (cell variables receive their contents and
    are turned into fresh cells) followed by one per non-NULL stack entry.
    """
    if in_try_block(code, offset):
        raise Unsupported("a graph break inside a try block is not supported yet")
    params = resume_parameters(code)
    nstack = stack_nulls.count(False)
    new_varnames = params + _fresh_names(params, nstack)
    old_names = list(params) + list(code.co_freevars)
    new_names = list(new_varnames) + list(code.co_freevars)
    index_map = {i: new_names.index(name) for i, name in enumerate(old_names)}
    delta = offset // 2
    # The prologue's one-byte arguments index the new locals (a chain of resumes deep inside a
    # loop accumulates stack values as parameters): past 255 the frame runs eagerly instead.
    if delta >= 1 << 16 or len(new_names) > 255:
        raise Unsupported("function too large to resume")
    prologue = bytearray()
    # The frame prologue order CPython emits: MAKE_CELL, COPY_FREE_VARS, RESUME
    # (https://docs.python.org/3.11/library/dis.html#opcode-MAKE_CELL).
    for cell in code.co_cellvars:
        prologue += _unit("MAKE_CELL", new_names.index(cell))
    if code.co_freevars:
        prologue += _unit("COPY_FREE_VARS", len(code.co_freevars))
    prologue += _unit("RESUME", 0)
    value_index = len(params)
    for is_null in stack_nulls:
        if is_null:
            prologue += _unit("PUSH_NULL", 0)
        else:
            prologue += _unit("LOAD_FAST", value_index)
            value_index += 1
    for name in sorted(unbound):
        opname = "DELETE_DEREF" if name in code.co_cellvars else "DELETE_FAST"
        prologue += _unit(opname, new_names.index(name))
    prologue += _unit("EXTENDED_ARG", delta >> 8) + _unit("JUMP_FORWARD", delta & 0xFF)
    body = _remap_cell_indices(code.co_code, index_map)
    shift = len(prologue)
    entries = [
        ExceptionTableEntry(e.start + shift, e.end + shift, e.target + shift, e.depth, e.lasti)
        for e in decode_exception_table(code.co_exceptiontable)
    ]
    linetable = bytearray()
    units = shift // 2
    while units:
        n = min(units, 8)
        linetable.append(_NO_LOCATION | (n - 1))
        units -= n
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug(
            "resume code for %s at offset %d: %d stack values (NULL at %s), unbound %s",
            code.co_qualname, offset, nstack, [i for i, n in enumerate(stack_nulls) if n], sorted(unbound),
        )
    return code.replace(
        co_code=bytes(prologue) + body,
        co_varnames=new_varnames,
        co_argcount=len(new_varnames),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_nlocals=len(new_varnames),
        co_flags=flags,
        co_stacksize=max(code.co_stacksize, len(stack_nulls) + 1),
        co_exceptiontable=encode_exception_table(entries),
        co_linetable=bytes(linetable) + code.co_linetable,
        co_name=code.co_name,
        co_qualname=f"{code.co_qualname}.<resume at {offset}>",
    )


def _fresh_names(taken: tuple[str, ...], n: int) -> tuple[str, ...]:
    names: list[str] = []
    i = 0
    while len(names) < n:
        candidate = f"__ptc_stack{i}"
        if candidate not in taken:
            names.append(candidate)
        i += 1
    return tuple(names)


def _remap_cell_indices(raw: bytes, index_map: dict[int, int]) -> bytes:
    # Cell and free variables are addressed by their index in the frame's "fast locals"
    # (https://docs.python.org/3.11/library/dis.html#opcode-LOAD_DEREF); the resume
    # function's extra parameters move them. 3.13 also reads a free variable's cell with
    # LOAD_FAST (its LOAD_CLOSURE), so local-slot instructions are remapped too: below the
    # free variables the map is the identity.
    out = bytearray(raw)
    extended = False
    for i in range(0, len(out), 2):
        op, arg = out[i], out[i + 1]
        if op in _HASFREE or op in _HASLOCAL:
            new = index_map[arg]
            if new != arg and (extended or new > 255):
                raise Unsupported("too many cell variables to resume")
            out[i + 1] = new
        elif op in _HASLOCAL_PAIR:
            # Two 4-bit slot indices (https://docs.python.org/3.13/library/dis.html#opcode-LOAD_FAST_LOAD_FAST).
            high, low = index_map[arg >> 4], index_map[arg & 15]
            if extended or high > 15 or low > 15:
                raise Unsupported("too many cell variables to resume")
            out[i + 1] = high << 4 | low
        extended = op == _EXTENDED_ARG
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Native:
    """How to run one instruction natively: ``run(stack, inst, kw_names)`` returns the next offset."""

    run: Callable[[list[Any], dis.Instruction, tuple[str, ...], list[dis.Instruction]], int]
    layouts: Callable[[tuple[bool, ...], dis.Instruction, list[dis.Instruction]], dict[int, tuple[bool, ...]]]


NATIVE: dict[str, Native] = {}
"""opname -> native runner of a breaking instruction (breaks elsewhere run the whole frame eagerly)."""


def native(*opnames: str) -> Callable[[Native], Native]:
    """Register a Native for ``opnames``."""

    def register(entry: Native) -> Native:
        for name in opnames:
            NATIVE[name] = entry
        return entry

    return register


def _next_offset(insts: list[dis.Instruction], inst: dis.Instruction) -> int:
    for i, candidate in enumerate(insts):
        if candidate.offset == inst.offset:
            return insts[i + 1].offset
    raise KeyError(inst.offset)


def _call_target(insts: list[dis.Instruction], inst: dis.Instruction) -> int:
    # 3.11 splits a call into PRECALL + CALL; the break sits on PRECALL and resumes after CALL.
    after = _next_offset(insts, inst)
    if inst.opname == "PRECALL":
        call = next(c for c in insts if c.offset == after)
        return _next_offset(insts, call)
    return after


def _run_call(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    argc = inst.arg or 0
    values = stack[len(stack) - argc :]
    del stack[len(stack) - argc :]
    second = stack.pop()
    first = stack.pop()
    fn, args = call_operands(first, second, values, NULL_MARK)
    kwargs = {}
    if kw_names:
        split = len(args) - len(kw_names)
        kwargs = dict(zip(kw_names, args[split:]))
        args = args[:split]
    stack.append(fn(*args, **kwargs))
    return _call_target(insts, inst)


def _call_layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
    return {_call_target(insts, inst): nulls[: len(nulls) - (inst.arg or 0) - 2] + (False,)}


native("PRECALL" if not PY312 else "CALL")(Native(_run_call, _call_layouts))


def _run_call_kw(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    # 3.13's CALL_KW: CALL with the keyword names in a tuple on top of the arguments.
    return _run_call(stack, inst, tuple(stack.pop()), insts)


def _call_kw_layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
    return _call_layouts(nulls[:-1], inst, insts)


NATIVE["CALL_KW"] = Native(_run_call_kw, _call_kw_layouts)


def _ex_callable_depth(nulls: tuple[bool, ...], inst: dis.Instruction) -> int:
    """How many stack entries CALL_FUNCTION_EX takes: the callable (with the NULL beside it), the
    argument tuple and, with the low flag bit, the keyword mapping.

    The NULL sits above the callable from 3.13, below it before; before 3.13 the interpreter
    also takes a callable without one (https://docs.python.org/3.13/library/dis.html#opcode-CALL_FUNCTION_EX).
    """
    depth = 2 + ((inst.arg or 0) & 1)
    below = len(nulls) - depth - 1
    return depth + 1 if PY313 or (below >= 0 and nulls[below]) else depth


def _run_call_function_ex(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    fn, args, kwargs = pop_call_ex_operands(stack, inst.arg or 0, NULL_MARK)
    stack.append(fn(*args, **(kwargs or {})))
    return _next_offset(insts, inst)


def _call_function_ex_layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
    return {_next_offset(insts, inst): nulls[: len(nulls) - _ex_callable_depth(nulls, inst)] + (False,)}


# ``f(*args, **kwargs)``: the forwarding call of every decorator's wrapper and of layers called
# with **kwargs; without it a break inside the callee ran the whole caller eagerly.
NATIVE["CALL_FUNCTION_EX"] = Native(_run_call_function_ex, _call_function_ex_layouts)


_JUMP_TESTS: dict[str, Callable[[Any], bool]] = {
    "IF_TRUE": lambda v: bool(v),
    "IF_FALSE": lambda v: not v,
    "IF_NONE": lambda v: v is None,
    "IF_NOT_NONE": lambda v: v is not None,
}


def _jump_test(opname: str) -> Callable[[Any], bool]:
    for suffix in ("IF_NOT_NONE", "IF_NONE", "IF_TRUE", "IF_FALSE"):
        if opname.endswith(suffix):
            return _JUMP_TESTS[suffix]
    raise KeyError(opname)


def _run_pop_jump(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    value = stack.pop()
    return int(inst.argval) if _jump_test(inst.opname)(value) else _next_offset(insts, inst)


def _pop_jump_layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
    rest = nulls[:-1]
    return {int(inst.argval): rest, _next_offset(insts, inst): rest}


native(
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
)(Native(_run_pop_jump, _pop_jump_layouts))  # fmt: skip


def _run_jump_or_pop(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    if bool(stack[-1]) == inst.opname.startswith("JUMP_IF_TRUE"):
        return int(inst.argval)
    stack.pop()
    return _next_offset(insts, inst)


def _jump_or_pop_layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
    return {int(inst.argval): nulls, _next_offset(insts, inst): nulls[:-1]}


native("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")(Native(_run_jump_or_pop, _jump_or_pop_layouts))


def _binary_native(apply: Callable[[Any, Any, dis.Instruction], Any]) -> Native:
    def run(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
        b = stack.pop()
        a = stack.pop()
        stack.append(apply(a, b, inst))
        return _next_offset(insts, inst)

    def layouts(nulls: tuple[bool, ...], inst: dis.Instruction, insts: list[dis.Instruction]) -> dict[int, tuple[bool, ...]]:
        return {_next_offset(insts, inst): nulls[:-2] + (False,)}

    return Native(run, layouts)


def _binary_op(a: Any, b: Any, inst: dis.Instruction) -> Any:
    from ptc_capture.interpreter.ops import _BINARY

    symbol = dis._nb_ops[inst.arg][1]  # type: ignore[attr-defined]
    if symbol.endswith("="):
        import operator

        inplace: dict[str, Callable[[Any, Any], Any]] = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
                   "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
                   "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift,
                   ">>=": operator.irshift}  # fmt: skip
        return inplace[symbol](a, b)
    return _BINARY[symbol](a, b)


def _compare_op(a: Any, b: Any, inst: dis.Instruction) -> Any:
    from ptc_capture.interpreter.ops import _COMPARE

    return _COMPARE[str(inst.argval)](a, b)


NATIVE["BINARY_OP"] = _binary_native(_binary_op)
NATIVE["COMPARE_OP"] = _binary_native(_compare_op)
def _subscr(a: Any, b: Any, inst: dis.Instruction) -> Any:
    return a[b]


def _contains(a: Any, b: Any, inst: dis.Instruction) -> Any:
    return (a in b) != bool(inst.arg)


NATIVE["BINARY_SUBSCR"] = _binary_native(_subscr)
NATIVE["CONTAINS_OP"] = _binary_native(_contains)


def native_step(stack: list[Any], inst: dis.Instruction, kw_names: tuple[str, ...], insts: list[dis.Instruction]) -> int:
    """Run ``inst`` natively on ``stack``; return the byte offset where the frame continues."""
    return NATIVE[inst.opname].run(stack, inst, kw_names, insts)


def strip_nulls(stack: list[Any]) -> list[Any]:
    """The stack without NULL entries (the resume prologue pushes those itself)."""
    return [v for v in stack if v is not NULL_MARK]
