"""Stack-depth and liveness analyses."""

from __future__ import annotations

import pytest

from ptc_capture.bytecode import (
    SUPPORTED,
    Instruction,
    decode,
    live_locals,
    live_locals_after,
    prologue_end,
    stack_depth,
)

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")


def _first(insts: list[Instruction], opname: str, argval: object) -> Instruction:
    return next(i for i in insts if i.opname.startswith(opname) and i.argval == argval)


def straight(a, b):  # type: ignore[no-untyped-def]
    c = a + 1
    if b:
        return c
    d = b
    return a + d


def test_liveness_in_straight_line_code() -> None:
    insts = decode(straight.__code__)
    assert live_locals(insts, insts[prologue_end(insts)]) == {"a", "b"}
    store_c = _first(insts, "STORE_FAST", "c")
    assert live_locals_after(insts, store_c) == {"a", "b", "c"}
    store_d = _first(insts, "STORE_FAST", "d")
    assert live_locals_after(insts, store_d) == {"a", "d"}


def looping(n):  # type: ignore[no-untyped-def]
    acc = 0
    prev = None
    for i in range(n):
        if prev is not None:
            acc += prev
        prev = i
    unused = 5  # noqa: F841 - a dead store is what the liveness test looks for
    return acc


def test_liveness_follows_loop_back_edges() -> None:
    insts = decode(looping.__code__)
    store_i = _first(insts, "STORE_FAST", "i")
    assert live_locals_after(insts, store_i) == {"acc", "prev", "i"}
    store_unused = _first(insts, "STORE_FAST", "unused")
    assert live_locals_after(insts, store_unused) == {"acc"}
    assert "unused" not in live_locals(insts, insts[prologue_end(insts)])


def handler(x):  # type: ignore[no-untyped-def]
    fallback = x * 2
    try:
        result = 10 // x
    except ZeroDivisionError:
        return fallback
    return result


def test_liveness_flows_into_exception_handlers() -> None:
    insts = decode(handler.__code__)
    division = next(i for i in insts if i.opname == "BINARY_OP" and i.exn is not None)
    live = live_locals(insts, division)
    assert "fallback" in live
    store_result = _first(insts, "STORE_FAST", "result")
    expected = {"fallback", "result"} if store_result.exn is not None else {"result"}
    assert live_locals_after(insts, store_result) == expected


def test_stack_depth_of_small_functions_matches_cpython() -> None:
    def deep(a, b, c, d):  # type: ignore[no-untyped-def]
        return [a, (b, {c: d, **{a: [b, c, d]}}), [x * y for x in a for y in b]]

    def gen():  # type: ignore[no-untyped-def]
        try:
            yield 1
        finally:
            yield 2

    for fn in (deep, gen, straight, looping, handler):
        assert stack_depth(decode(fn.__code__)) == fn.__code__.co_stacksize
