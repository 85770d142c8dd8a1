"""Round trips of every function in json, dataclasses and collections through decode -> assemble."""

from __future__ import annotations

import collections
import dataclasses
import json
import json.scanner
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import stdlib_modules

from ptc_capture.bytecode import SUPPORTED, assemble, decode, roundtrip, stack_depth

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")


def test_unmodified_roundtrip_reproduces_code_bytes_exactly(stdlib_codes: list[types.CodeType]) -> None:
    mismatched = []
    for code in stdlib_codes:
        new = assemble(decode(code), code)
        same = (
            new.co_code == code.co_code
            and new.co_exceptiontable == code.co_exceptiontable
            and new.co_linetable == code.co_linetable
            and new.co_consts == code.co_consts
            and new.co_names == code.co_names
            and new.co_stacksize == code.co_stacksize
        )
        if not same:
            mismatched.append(code.co_qualname)
    assert mismatched == []


def test_roundtrip_preserves_positions(stdlib_codes: list[types.CodeType]) -> None:
    for code in stdlib_codes:
        new = assemble(decode(code), code)
        assert list(new.co_positions()) == list(code.co_positions()), code.co_qualname


def test_stack_depth_matches_cpython(stdlib_codes: list[types.CodeType]) -> None:
    wrong = [(c.co_qualname, stack_depth(decode(c)), c.co_stacksize) for c in stdlib_codes
             if stack_depth(decode(c)) != c.co_stacksize]
    assert wrong == []


def _functions_of(module: types.ModuleType) -> Iterator[tuple[Any, str, types.FunctionType]]:
    """(owner, attribute, function) for module-level functions and methods of module classes."""
    for name, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            yield module, name, value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in list(vars(value).items()):
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if isinstance(member, property):
                    for fn in (member.fget, member.fset, member.fdel):
                        if isinstance(fn, types.FunctionType):
                            yield value, attr, fn
                elif isinstance(member, types.FunctionType):
                    yield value, attr, member


@pytest.fixture()
def roundtripped_stdlib() -> Iterator[int]:
    """Swap every function's __code__ for its round-tripped copy; restore afterwards."""
    originals: list[tuple[types.FunctionType, types.CodeType]] = []
    try:
        for module in stdlib_modules():
            for _, _, fn in _functions_of(module):
                if any(fn is f for f, _ in originals):
                    continue
                originals.append((fn, fn.__code__))
                new = roundtrip(fn.__code__)
                assert new is not fn.__code__
                fn.__code__ = new
        yield len(originals)
    finally:
        for fn, code in originals:
            fn.__code__ = code


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)


def _workloads() -> list[tuple[str, Callable[[], Any]]]:
    nested = {"a": [1, 2.5, None, True, {"b": "é\n\"q\"", "c": []}], "z": {"k": [[], {}, "x" * 3]}}

    def json_dumps() -> Any:
        # iterencode(obj) without one-shot runs the pure-Python encoder on every version
        # (3.13's C encoder also handles indent).
        encoder = json.JSONEncoder(indent=2, sort_keys=True)
        return [
            "".join(encoder.iterencode(nested)),
            json.dumps(nested, indent=2, sort_keys=True),
            json.dumps(nested, separators=(",", ":"), ensure_ascii=False),
            json.dumps([1, {"x": float("inf")}], allow_nan=True),
        ]

    def json_loads() -> Any:
        text = json.dumps(nested, indent=1)
        decoder = json.JSONDecoder(object_pairs_hook=collections.OrderedDict)
        decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
        return [json.loads(text), decoder.decode(text), list(decoder.decode(text).items())]

    def json_errors() -> Any:
        try:
            json.loads('{"a": [1, 2,, 3]}')
        except json.JSONDecodeError as exc:
            return (exc.msg, exc.lineno, exc.colno)
        return None

    def dataclass_ops() -> Any:
        dynamic = dataclasses.make_dataclass("Dyn", [("a", int), ("b", str, dataclasses.field(default="b"))])
        p = Point(1, 2, ["t"])
        q = dataclasses.replace(p, y=5)
        frozen: Any = dataclasses.dataclass(frozen=True, order=True)(type("F", (), {"__annotations__": {"v": int}}))
        return [
            dataclasses.asdict(p),
            dataclasses.astuple(q),
            repr(q),
            p == Point(1, 2, ["t"]),
            [f.name for f in dataclasses.fields(Point)],
            repr(dynamic(3)),
            frozen(1) < frozen(2),
            hash(frozen(4)) == hash(frozen(4)),
        ]

    def collection_ops() -> Any:
        od = collections.OrderedDict.fromkeys("abcde")
        od.move_to_end("b")
        od.popitem(last=False)
        counter = collections.Counter("abracadabra")
        counter.update({"z": 3})
        counter.subtract("aaa")
        dq = collections.deque(range(10), maxlen=7)
        dq.rotate(3)
        Pair = collections.namedtuple("Pair", ["left", "right"], defaults=[0])
        pair = Pair(1)._replace(right=9)
        chain = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
        child = chain.new_child({"c": 4})
        user = collections.UserDict(a=1)
        user["b"] = 2
        ulist = collections.UserList([3, 1, 2])
        ulist.sort()
        ustr = collections.UserString("hello").upper()
        return [
            list(od.items()),
            counter.most_common(3),
            sorted((counter + collections.Counter("zz")).items()),
            sorted((counter & collections.Counter("abc")).elements()),
            list(dq),
            pair,
            pair._asdict(),
            dict(child),
            list(chain.parents.maps),
            dict(user),
            list(ulist),
            str(ustr),
        ]

    return [
        ("json_dumps", json_dumps),
        ("json_loads", json_loads),
        ("json_errors", json_errors),
        ("dataclass_ops", dataclass_ops),
        ("collection_ops", collection_ops),
    ]


@pytest.mark.parametrize("name,workload", _workloads(), ids=[n for n, _ in _workloads()])
def test_roundtripped_stdlib_runs_workloads_like_original(name: str, workload: Callable[[], Any], request: Any) -> None:
    expected = workload()
    swapped = request.getfixturevalue("roundtripped_stdlib")
    assert swapped > 100
    assert workload() == expected


_ORIGINAL_ITERENCODE = json.encoder._make_iterencode.__code__  # type: ignore[attr-defined]


def test_swapped_functions_really_run_the_roundtripped_code(roundtripped_stdlib: int) -> None:
    seen = []

    def trace(frame: types.FrameType, event: str, arg: Any) -> None:
        if frame.f_code.co_name == "_make_iterencode":
            seen.append(frame.f_code)

    import sys

    sys.setprofile(trace)
    try:
        encoded = "".join(json.JSONEncoder(indent=1).iterencode({"a": [1]}))
        assert encoded == '{\n "a": [\n  1\n ]\n}'
    finally:
        sys.setprofile(None)
    assert seen and all(code is not _ORIGINAL_ITERENCODE for code in seen)
    assert seen[0] is json.encoder._make_iterencode.__code__  # type: ignore[attr-defined]
