"""Editing instruction lists and assembling them into code that runs correctly."""

from __future__ import annotations

import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

import pytest

from ptc_capture.bytecode import (
    SUPPORTED,
    Instruction,
    assemble,
    create_call_function,
    create_call_method,
    create_instruction,
    create_jump,
    create_load_const,
    create_load_fast,
    create_load_global,
    create_load_method,
    create_return_value,
    create_store_fast,
    decode,
    insert_instructions,
    prologue_end,
    transform,
)
from ptc_capture.errors import BytecodeError

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")

RECORDED: list[Any] = []


def _record(*args: Any, **kwargs: Any) -> str:
    RECORDED.append((args, kwargs))
    return "recorded"


def _with_code(fn: Callable[..., Any], code: types.CodeType) -> Any:
    """A copy of ``fn`` running ``code``."""
    assert isinstance(fn, types.FunctionType)
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _record_call(*values: Any, kw_names: tuple[str, ...] = ()) -> list[Instruction]:
    args = [[create_load_const(v)] for v in values]
    call = create_call_function([create_load_global("_record")], args, kw_names)
    return [*call, create_instruction("POP_TOP")]


def busy(n: int) -> tuple[int, list[str]]:
    total = 0
    errors = []
    for i in range(n):
        try:
            if i % 3 == 0:
                raise ValueError(f"bad {i}")
            total += 10 // (i % 4)
        except ValueError as exc:
            errors.append(str(exc))
        except ZeroDivisionError:
            total -= 1
        finally:
            total += 1
    while total > 50:
        total //= 2
    return total, errors


def test_call_inserted_at_function_start_runs_once_and_keeps_semantics() -> None:
    RECORDED.clear()

    def edit(insts: list[Instruction]) -> None:
        insert_instructions(insts, prologue_end(insts), _record_call("enter", 7))

    patched = _with_code(busy, transform(busy.__code__, edit))
    for n in (0, 1, 5, 13, 40):
        assert patched(n) == busy(n)
    assert RECORDED == [(("enter", 7), {})] * 5


def test_call_inserted_inside_loop_and_try_blocks_runs_each_iteration() -> None:
    RECORDED.clear()

    def edit(insts: list[Instruction]) -> None:
        # Before each `total += 1` of the finally blocks and before each raise.
        for index in reversed(range(len(insts))):
            inst = insts[index]
            if inst.opname == "RAISE_VARARGS":
                insert_instructions(insts, index, _record_call("raise"))

    patched = _with_code(busy, transform(busy.__code__, edit))
    assert patched(10) == busy(10)
    assert RECORDED == [(("raise",), {})] * 4


def test_keyword_call_builder_passes_keywords() -> None:
    RECORDED.clear()

    def f() -> int:
        return 1

    def edit(insts: list[Instruction]) -> None:
        call = create_call_function(
            [create_load_global("_record")],
            [[create_load_const(1)], [create_load_const("v")]],
            kw_names=("key",),
        )
        insert_instructions(insts, prologue_end(insts), [*call, create_instruction("POP_TOP")])

    assert _with_code(f, transform(f.__code__, edit))() == 1
    assert RECORDED == [((1,), {"key": "v"})]


def test_method_call_builder() -> None:
    def f(items: list[int]) -> list[int]:
        return items

    def edit(insts: list[Instruction]) -> None:
        call = [
            create_load_fast("items"),
            create_load_method("append"),
            create_load_const(42),
            *create_call_method(1),
            create_instruction("POP_TOP"),
        ]
        insert_instructions(insts, prologue_end(insts), call)

    assert _with_code(f, transform(f.__code__, edit))([1]) == [1, 42]


