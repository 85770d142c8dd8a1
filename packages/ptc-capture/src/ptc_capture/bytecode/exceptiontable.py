"""The exception table (``co_exceptiontable``): decoding to entries and encoding back.

Format (CPython's Objects/exception_handling_notes.txt): each entry is four varints —
start, length, target (in code units) and ``depth << 1 | lasti`` — written big-endian in
6-bit groups with 0x40 marking "more follows"; the first byte of an entry has 0x80 set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ExceptionTableEntry", "decode_exception_table", "encode_exception_table"]


@dataclass(frozen=True, slots=True)
class ExceptionTableEntry:
    """Instructions in byte offsets [start, end) jump to ``target`` with ``depth`` stack items kept."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


def _read_varint(data: Iterator[int]) -> int:
    byte = next(data)
    value = byte & 63
    while byte & 64:
        byte = next(data)
        value = (value << 6) | (byte & 63)
    return value


def decode_exception_table(table: bytes) -> list[ExceptionTableEntry]:
    """Return the entries of ``table`` with offsets in bytes."""
    entries: list[ExceptionTableEntry] = []
    data = iter(table)
    while True:
        try:
            start = _read_varint(data) * 2
        except StopIteration:
            return entries
        length = _read_varint(data) * 2
        target = _read_varint(data) * 2
        depth_lasti = _read_varint(data)
        entries.append(ExceptionTableEntry(start, start + length, target, depth_lasti >> 1, bool(depth_lasti & 1)))


def _write_varint(out: bytearray, value: int, *, first: bool = False) -> None:
    groups = [value & 63]
    value >>= 6
    while value:
        groups.append(value & 63)
        value >>= 6
    groups.reverse()
    for i, group in enumerate(groups):
        byte = group | (64 if i < len(groups) - 1 else 0)
        if first and i == 0:
            byte |= 128
        out.append(byte)


def encode_exception_table(entries: list[ExceptionTableEntry]) -> bytes:
    """Return the ``co_exceptiontable`` bytes for ``entries`` (offsets in bytes, even)."""
    out = bytearray()
    for entry in entries:
        _write_varint(out, entry.start // 2, first=True)
        _write_varint(out, (entry.end - entry.start) // 2)
        _write_varint(out, entry.target // 2)
        _write_varint(out, (entry.depth << 1) | int(entry.lasti))
    return bytes(out)
