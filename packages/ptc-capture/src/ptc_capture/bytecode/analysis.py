"""Data-flow analyses over instruction lists: maximum stack depth and liveness of locals."""

from __future__ import annotations

import dis

from ptc_capture.bytecode import opcodes
from ptc_capture.bytecode.instructions import Instruction
from ptc_capture.errors import BytecodeError

__all__ = ["live_locals", "live_locals_after", "liveness", "stack_depth", "successors"]


def _effect(inst: Instruction, *, jump: bool) -> int:
    if inst.opname == "RETURN_GENERATOR":
        # Up to 3.12 dis says 0, but the frame resumes after it with the sent value pushed
        # (which the following POP_TOP discards).
        return 1
    if inst.opcode < dis.HAVE_ARGUMENT:
        return dis.stack_effect(inst.opcode, jump=jump)
    # Only the flag bits change the effect (e.g. LOAD_GLOBAL's NULL), never the index.
    arg = inst.arg if inst.arg is not None else inst.flags
    return dis.stack_effect(inst.opcode, arg, jump=jump)


def successors(insts: list[Instruction]) -> list[list[int]]:
    """Return, per instruction, the indices control may go to next (fall-through, jump, handler)."""
    index_of = {id(inst): i for i, inst in enumerate(insts)}
    result = []
    for i, inst in enumerate(insts):
        succ = []
        if inst.opname not in opcodes.NO_FALLTHROUGH and i + 1 < len(insts):
            succ.append(i + 1)
        if inst.target is not None:
            succ.append(index_of[id(inst.target)])
        if inst.exn is not None:
            succ.append(index_of[id(inst.exn.target)])
        result.append(succ)
    return result


# 3.13's compiler sizes the stack before folding LOAD_CONST + RETURN_VALUE into RETURN_CONST,
# so the constant still counts as pushed (`def f(): pass` has co_stacksize 1 there, 0 on 3.12).
_RETURN_CONST_PUSHES = opcodes.PY_VERSION >= (3, 13)


def stack_depth(insts: list[Instruction]) -> int:
    """Return the largest value-stack depth reached on any path, exception handlers included."""
    index_of = {id(inst): i for i, inst in enumerate(insts)}
    depths: list[int | None] = [None] * len(insts)
    work: list[int] = []
    max_depth = 0

    def visit(index: int, depth: int) -> None:
        if depth < 0:
            raise BytecodeError(f"stack underflow before instruction {index} ({insts[index].opname})")
        known = depths[index]
        if known is None:
            depths[index] = depth
            work.append(index)
        elif known != depth:
            # CPython requires every path into an instruction to agree on the depth.
            raise BytecodeError(
                f"inconsistent stack depth at instruction {index} ({insts[index].opname}): {known} vs {depth}"
            )

    visit(0, 0)
    while work:
        i = work.pop()
        depth = depths[i]
        assert depth is not None
        inst = insts[i]
        if inst.opname == "RETURN_CONST" and _RETURN_CONST_PUSHES:
            max_depth = max(max_depth, depth + 1)
        if inst.exn is not None:
            # The handler starts with the kept stack, plus lasti if pushed, plus the exception.
            handler_depth = inst.exn.depth + int(inst.exn.lasti) + 1
            max_depth = max(max_depth, handler_depth)
            visit(index_of[id(inst.exn.target)], handler_depth)
        if inst.opname not in opcodes.NO_FALLTHROUGH:
            after = depth + _effect(inst, jump=False)
            max_depth = max(max_depth, after)
            if i + 1 < len(insts):
                visit(i + 1, after)
        if inst.target is not None:
            after = depth + _effect(inst, jump=True)
            max_depth = max(max_depth, after)
            visit(index_of[id(inst.target)], after)
    return max_depth


_READS = frozenset(
    {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_DEREF", "LOAD_CLOSURE", "MAKE_CELL",
     "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF", "LOAD_FAST_LOAD_FAST"}
)
_WRITES = frozenset({"STORE_FAST", "DELETE_FAST", "STORE_FAST_MAYBE_NULL", "STORE_FAST_STORE_FAST"})


def _use_def(inst: Instruction) -> tuple[set[str], set[str]]:
    name = inst.opname
    values = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
    if name in _READS:
        return set(values), set()
    if name in _WRITES:
        return set(), set(values)
    if name == "STORE_FAST_LOAD_FAST":  # 3.13: store the first, then load the second
        stored, loaded = inst.argval
        return ({loaded} if loaded != stored else set()), {stored}
    # Cell writes (STORE_DEREF, DELETE_DEREF) do not kill: another closure may read the cell.
    return set(), set()


def liveness(insts: list[Instruction]) -> list[frozenset[str]]:
    """Return, per instruction, the locals that may be read before being written from there on."""
    succ = successors(insts)
    uses_defs = [_use_def(inst) for inst in insts]
    live_in: list[frozenset[str]] = [frozenset()] * len(insts)
    changed = True
    while changed:
        changed = False
        for i in range(len(insts) - 1, -1, -1):
            live_out: set[str] = set()
            for s in succ[i]:
                live_out |= live_in[s]
            use, define = uses_defs[i]
            new = frozenset(use | (live_out - define))
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    return live_in


def live_locals(insts: list[Instruction], inst: Instruction) -> frozenset[str]:
    """Return the locals live just before ``inst`` runs (read later before any write)."""
    for i, candidate in enumerate(insts):
        if candidate is inst:
            return liveness(insts)[i]
    raise BytecodeError(f"{inst!r} is not in the instruction list")


def live_locals_after(insts: list[Instruction], inst: Instruction) -> frozenset[str]:
    """Return the locals live just after ``inst`` (on any path it may continue to)."""
    live = liveness(insts)
    for i, candidate in enumerate(insts):
        if candidate is inst:
            result: set[str] = set()
            for s in successors(insts)[i]:
                result |= live[s]
            return frozenset(result)
    raise BytecodeError(f"{inst!r} is not in the instruction list")
