"""Instruction objects: decoding a code object into an editable list, and creating new ones.

Jump targets and exception handlers refer to other :class:`Instruction` objects rather than
offsets, so a list can be edited freely; :func:`ptc_capture.bytecode.assemble` turns it back
into bytes. EXTENDED_ARG prefixes and inline CACHE entries never appear in the list: the
decoder folds them into the instruction they belong to and the assembler re-creates them.
"""

from __future__ import annotations

import dis
from dataclasses import dataclass
from types import CodeType
from typing import Any

from ptc_capture.bytecode import opcodes
from ptc_capture.bytecode.exceptiontable import decode_exception_table
from ptc_capture.errors import BytecodeError

__all__ = [
    "ExnHandler",
    "Instruction",
    "Positions",
    "create_instruction",
    "decode",
    "insert_instructions",
    "localsplus_names",
]

Positions = tuple[int | None, int | None, int | None, int | None]
"""(lineno, end_lineno, col_offset, end_col_offset), as ``code.co_positions()`` yields them."""

_UNSET: Any = object()


@dataclass(eq=False, slots=True)
class Instruction:
    """One logical instruction; mutable on purpose, because code generation edits lists in place.

    Compared and hashed by identity: two LOAD_FAST x at different places are different.
    ``flags`` holds the low oparg bits that sit beside an index (LOAD_GLOBAL's push-NULL bit,
    3.12's LOAD_ATTR method bit, COMPARE_OP's branch mask); ``arg`` is the encoded oparg of a
    decoded instruction and is recomputed by the assembler for const/name/local/jump opcodes.
    """

    opname: str
    opcode: int
    arg: int | None = None
    argval: Any = None
    offset: int | None = None
    positions: Positions | None = None
    target: Instruction | None = None
    exn: ExnHandler | None = None
    flags: int = 0

    @property
    def lineno(self) -> int | None:
        """The source line of the instruction, or None."""
        return self.positions[0] if self.positions else None

    def __repr__(self) -> str:
        if self.target is not None:
            detail = f"-> {self.target.opname}@{self.target.offset}"
        else:
            detail = repr(self.argval) if self.argval is not None else ""
        return f"<{self.opname} {detail} @{self.offset}>"


@dataclass(frozen=True, slots=True)
class ExnHandler:
    """The exception handler covering an instruction: where to jump, stack depth, push lasti."""

    target: Instruction
    depth: int
    lasti: bool

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ExnHandler)
            and self.target is other.target
            and self.depth == other.depth
            and self.lasti == other.lasti
        )

    def __hash__(self) -> int:
        return hash((id(self.target), self.depth, self.lasti))


def localsplus_names(code: CodeType) -> list[str]:
    """Return the names of the fast-locals array: locals, then cell-only variables, then free variables."""
    names = list(code.co_varnames)
    seen = set(names)
    for name in code.co_cellvars:
        if name not in seen:
            names.append(name)
            seen.add(name)
    names.extend(code.co_freevars)
    return names


def _code_unit_positions(code: CodeType) -> list[Positions]:
    return list(code.co_positions())


def decode(code: CodeType) -> list[Instruction]:
    """Decode ``code`` into instructions with resolved jump targets, positions and handlers."""
    if not opcodes.SUPPORTED:
        raise BytecodeError(
            f"bytecode decoding supports CPython 3.11 to 3.13, not {opcodes.PY_VERSION}"
        )
    positions = _code_unit_positions(code)
    result: list[Instruction] = []
    by_offset: dict[int, Instruction] = {}
    jump_offsets: list[tuple[Instruction, int]] = []
    start: int | None = None
    for raw in dis.get_instructions(code):
        if raw.opname == "EXTENDED_ARG":
            if start is None:
                start = raw.offset
            continue
        if raw.opname == "CACHE":
            continue
        logical = raw.offset if start is None else start
        start = None
        inst = Instruction(
            opname=raw.opname,
            opcode=raw.opcode,
            arg=raw.arg,
            argval=raw.argval,
            offset=logical,
            positions=positions[logical // 2] if logical // 2 < len(positions) else None,
        )
        if raw.opname in opcodes.CONST_OPS and raw.arg is not None:
            # 3.11's dis leaves KW_NAMES' argval as the raw index.
            inst.argval = code.co_consts[raw.arg]
        bits = opcodes.flag_bits(raw.opname)
        if bits and raw.arg is not None:
            inst.flags = raw.arg & ((1 << bits) - 1)
        if raw.opname in opcodes.JUMP_OPS:
            jump_offsets.append((inst, int(raw.argval)))
            inst.argval = None
        by_offset[logical] = inst
        result.append(inst)
    for inst, target_offset in jump_offsets:
        target = by_offset.get(target_offset)
        if target is None:
            raise BytecodeError(f"jump from offset {inst.offset} to {target_offset}, which starts no instruction")
        inst.target = target
    _attach_handlers(code, result, by_offset)
    return result


def _attach_handlers(code: CodeType, insts: list[Instruction], by_offset: dict[int, Instruction]) -> None:
    for entry in decode_exception_table(code.co_exceptiontable):
        target = by_offset.get(entry.target)
        if target is None:
            raise BytecodeError(f"exception handler at offset {entry.target} starts no instruction")
        handler = ExnHandler(target, entry.depth, entry.lasti)
        for inst in insts:
            assert inst.offset is not None
            if entry.start <= inst.offset < entry.end:
                inst.exn = handler


def create_instruction(
    opname: str,
    *,
    arg: int | None = None,
    argval: Any = _UNSET,
    target: Instruction | None = None,
    flags: int = 0,
    positions: Positions | None = None,
) -> Instruction:
    """Return a new instruction; give names/constants/locals as ``argval`` and jumps as ``target``."""
    op = opcodes.opcode_of(opname)
    if op >= 256:
        raise BytecodeError(f"{opname} is a pseudo-instruction and cannot be emitted")
    needs_value = opname in opcodes.CONST_OPS or opname in opcodes.NAME_OPS
    needs_value = needs_value or opname in opcodes.LOCAL_OPS or opname in opcodes.FREE_OPS
    if needs_value and argval is _UNSET:
        raise BytecodeError(f"{opname} needs argval (the constant or name it refers to)")
    if opname in opcodes.JUMP_OPS and target is None:
        raise BytecodeError(f"{opname} needs a target instruction")
    if argval is _UNSET:
        argval = arg
    if opname == "COMPARE_OP" and not flags and opcodes.flag_bits(opname):
        flags = _COMPARE_MASKS.get(argval, 0)
    return Instruction(
        opname=opname, opcode=op, arg=arg, argval=argval, target=target, flags=flags, positions=positions
    )


# 3.12+ COMPARE_OP carries a mask of the outcomes (<, >, ==) that make the branch taken; this
# is what CPython's compiler emits for each comparison (Python/compile.c, compare_masks).
_COMPARE_MASKS: dict[str, int] = {"<": 2, "<=": 10, "==": 8, "!=": 6, ">": 4, ">=": 12}


def insert_instructions(insts: list[Instruction], index: int, new: list[Instruction]) -> None:
    """Insert ``new`` before ``insts[index]``; inside a try block they join its handler.

    Jumps that targeted ``insts[index]`` still target it, i.e. they skip the new code.
    """
    if 0 < index < len(insts):
        before, after = insts[index - 1].exn, insts[index].exn
        handler = after if before == after else None
    else:
        handler = None
    for inst in new:
        if inst.exn is None:
            inst.exn = handler
    insts[index:index] = new

