"""Handlers that build and unpack containers, slices and strings."""

from __future__ import annotations

import dis
from typing import Any

from ptc_capture.interpreter.constant_tensors import with_known_scalars
from ptc_capture.interpreter.containers import mapping_items
from ptc_capture.interpreter.loop import handler
from ptc_capture.interpreter.ops import slice_var
from ptc_capture.interpreter.state import Frame, Unsupported, iarg
from ptc_capture.interpreter.values import as_const, sequence_items, unpack_deferred
from ptc_capture.variables import DictBox, ListBox, Var, const


@handler("BUILD_TUPLE")
def _build_tuple(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(Var("tuple", tuple, items=tuple(frame.popn(iarg(inst)))))


@handler("BUILD_LIST")
def _build_list(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(Var("list", box=ListBox(frame.popn(iarg(inst)))))


@handler("BUILD_MAP")
def _build_map(frame: Frame, inst: dis.Instruction) -> None:
    flat = frame.popn(2 * iarg(inst))
    items = {as_const(flat[i], "a dict key"): flat[i + 1] for i in range(0, len(flat), 2)}
    frame.push(Var("dict", box=DictBox(items)))


@handler("BUILD_CONST_KEY_MAP")
def _build_const_key_map(frame: Frame, inst: dis.Instruction) -> None:
    keys = as_const(frame.pop(), "dict keys")
    values = frame.popn(iarg(inst))
    frame.push(Var("dict", box=DictBox(dict(zip(keys, values)))))


@handler("BUILD_SET")
def _build_set(frame: Frame, inst: dis.Instruction) -> None:
    # Sets hold hashable Python values, so a set built in the trace is a constant (a fresh
    # object: the runner copies it if it escapes; see RunnerSource.expr).
    items = frame.popn(iarg(inst))
    frame.push(const({as_const(v, "a set item") for v in items}))


@handler("SET_ADD")
def _set_add(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    _set_at(frame, iarg(inst)).add(as_const(value, "a set item"))


@handler("SET_UPDATE")
def _set_update(frame: Frame, inst: dis.Instruction) -> None:
    values = sequence_items(frame, frame.pop())
    _set_at(frame, iarg(inst)).update(as_const(v, "a set item") for v in values)


def _set_at(frame: Frame, depth: int) -> set[object]:
    target = frame.stack[-depth]
    if target.kind != "const" or type(target.value) is not set:
        raise Unsupported(f"adding to a {target.kind} that is not a set built in the trace")
    found: set[object] = target.value
    return found


@handler("BUILD_SLICE")
def _build_slice(frame: Frame, inst: dis.Instruction) -> None:
    parts = frame.popn(iarg(inst))
    numbers = with_known_scalars(frame.state, tuple(parts), {})
    if numbers is not None:
        # x[:n] with n a 0-d tensor Python numbers alone decide: indexing reads it by __index__.
        parts = list(numbers[0])
    if any(p.kind == "sym" for p in parts) and all(p.kind in ("const", "sym") for p in parts):
        # A bound computed from dynamic sizes (x[:, :n]) stays symbolic: the graph slices at
        # whatever n is at run time.
        frame.push(slice_var(*parts, *[const(None)] * (3 - len(parts))))
        return
    values = [as_const(p, "a slice bound") for p in parts]
    frame.push(const(slice(*values)))


@handler("BUILD_STRING")
def _build_string(frame: Frame, inst: dis.Instruction) -> None:
    parts = frame.popn(iarg(inst))
    frame.push(const("".join(str(as_const(p, "an f-string part")) for p in parts)))


@handler("FORMAT_VALUE")
def _format_value(frame: Frame, inst: dis.Instruction) -> None:
    # Low two bits pick the conversion (!s, !r, !a); bit 4 says a format spec is on the stack
    # (https://docs.python.org/3.11/library/dis.html#opcode-FORMAT_VALUE).
    spec = as_const(frame.pop(), "a format spec") if iarg(inst) & 0x04 else ""
    value = _converted(frame.pop(), iarg(inst) & 0x03)
    frame.push(const(format(value, spec)))


def _converted(var: Var, conversion: int) -> Any:
    value = as_const(var, "an f-string value")
    convert = {0: None, 1: str, 2: repr, 3: ascii}[conversion]
    return value if convert is None else convert(value)


# 3.13 splits FORMAT_VALUE into CONVERT_VALUE, FORMAT_SIMPLE and FORMAT_WITH_SPEC
# (https://docs.python.org/3.13/library/dis.html#opcode-CONVERT_VALUE).
@handler("CONVERT_VALUE")
def _convert_value(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(const(_converted(frame.pop(), iarg(inst))))


@handler("FORMAT_SIMPLE")
def _format_simple(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(const(format(as_const(frame.pop(), "an f-string value"), "")))


@handler("FORMAT_WITH_SPEC")
def _format_with_spec(frame: Frame, inst: dis.Instruction) -> None:
    spec = as_const(frame.pop(), "a format spec")
    frame.push(const(format(as_const(frame.pop(), "an f-string value"), spec)))


@handler("LIST_APPEND")
def _list_append(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    frame.stack[-iarg(inst)].box.items.append(value)


@handler("LIST_EXTEND")
def _list_extend(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    frame.stack[-iarg(inst)].box.items.extend(sequence_items(frame, value))


@handler("LIST_TO_TUPLE")
def _list_to_tuple(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(Var("tuple", tuple, items=tuple(frame.pop().box.items)))


@handler("MAP_ADD")
def _map_add(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    key = frame.pop()
    frame.stack[-iarg(inst)].box.items[as_const(key, "a dict key")] = value


@handler("DICT_UPDATE", "DICT_MERGE")
def _dict_update(frame: Frame, inst: dis.Instruction) -> None:
    # ``{**other}`` and ``f(**other)``: any mapping, read as dict's C merge reads it.
    other = frame.pop()
    entries = mapping_items(frame, other)
    if entries is None:
        raise Unsupported(f"** of a {other.kind} that is not a mapping (TypeError in eager)")
    items = frame.stack[-iarg(inst)].box.items
    if inst.opname == "DICT_MERGE" and any(key in items for key in entries):
        raise Unsupported("a call got multiple values for a keyword argument (TypeError in eager)")
    items.update(entries)


@handler("UNPACK_SEQUENCE")
def _unpack_sequence(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    items = unpack_deferred(frame, value, iarg(inst)) if value.kind == "deferred" else sequence_items(frame, value)
    if len(items) != iarg(inst):
        raise Unsupported(f"cannot unpack {len(items)} values into {iarg(inst)} (ValueError in eager)")
    for item in reversed(items):
        frame.push(item)


@handler("UNPACK_EX")
def _unpack_ex(frame: Frame, inst: dis.Instruction) -> None:
    before, after = iarg(inst) & 0xFF, iarg(inst) >> 8
    items = sequence_items(frame, frame.pop())
    if len(items) < before + after:
        raise Unsupported("not enough values to unpack (ValueError in eager)")
    middle = items[before : len(items) - after]
    values = items[:before] + [Var("list", box=ListBox(middle))] + items[len(items) - after :]
    for item in reversed(values):
        frame.push(item)
