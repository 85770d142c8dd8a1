"""The location table (``co_linetable``, PEP 657 positions): encoding per-instruction positions.

Decoding is ``code.co_positions()``. Encoding follows the entry forms of CPython's
Objects/locations.md and picks them the way CPython's assembler does, so an unmodified
round trip reproduces the original bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ptc_capture.bytecode import opcodes
from ptc_capture.bytecode.instructions import Positions

__all__ = ["encode_linetable"]

_NONE = 15
_LONG = 14
_NO_COLUMN = 13
_ONE_LINE = 10


def _write_varint(out: bytearray, value: int) -> None:
    # Little-endian 6-bit groups, 0x40 = more follows (unlike the exception table).
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _write_svarint(out: bytearray, value: int) -> None:
    _write_varint(out, ((-value) << 1) | 1 if value < 0 else value << 1)


class _Writer:
    def __init__(self, firstlineno: int) -> None:
        self.out = bytearray()
        self.lineno = firstlineno

    def header(self, code: int, length: int) -> None:
        self.out.append(0x80 | (code << 3) | (length - 1))

    def entry(self, pos: Positions | None, length: int) -> None:
        line, end_line, col, end_col = pos if pos is not None else (None, None, None, None)
        out = self.out
        if line is None:
            self.header(_NONE, length)
            return
        delta = line - self.lineno
        if col is None or end_col is None:
            if end_line is None or end_line == line:
                self.header(_NO_COLUMN, length)
                _write_svarint(out, delta)
                self.lineno = line
                return
        elif end_line == line:
            if delta == 0 and col < 80 and 0 <= end_col - col < 16:
                self.header(col // 8, length)
                out.append(((col % 8) << 4) | (end_col - col))
                return
            if 0 <= delta < 3 and col < 128 and end_col < 128:
                self.header(_ONE_LINE + delta, length)
                out.append(col)
                out.append(end_col)
                self.lineno = line
                return
        self.header(_LONG, length)
        _write_svarint(out, delta)
        _write_varint(out, (end_line if end_line is not None else line) - line)
        _write_varint(out, (col if col is not None else -1) + 1)
        _write_varint(out, (end_col if end_col is not None else -1) + 1)
        self.lineno = line

    def span(self, pos: Positions | None, units: int) -> None:
        while units > 8:
            self.entry(pos, 8)
            units -= 8
        if units:
            self.entry(pos, units)


def encode_linetable(spans: Sequence[tuple[Positions | None, int]], firstlineno: int) -> bytes:
    """Encode (positions, size in code units) per instruction into ``co_linetable`` bytes."""
    writer = _Writer(firstlineno)
    if opcodes.PY_VERSION < (3, 12):
        # 3.11's assembler writes one run per instruction.
        for pos, units in spans:
            writer.span(pos, units)
        return bytes(writer.out)
    # 3.12+ merge consecutive instructions with the same location into one run.
    current: Positions | None = None
    size = 0
    for pos, units in spans:
        norm = _normalize(pos)
        if size and norm != current:
            writer.span(current, size)
            size = 0
        current = norm
        size += units
    if size:
        writer.span(current, size)
    return bytes(writer.out)


def _normalize(pos: Positions | None) -> Positions | None:
    if pos is None or pos[0] is None:
        return None
    return pos
