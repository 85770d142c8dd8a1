"""The PEP 523 frame hook: who is hooked, replacement code, threads, and per-code extras."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ptc_capture import framehook
from ptc_capture.bytecode import (
    SUPPORTED,
    Instruction,
    create_instruction,
    create_load_const,
    create_load_fast,
    prologue_end,
    transform,
)

pytestmark = pytest.mark.skipif(not framehook.available, reason=f"frame hook unavailable: {framehook.unavailable_reason}")


class Recorder:
    """A callback recording the code objects it sees and optionally replacing some."""

    def __init__(self, replacements: dict[types.CodeType, types.CodeType] | None = None) -> None:
        self.seen: list[types.CodeType] = []
        self.states: list[Any] = []
        self.replacements = replacements or {}

    def __call__(self, state: Any) -> types.CodeType | None:
        self.seen.append(state.f_code)
        self.states.append(state)
        return self.replacements.get(state.f_code)

    def names(self) -> list[str]:
        """Names of the hooked frames of this test file.

        Other non-stdlib frames may legitimately be hooked, e.g. an audit hook a site package
        installs (the GPU machine's image has one, ``_audit_fork_safety``); they are not ours.
        """
        return [c.co_name for c in self.seen if c.co_filename == __file__]

    def stdlib_names(self) -> list[str]:
        """Names of hooked frames from the standard library (there must be none)."""
        stdlib = os.path.dirname(os.__file__)
        return [c.co_name for c in self.seen if c.co_filename.startswith(stdlib) and "site-packages" not in c.co_filename]


def add_one(x: int) -> int:
    return x + 1


def caller(x: int) -> int:
    return add_one(x) * 2


def test_callback_sees_user_frames_with_their_arguments() -> None:
    rec = Recorder()
    with framehook.callback_enabled(rec):
        assert caller(3) == 8
    assert rec.names() == ["caller", "add_one"]
    assert rec.states[0].f_locals == {"x": 3}
    assert rec.states[0].f_globals is globals()
    assert rec.states[0].function is caller
    assert not framehook.is_installed()


def test_callback_is_not_called_after_disable() -> None:
    rec = Recorder()
    with framehook.callback_enabled(rec):
        pass
    caller(1)
    assert rec.seen == [] and framehook.get_callback() is None


def test_stdlib_frames_are_skipped() -> None:
    rec = Recorder()
    with framehook.callback_enabled(rec):
        json.dumps({"a": [1, 2]}, indent=1)
        add_one(1)
    assert rec.names() == ["add_one"]
    assert rec.stdlib_names() == []
    assert framehook.get_code_skip(json.dumps.__code__) is True
    assert framehook.get_code_skip(add_one.__code__) is False


def test_explicitly_skipped_code_is_not_hooked() -> None:
    def private(x: int) -> int:
        return x

    framehook.set_code_skip(private.__code__, True)
    rec = Recorder()
    with framehook.callback_enabled(rec):
        private(1)
    assert rec.seen == []
    framehook.set_code_skip(private.__code__, None)
    assert framehook.get_code_skip(private.__code__) is None


def test_default_skip_covers_stdlib_and_ptc_but_not_user_code() -> None:
    assert framehook.default_skip(json.dumps.__code__)
    assert framehook.default_skip(framehook.default_skip.__code__)
    assert not framehook.default_skip(add_one.__code__)


def helper_called_by_callback() -> int:
    return 5


def test_frames_started_by_the_callback_are_not_hooked() -> None:
    calls = []

    def callback(state: Any) -> None:
        calls.append(state.f_code.co_name)
        helper_called_by_callback()
        add_one(1)

    with framehook.callback_enabled(callback):
        caller(1)
    assert calls == ["caller", "add_one"]


def gen_numbers(n: int) -> Iterator[int]:
    yield from range(n)


async def coroutine() -> int:
    return 1


def consume() -> int:
    return sum(gen_numbers(3))


def test_generators_and_coroutines_are_skipped() -> None:
    rec = Recorder()
    with framehook.callback_enabled(rec):
        assert consume() == 3
        coro = coroutine()
        try:
            coro.send(None)
        except StopIteration as stop:
            assert stop.value == 1
    assert rec.names() == ["consume"]


def test_replacement_code_returning_another_constant() -> None:
    def original() -> int:
        return 1

    def replacement() -> int:
        return 2

    rec = Recorder({original.__code__: replacement.__code__})
    with framehook.callback_enabled(rec):
        assert original() == 2
    assert original() == 1


def make_counter(start: int) -> Callable[..., Any]:
    count = start

    def step(a: int, b: int = 10, *rest: int, scale: int = 1, **extra: int) -> Any:
        nonlocal count
        count += a

        def peek() -> int:
            return count + b

        return (count, peek(), rest, scale, sorted(extra.items()))

    return step


def make_counter_doubled(start: int) -> Callable[..., Any]:
    count = start

    def step(a: int, b: int = 10, *rest: int, scale: int = 1, **extra: int) -> Any:
        nonlocal count
        count += 2 * a

        def peek() -> int:
            return count + b

        return (count, peek(), rest, scale, sorted(extra.items()))

    return step


def test_replacement_code_shares_arguments_cells_and_closure() -> None:
    step = make_counter(100)
    doubled = make_counter_doubled(0).__code__
    rec = Recorder({step.__code__: doubled})
    with framehook.callback_enabled(rec):
        first = step(1, 2, 3, 4, scale=5, k=6)
        second = step(10)
    assert first == (102, 104, (3, 4), 5, [("k", 6)])
    assert second == (122, 132, (), 1, [])
    # The closure cell is the function's own: the change is visible outside the hook.
    assert step(1) == (123, 133, (), 1, [])
    assert rec.states[0].f_locals == {"a": 1, "b": 2, "rest": (3, 4), "scale": 5, "extra": {"k": 6}}
    assert rec.states[0].closure == step.__closure__


@pytest.mark.skipif(not SUPPORTED, reason="bytecode layer supports CPython 3.11-3.13")
def test_replacement_built_by_the_bytecode_layer_reads_the_frame_values() -> None:
    step = make_counter(0)

    def return_early(insts: list[Instruction]) -> None:
        # Return `count * 1000 + a` right after the prologue: reads a free cell and an argument.
        at = prologue_end(insts)
        insts[at:at] = [
            create_instruction("LOAD_DEREF", argval="count"),
            create_load_const(1000),
            create_instruction("BINARY_OP", arg=5),  # *
            create_load_fast("a"),
            create_instruction("BINARY_OP", arg=0),  # +
            create_instruction("RETURN_VALUE"),
        ]

    new_code = transform(step.__code__, return_early)
    step(7)  # count == 7
    with framehook.callback_enabled(Recorder({step.__code__: new_code})):
        assert step(3) == 7003


def test_callback_errors_propagate_to_the_caller() -> None:
    def broken(state: Any) -> None:
        if state.f_code is add_one.__code__:
            raise RuntimeError("compiler bug")

    with framehook.callback_enabled(broken):
        with pytest.raises(RuntimeError, match="compiler bug"):
            add_one(1)
    assert add_one(1) == 2


def test_callback_must_return_code_or_none() -> None:
    with framehook.callback_enabled(lambda state: 42 if state.f_code is add_one.__code__ else None):  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError, match="None, a code object or a function"):
            add_one(1)


def test_a_returned_function_is_called_with_the_frame_arguments() -> None:
    calls: list[tuple[Any, ...]] = []

    def instead(a: Any, b: Any) -> Any:
        calls.append((a, b))
        return ("instead", a, b)

    def pair(a: Any, b: Any) -> Any:
        return ("pair", a, b)

    marker = object()
    with framehook.callback_enabled(lambda state: instead if state.f_code is pair.__code__ else None):  # type: ignore[arg-type,return-value]
        assert pair(marker, b=2) == ("instead", marker, 2)
        assert pair(1, 2) == ("instead", 1, 2)
    assert calls == [(marker, 2), (1, 2)]
    assert pair(1, 2) == ("pair", 1, 2)
    # The references the frame held to its arguments are released exactly once: what is left
    # is the local name and getrefcount's own argument.
    calls.clear()
    assert sys.getrefcount(marker) == 2


def test_a_returned_function_needs_a_positional_only_frame() -> None:
    def keyword_only(a: int, *, b: int = 1) -> int:
        return a + b

    def two(a: int, b: int) -> int:
        return a + b

    with framehook.callback_enabled(lambda state: (lambda a: a) if state.f_code in (keyword_only.__code__, two.__code__) else None):  # type: ignore[arg-type,return-value]
        with pytest.raises(ValueError, match="exactly its positional arguments"):
            keyword_only(1)
        with pytest.raises(ValueError, match="exactly its positional arguments"):
            two(1, 2)
    assert keyword_only(1) == 2


def test_replacement_with_other_signature_is_rejected() -> None:
    def two(a: int, b: int) -> int:
        return a + b

    with framehook.callback_enabled(lambda state: two.__code__ if state.f_code is add_one.__code__ else None):
        with pytest.raises(ValueError, match="same arguments"):
            add_one(1)


def test_enable_is_thread_local() -> None:
    rec = Recorder()
    other_thread_results: list[Any] = []
    other_rec = Recorder()

    def worker() -> None:
        other_thread_results.append(framehook.get_callback())
        other_thread_results.append(caller(1))
        with framehook.callback_enabled(other_rec):
            add_one(5)

    with framehook.callback_enabled(rec):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        add_one(2)
    assert other_thread_results == [None, 4]
    assert rec.names() == ["add_one"]
    assert other_rec.names() == ["add_one"]
    assert not framehook.is_installed()


def test_many_replaced_calls_do_not_leak_frames() -> None:
    def original(x: int) -> int:
        return x

    def replacement(x: int) -> int:
        return -x

    rec = Recorder({original.__code__: replacement.__code__})
    with framehook.callback_enabled(rec):
        total = 0
        for i in range(20000):
            total += original(i)
    assert total == -sum(range(20000))
    assert original(3) == 3


def test_recursion_through_replaced_frames() -> None:
    def fact(n: int) -> int:
        return 1 if n <= 1 else n * fact(n - 1)

    code = fact.__code__
    rec = Recorder({code: code})
    with framehook.callback_enabled(rec):
        result = fact(200)
    assert result == fact(200)
    # Each level is a fresh frame of `fact` that the hook replaced with the same code.
    assert rec.names() == ["fact"] * 200


class Payload:
    """A weak-referenceable object to store on code objects."""


def test_code_extra_is_stored_and_released_with_the_code() -> None:
    namespace: dict[str, Any] = {}
    exec("def victim():\n    return 1\n", namespace)
    code = namespace["victim"].__code__
    payload = Payload()
    ref = weakref.ref(payload)
    framehook.set_code_extra(code, payload)
    assert framehook.get_code_extra(code) is payload
    del payload
    assert ref() is not None
    del namespace, code
    gc.collect()
    assert ref() is None


def test_code_extra_replacement_and_clear_release_the_old_value() -> None:
    def owner() -> None:
        return None

    first, second = Payload(), Payload()
    first_ref, second_ref = weakref.ref(first), weakref.ref(second)
    framehook.set_code_extra(owner.__code__, first)
    framehook.set_code_extra(owner.__code__, second)
    del first, second
    assert first_ref() is None and second_ref() is not None
    framehook.set_code_extra(owner.__code__, None)
    assert second_ref() is None
    assert framehook.get_code_extra(owner.__code__) is None


class Marker:
    """An argument whose reference count shows whether replaced frames release their locals."""


def test_replaced_and_hooked_frames_release_their_arguments() -> None:
    def original(obj: Marker, *rest: Marker, key: Marker | None = None, **extra: Marker) -> int:
        return 1

    def replacement(obj: Marker, *rest: Marker, key: Marker | None = None, **extra: Marker) -> int:
        return 2

    marker = Marker()
    before = sys.getrefcount(marker)
    with framehook.callback_enabled(Recorder({original.__code__: replacement.__code__})):
        for _ in range(1000):
            assert original(marker, marker, key=marker, other=marker) == 2
    with framehook.callback_enabled(Recorder()):
        for _ in range(1000):
            assert original(marker, marker, key=marker, other=marker) == 1
    gc.collect()
    assert sys.getrefcount(marker) == before


def test_exception_in_replacement_code_surfaces_unchanged() -> None:
    def original(x: int) -> int:
        return x

    def replacement(x: int) -> int:
        raise KeyError(f"missing {x}")

    with framehook.callback_enabled(Recorder({original.__code__: replacement.__code__})):
        try:
            original(3)
        except KeyError as exc:
            caught = exc
    assert caught.args == ("missing 3",)
    names = [entry.name for entry in traceback.extract_tb(caught.__traceback__)]
    assert names[-1] == "replacement"
