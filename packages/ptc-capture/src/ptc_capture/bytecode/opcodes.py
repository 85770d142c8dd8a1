"""Facts about the running interpreter's opcodes that the rest of the bytecode layer looks up.

Everything version-specific about instruction *encoding* lives here, as tables, so that the
decoder, assembler and analyses stay version-neutral.
"""

from __future__ import annotations

import dis
import opcode
import sys

__all__ = [
    "BACKWARD_JUMPS",
    "CONST_OPS",
    "FREE_OPS",
    "JUMP_OPS",
    "LOCAL_OPS",
    "NAME_OPS",
    "NO_FALLTHROUGH",
    "PY_VERSION",
    "SUPPORTED",
    "cache_entries",
    "flag_bits",
    "opcode_of",
    "reverse_jump",
]

PY_VERSION: tuple[int, int] = sys.version_info[:2]
SUPPORTED = (3, 11) <= PY_VERSION <= (3, 13)

_all_opmap: dict[str, int] = dict(opcode.opmap)


def opcode_of(opname: str) -> int:
    """Return the opcode number of ``opname`` on this interpreter."""
    try:
        return _all_opmap[opname]
    except KeyError:
        raise ValueError(f"{opname} is not an opcode of Python {PY_VERSION[0]}.{PY_VERSION[1]}") from None


def _names(numbers: list[int]) -> frozenset[str]:
    return frozenset(opcode.opname[n] for n in numbers if n < len(opcode.opname))


CONST_OPS = _names(dis.hasconst)
NAME_OPS = _names(dis.hasname)
LOCAL_OPS = _names(dis.haslocal)
FREE_OPS = _names(dis.hasfree)
JUMP_OPS = _names(dis.hasjrel) | _names(dis.hasjabs)
# KW_NAMES indexes co_consts but 3.11/3.12's dis lists it only under hasconst in some builds.
if "KW_NAMES" in _all_opmap:
    CONST_OPS = CONST_OPS | {"KW_NAMES"}

BACKWARD_JUMPS = frozenset(name for name in JUMP_OPS if "BACKWARD" in name)

# Instructions after which control never falls through to the next one.
NO_FALLTHROUGH = frozenset(
    name
    for name in (
        "RETURN_VALUE",
        "RETURN_CONST",
        "RAISE_VARARGS",
        "RERAISE",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "JUMP",
        "JUMP_NO_INTERRUPT",
    )
    if name in _all_opmap
)


def cache_entries(opname: str) -> int:
    """Return how many inline CACHE code units follow ``opname``."""
    table = opcode._inline_cache_entries  # type: ignore[attr-defined]
    if isinstance(table, dict):  # 3.13 keys it by name
        return int(table.get(opname, 0))
    return int(table[_all_opmap[opname]])


# Low bits of the oparg that carry flags next to a name/const index:
#   LOAD_GLOBAL: bit 0 pushes NULL (3.11+); LOAD_ATTR: bit 0 loads a method (3.12+);
#   LOAD_SUPER_ATTR: bits 0-1 (3.12+); COMPARE_OP: branch mask (3.12: 4 bits, 3.13: 5 bits).
_FLAG_BITS: dict[str, int] = {"LOAD_GLOBAL": 1}
if PY_VERSION >= (3, 12):
    _FLAG_BITS.update({"LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2, "COMPARE_OP": 4})
if PY_VERSION >= (3, 13):
    _FLAG_BITS["COMPARE_OP"] = 5


def flag_bits(opname: str) -> int:
    """Return how many low oparg bits of ``opname`` are flags rather than the index."""
    return _FLAG_BITS.get(opname, 0)


# 3.11 has forward and backward variants of each conditional jump; the assembler swaps a
# variant whose target ended up on the other side.
_DIRECTION_PAIRS = [
    ("JUMP_FORWARD", "JUMP_BACKWARD"),
    ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE"),
    ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"),
    ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE"),
    ("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"),
]
_REVERSE: dict[str, str] = {}
for _fwd, _bwd in _DIRECTION_PAIRS:
    if _fwd in _all_opmap and _bwd in _all_opmap:
        _REVERSE[_fwd] = _bwd
        _REVERSE[_bwd] = _fwd


def reverse_jump(opname: str) -> str | None:
    """Return the same jump in the other direction, or None if there is none."""
    return _REVERSE.get(opname)
