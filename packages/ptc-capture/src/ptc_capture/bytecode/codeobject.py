"""Assembling an instruction list back into a code object.

The assembler resolves argvals to indices (extending co_consts/co_names/co_varnames as
needed), picks EXTENDED_ARG prefixes and jump directions until offsets are stable, inserts
the zeroed CACHE entries, and rebuilds the exception table, location table and stack size.
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from types import CodeType
from typing import Any

from ptc_capture.bytecode import opcodes
from ptc_capture.bytecode.analysis import stack_depth
from ptc_capture.bytecode.exceptiontable import ExceptionTableEntry, encode_exception_table
from ptc_capture.bytecode.instructions import Instruction, decode
from ptc_capture.bytecode.linetable import encode_linetable
from ptc_capture.errors import BytecodeError

__all__ = ["assemble", "roundtrip", "transform"]

_EXTENDED_ARG = opcodes.opcode_of("EXTENDED_ARG")
_CACHE = opcodes.opcode_of("CACHE")


def _ext_count(arg: int) -> int:
    count = 0
    while arg > 0xFF:
        arg >>= 8
        count += 1
    return count


class _Tables:
    """co_consts / co_names / co_varnames under construction, seeded from the template code."""

    def __init__(self, code: CodeType, cellvars: tuple[str, ...], freevars: tuple[str, ...]) -> None:
        self.consts: list[Any] = list(code.co_consts)
        self.names: list[str] = list(code.co_names)
        self.varnames: list[str] = list(code.co_varnames)
        self.cellvars = cellvars
        self.freevars = freevars
        self._name_index = {name: i for i, name in enumerate(self.names)}

    def const_index(self, value: Any, hint: int | None) -> int:
        # Identity first: 1, 1.0 and True are equal but are different constants.
        if hint is not None and hint < len(self.consts) and self.consts[hint] is value:
            return hint
        for i, const in enumerate(self.consts):
            if const is value:
                return i
        for i, const in enumerate(self.consts):
            if type(const) is type(value) and _same_const(const, value):
                return i
        self.consts.append(value)
        return len(self.consts) - 1

    def name_index(self, name: str) -> int:
        index = self._name_index.get(name)
        if index is None:
            index = len(self.names)
            self.names.append(name)
            self._name_index[name] = index
        return index

    def localsplus(self) -> list[str]:
        names = list(self.varnames)
        names.extend(c for c in self.cellvars if c not in self.varnames)
        names.extend(self.freevars)
        return names

    def local_index(self, name: str, *, allow_new: bool) -> int:
        names = self.localsplus()
        if name in names:
            return names.index(name)
        if not allow_new:
            raise BytecodeError(f"{name!r} is not a cell or free variable of the code being assembled")
        self.varnames.append(name)
        return self.localsplus().index(name)


def _same_const(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and repr(a) == repr(b)
    except Exception:  # noqa: BLE001 - exotic constants compare only by identity
        return False


def _resolve_arg(inst: Instruction, tables: _Tables) -> int:
    name = inst.opname
    bits = opcodes.flag_bits(name)
    if name in opcodes.JUMP_OPS:
        return inst.arg or 0  # set by the offset fixpoint
    if name == "COMPARE_OP":
        index = dis.cmp_op.index(inst.argval) if bits else inst.arg or 0
        return (index << bits) | inst.flags if bits else index
    if name in opcodes.CONST_OPS:
        return tables.const_index(inst.argval, inst.arg)
    if name in opcodes.NAME_OPS:
        return (tables.name_index(inst.argval) << bits) | inst.flags
    if name in opcodes.LOCAL_OPS or name in opcodes.FREE_OPS:
        allow_new = name in opcodes.LOCAL_OPS and name != "LOAD_CLOSURE"
        if isinstance(inst.argval, tuple):  # 3.13 superinstructions pack two 4-bit indices
            first, second = (tables.local_index(v, allow_new=allow_new) for v in inst.argval)
            if first > 15 or second > 15:
                raise BytecodeError(f"{name} can only address locals 0-15")
            return (first << 4) | second
        return tables.local_index(inst.argval, allow_new=allow_new)
    if inst.arg is not None:
        return inst.arg
    if isinstance(inst.argval, int):
        return inst.argval
    return 0


def _has_arg(inst: Instruction) -> bool:
    return inst.opcode >= dis.HAVE_ARGUMENT


def _layout(insts: list[Instruction]) -> list[int]:
    """Give every jump its oparg and direction; return the byte offset of each instruction."""
    cache_base = opcodes.PY_VERSION >= (3, 12)
    index_of = {id(inst): i for i, inst in enumerate(insts)}
    for _ in range(64):
        offsets = []
        position = 0
        for inst in insts:
            offsets.append(position)
            size = 1 + opcodes.cache_entries(inst.opname)
            if _has_arg(inst):
                size += _ext_count(inst.arg or 0)
            position += 2 * size
        changed = False
        for i, inst in enumerate(insts):
            if inst.target is None:
                continue
            target_index = index_of.get(id(inst.target))
            if target_index is None:
                raise BytecodeError(f"{inst.opname} at index {i} jumps to an instruction not in the list")
            op_offset = offsets[i] + 2 * _ext_count(inst.arg or 0)
            base = op_offset + 2 + (2 * opcodes.cache_entries(inst.opname) if cache_base else 0)
            delta = (offsets[target_index] - base) // 2
            backward = inst.opname in opcodes.BACKWARD_JUMPS
            if (delta < 0) != backward and not (delta == 0 and not backward):
                flipped = opcodes.reverse_jump(inst.opname)
                if flipped is None:
                    direction = "backward" if delta < 0 else "forward"
                    raise BytecodeError(f"{inst.opname} at index {i} cannot jump {direction}")
                inst.opname = flipped
                inst.opcode = opcodes.opcode_of(flipped)
                changed = True
                continue
            arg = -delta if backward else delta
            if arg != inst.arg:
                inst.arg = arg
                changed = True
        if not changed:
            return offsets
    raise BytecodeError("jump offsets did not converge")


def _emit(insts: list[Instruction]) -> bytes:
    out = bytearray()
    for inst in insts:
        arg = inst.arg or 0 if _has_arg(inst) else 0
        for shift in range(_ext_count(arg), 0, -1):
            out += bytes((_EXTENDED_ARG, (arg >> (8 * shift)) & 0xFF))
        out += bytes((inst.opcode, arg & 0xFF))
        out += bytes((_CACHE, 0)) * opcodes.cache_entries(inst.opname)
    return bytes(out)


def _exception_entries(insts: list[Instruction], offsets: list[int], end: int) -> list[ExceptionTableEntry]:
    index_of = {id(inst): i for i, inst in enumerate(insts)}
    entries = []
    current = None
    start = 0
    for i, inst in enumerate(insts):
        if inst.exn != current:
            if current is not None:
                entries.append(
                    ExceptionTableEntry(start, offsets[i], offsets[index_of[id(current.target)]], current.depth, current.lasti)
                )
            current = inst.exn
            start = offsets[i]
    if current is not None:
        entries.append(ExceptionTableEntry(start, end, offsets[index_of[id(current.target)]], current.depth, current.lasti))
    return entries


def assemble(insts: list[Instruction], template: CodeType, **replace: Any) -> CodeType:
    """Return ``template.replace(...)`` running ``insts``; extra keywords go to ``CodeType.replace``."""
    if not insts:
        raise BytecodeError("cannot assemble an empty instruction list")
    tables = _Tables(
        template,
        tuple(replace.get("co_cellvars", template.co_cellvars)),
        tuple(replace.get("co_freevars", template.co_freevars)),
    )
    if "co_varnames" in replace:
        tables.varnames = list(replace["co_varnames"])
    for inst in insts:
        if inst.target is None and _has_arg(inst):
            inst.arg = _resolve_arg(inst, tables)
    offsets = _layout(insts)
    co_code = _emit(insts)
    spans = []
    for i, inst in enumerate(insts):
        end = offsets[i + 1] if i + 1 < len(insts) else len(co_code)
        spans.append((inst.positions, (end - offsets[i]) // 2))
    firstlineno = replace.get("co_firstlineno", template.co_firstlineno)
    fields: dict[str, Any] = {
        "co_code": co_code,
        "co_consts": tuple(tables.consts),
        "co_names": tuple(tables.names),
        "co_varnames": tuple(tables.varnames),
        "co_nlocals": len(tables.varnames),
        "co_exceptiontable": encode_exception_table(_exception_entries(insts, offsets, len(co_code))),
        "co_linetable": encode_linetable(spans, firstlineno),
        "co_stacksize": stack_depth(insts),
    }
    for key, value in replace.items():
        fields.setdefault(key, value)
    try:
        return template.replace(**fields)
    except (TypeError, ValueError) as exc:
        raise BytecodeError(f"assembled code for {template.co_qualname} is invalid: {exc}") from exc


def roundtrip(code: CodeType) -> CodeType:
    """Decode and re-assemble ``code`` unchanged (nested code objects in co_consts too)."""

    def nested(insts: list[Instruction]) -> list[Instruction]:
        for inst in insts:
            if inst.opname in opcodes.CONST_OPS and isinstance(inst.argval, CodeType):
                inst.argval = roundtrip(inst.argval)
        return insts

    return transform(code, nested)


def transform(code: CodeType, edit: Callable[[list[Instruction]], list[Instruction] | None]) -> CodeType:
    """Decode ``code``, let ``edit`` change the list (in place or by returning a new one), assemble."""
    insts = decode(code)
    edited = edit(insts)
    return assemble(insts if edited is None else edited, code)