def test_function_built_from_scratch_with_backward_jump() -> None:
    def template(n: int) -> int:
        return n

    insts = decode(template.__code__)
    start = insts[: prologue_end(insts)]
    check = create_load_fast("i")
    end = create_load_fast("i")
    body = [
        create_load_const(0),
        create_store_fast("i"),
        check,
        create_load_fast("n"),
        create_instruction("COMPARE_OP", argval="<"),
        create_jump(end, "POP_JUMP_IF_FALSE"),
        create_load_fast("i"),
        create_load_const(3),
        create_instruction("BINARY_OP", arg=13),  # +=
        create_store_fast("i"),
        create_jump(check),  # the assembler turns this into JUMP_BACKWARD
        end,
        create_return_value(),
    ]
    code = assemble(start + body, template.__code__)
    assert "i" in code.co_varnames and code.co_nlocals == 2
    fn = _with_code(template, code)
    assert [fn(n) for n in (0, 1, 7, 9)] == [0, 3, 9, 9]
    assert any(i.opname == "JUMP_BACKWARD" for i in decode(code))


def test_jump_growing_past_255_gets_extended_arg() -> None:
    lines = "\n".join(f"        y = y + {i}" for i in range(60))
    namespace: dict[str, Any] = {}
    exec(f"def f(x):\n    y = 0\n    if x:\n{lines}\n    return y\n", namespace)
    fn = namespace["f"]

    def edit(insts: list[Instruction]) -> None:
        branch = next(i for i in insts if i.target is not None)
        where = insts.index(branch) + 1
        padding = [create_load_const(0), create_instruction("POP_TOP")] * 150
        insert_instructions(insts, where, padding)

    code = transform(fn.__code__, edit)
    assert b"".join(bytes((code.co_code[i],)) for i in range(0, len(code.co_code), 2)).count(
        bytes((__import__("dis").opmap["EXTENDED_ARG"],))
    ) >= 1
    patched = _with_code(fn, code)
    assert patched(1) == fn(1) and patched(0) == fn(0) == 0


def test_cells_and_free_variables_survive_assembly() -> None:
    def outer(a: int) -> Any:
        b = a * 2

        def inner(c: int) -> int:
            nonlocal b
            b += c
            return a + b

        return inner

    inner = outer(1)
    new = _with_code(inner, transform(inner.__code__, lambda insts: None))
    assert new(3) == 1 + 5 and new(1) == 1 + 6  # shares the cell with the original closure
    outer_new = _with_code(outer, transform(outer.__code__, lambda insts: None))
    assert outer_new(2)(1) == 2 + 5


def test_traceback_lines_are_preserved() -> None:
    def fails(x: int) -> int:
        y = x + 1
        return y // 0

    patched = _with_code(fails, transform(fails.__code__, lambda insts: None))
    with pytest.raises(ZeroDivisionError) as info:
        patched(1)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert frame.lineno == fails.__code__.co_firstlineno + 2
    assert frame.line == "return y // 0"


def test_unknown_free_variable_is_rejected() -> None:
    def f() -> None:
        return None

    insts = decode(f.__code__)
    insts.insert(prologue_end(insts), create_instruction("LOAD_DEREF", argval="nope"))
    with pytest.raises(BytecodeError, match="not a cell or free variable"):
        assemble(insts, f.__code__)


def test_conditional_backward_jump_is_rejected_where_unsupported() -> None:
    def f(x: int) -> int:
        return x

    insts = decode(f.__code__)
    at = prologue_end(insts)
    load = create_load_fast("x")
    jump = create_jump(load, "POP_JUMP_IF_NONE")
    insts[at:at] = [load, jump]
    if sys.version_info >= (3, 12):
        with pytest.raises(BytecodeError, match="cannot jump backward"):
            assemble(insts, f.__code__)
    else:
        code = assemble(insts, f.__code__)
        assert any(i.opname == "POP_JUMP_BACKWARD_IF_NONE" for i in decode(code))
        assert _with_code(f, code)(5) == 5


def test_inconsistent_stack_depth_is_reported() -> None:
    def f(x: int) -> int:
        return x

    insts = decode(f.__code__)
    at = prologue_end(insts)
    first = insts[at]
    insts[at + 1 : at + 1] = [create_load_fast("x"), create_jump(first, "JUMP_FORWARD")]
    with pytest.raises(BytecodeError, match="inconsistent stack depth"):
        assemble(insts, f.__code__)
