"""Exception-table and location-table codecs."""

from __future__ import annotations

import types

import pytest

from ptc_capture.bytecode import (
    SUPPORTED,
    ExceptionTableEntry,
    decode,
    decode_exception_table,
    encode_exception_table,
    encode_linetable,
)

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")


def test_exception_table_roundtrips_on_stdlib(stdlib_codes: list[types.CodeType]) -> None:
    with_handlers = 0
    for code in stdlib_codes:
        entries = decode_exception_table(code.co_exceptiontable)
        with_handlers += bool(entries)
        assert encode_exception_table(entries) == code.co_exceptiontable
        for entry in entries:
            assert 0 <= entry.start < entry.end <= len(code.co_code)
            assert entry.target % 2 == 0 and entry.depth >= 0
    assert with_handlers > 20


def test_exception_table_varints_use_continuation_bits() -> None:
    entries = [ExceptionTableEntry(start=2, end=2 + 2 * 5000, target=2 * 70, depth=3, lasti=True)]
    data = encode_exception_table(entries)
    assert data[0] & 0x80 and not data[1] & 0x80
    assert decode_exception_table(data) == entries


def test_linetable_encoder_matches_cpython_on_stdlib(stdlib_codes: list[types.CodeType]) -> None:
    for code in stdlib_codes:
        insts = decode(code)
        offsets = [i.offset or 0 for i in insts] + [len(code.co_code)]
        spans = [(inst.positions, (offsets[k + 1] - offsets[k]) // 2) for k, inst in enumerate(insts)]
        assert encode_linetable(spans, code.co_firstlineno) == code.co_linetable, code.co_qualname


def test_linetable_long_and_missing_locations_roundtrip() -> None:
    def f() -> None:
        pass

    spans = [((5, 5, 1, 4), 1), (None, 2), ((900, 903, 200, 3), 12), ((901, 901, None, None), 1)]
    code = f.__code__.replace(co_linetable=encode_linetable(spans, 3), co_code=bytes(2 * 16), co_firstlineno=3)
    positions = list(code.co_positions())
    assert positions[0] == (5, 5, 1, 4)
    assert positions[1] == (None, None, None, None)
    assert positions[3:15] == [(900, 903, 200, 3)] * 12
    assert positions[15] == (901, 901, None, None)
