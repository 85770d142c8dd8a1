"""Decoding details: EXTENDED_ARG, caches, jump targets, flags, handlers, version-specific forms."""

from __future__ import annotations

import dis
import sys
import types

import pytest

from ptc_capture.bytecode import (
    SUPPORTED,
    assemble,
    create_instruction,
    decode,
    localsplus_names,
    opcodes,
)
from ptc_capture.errors import BytecodeError

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")
PY = sys.version_info[:2]


def _long_branch_source(lines: int) -> str:
    body = "\n".join(f"        y = y + x * {i}" for i in range(lines))
    return f"def f(x):\n    y = 0\n    if x:\n{body}\n    return y\n"


def _compile_function(source: str, name: str = "f") -> types.FunctionType:
    namespace: dict[str, object] = {}
    exec(compile(source, "<test>", "exec"), namespace)
    fn = namespace[name]
    assert isinstance(fn, types.FunctionType)
    return fn


def test_extended_arg_is_folded_into_the_instruction() -> None:
    fn = _compile_function(_long_branch_source(200))
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(fn))
    insts = decode(fn.__code__)
    assert all(i.opname not in ("EXTENDED_ARG", "CACHE") for i in insts)
    jumps = [i for i in insts if i.target is not None]
    target = jumps[0].target
    assert target is not None
    assert target.opname in ("LOAD_FAST", "LOAD_FAST_CHECK")
    assert target.argval == "y"
    assert assemble(insts, fn.__code__).co_code == fn.__code__.co_code


def test_jump_targets_are_instructions_in_the_list() -> None:
    def loop(n: int) -> int:
        total = 0
        for i in range(n):
            if i % 2:
                continue
            total += i
        while total > 100:
            total -= 7
        return total

    insts = decode(loop.__code__)
    ids = {id(i) for i in insts}
    jumps = [i for i in insts if i.target is not None]
    assert len(jumps) >= 4
    assert all(id(j.target) in ids for j in jumps)
    backward = [j for j in jumps if j.target is not None and insts.index(j.target) < insts.index(j)]
    assert backward and all("BACKWARD" in j.opname for j in backward)


def test_cache_entries_are_recreated_on_assembly() -> None:
    def f(obj: object) -> object:
        return obj.attr  # type: ignore[attr-defined]

    insts = decode(f.__code__)
    load_attr = next(i for i in insts if i.opname in ("LOAD_ATTR",))
    assert opcodes.cache_entries("LOAD_ATTR") > 0
    code = assemble(insts, f.__code__)
    raw = list(dis.get_instructions(code, show_caches=True)) if PY < (3, 13) else None
    if raw is not None:
        assert sum(1 for i in raw if i.opname == "CACHE") >= opcodes.cache_entries("LOAD_ATTR")
    assert load_attr.argval == "attr"


def test_global_null_bit_is_kept_in_flags() -> None:
    def f() -> int:
        return len([1]) + abs(-1)

    insts = decode(f.__code__)
    globals_ = [i for i in insts if i.opname == "LOAD_GLOBAL"]
    assert [g.argval for g in globals_] == ["len", "abs"]
    assert all(g.flags == 1 for g in globals_)


@pytest.mark.skipif(PY != (3, 11), reason="PRECALL, KW_NAMES and LOAD_METHOD are 3.11 forms")
def test_311_call_sequence_forms() -> None:
    def f(x: list[int]) -> object:
        x.append(1)
        return sorted(x, reverse=True)

    names = [i.opname for i in decode(f.__code__)]
    assert "LOAD_METHOD" in names and "PRECALL" in names and "KW_NAMES" in names
    kw = next(i for i in decode(f.__code__) if i.opname == "KW_NAMES")
    assert kw.argval == ("reverse",)


@pytest.mark.skipif(PY < (3, 12), reason="3.12+ forms: method bit, LOAD_SUPER_ATTR, RETURN_CONST, END_FOR")
def test_312_forms() -> None:
    class Base:
        def m(self) -> int:
            return 1

    class Child(Base):
        def m(self) -> int:
            for _ in range(1):
                pass
            return super().m() + 1

    def g(x: list[int]) -> None:
        x.append(1)

    insts = decode(Child.m.__code__)
    names = [i.opname for i in insts]
    assert "LOAD_SUPER_ATTR" in names and "END_FOR" in names and "PRECALL" not in names
    method = [i for i in decode(g.__code__) if i.opname == "LOAD_ATTR"]
    assert method[0].flags == 1 and method[0].argval == "append"
    assert decode(g.__code__)[-1].opname == "RETURN_CONST"
    assert Child().m() == 2
    assert assemble(insts, Child.m.__code__).co_code == Child.m.__code__.co_code


def test_exception_handlers_are_attached() -> None:
    def f(x: int) -> int:
        try:
            return 10 // x
        except ZeroDivisionError:
            return -1

    insts = decode(f.__code__)
    covered = [i for i in insts if i.exn is not None]
    assert covered
    handler_targets = {id(i.exn.target) for i in covered if i.exn is not None}
    targets = [i for i in insts if id(i) in handler_targets]
    assert any(t.opname == "PUSH_EXC_INFO" for t in targets)
    division = next(i for i in insts if i.opname == "BINARY_OP")
    assert division.exn is not None and division.exn.target.opname == "PUSH_EXC_INFO"


def test_localsplus_names_match_cpython_index_order() -> None:
    def outer(a: int, b: int) -> object:
        c = a

        def inner() -> int:
            return a + c

        return inner

    code = outer.__code__
    names = localsplus_names(code)
    for index, name in enumerate(names):
        assert code._varname_from_oparg(index) == name  # type: ignore[attr-defined]
    inner_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    assert localsplus_names(inner_code) == list(inner_code.co_freevars)


def test_create_instruction_checks_its_arguments() -> None:
    with pytest.raises(BytecodeError, match="needs argval"):
        create_instruction("LOAD_FAST")
    with pytest.raises(BytecodeError, match="needs a target"):
        create_instruction("JUMP_FORWARD")
    with pytest.raises(ValueError, match="not an opcode"):
        create_instruction("NOT_AN_OP")
    inst = create_instruction("LOAD_CONST", argval=3)
    assert inst.opname == "LOAD_CONST" and inst.argval == 3 and inst.opcode == dis.opmap["LOAD_CONST"]
