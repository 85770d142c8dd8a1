"""Handlers for stack shuffling, constants, locals, cells, globals and returns."""

from __future__ import annotations

import dis
from typing import Any

from ptc_capture.guards import Guard, Source
from ptc_capture.interpreter.loop import handler
from ptc_capture.interpreter.state import PY313, Frame, Unsupported, iarg
from ptc_capture.interpreter.values import as_const, from_python
from ptc_capture.variables import NULL, CellBox, Var, const


@handler("NOP", "RESUME", "EXTENDED_ARG", "CACHE", "COPY_FREE_VARS")
def _nop(frame: Frame, inst: dis.Instruction) -> None:
    # COPY_FREE_VARS only moves the closure cells into the frame; free variables are read
    # through Frame.free_sources / Frame.cells instead.
    return None


@handler("PUSH_NULL")
def _push_null(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(NULL)


@handler("POP_TOP")
def _pop_top(frame: Frame, inst: dis.Instruction) -> None:
    frame.pop()


@handler("END_FOR")
def _end_for(frame: Frame, inst: dis.Instruction) -> None:
    # Two values in 3.12; 3.13 pops one and a POP_TOP follows
    # (https://docs.python.org/3.13/library/dis.html#opcode-END_FOR).
    frame.popn(1 if PY313 else 2)


@handler("TO_BOOL")
def _to_bool(frame: Frame, inst: dis.Instruction) -> None:
    # 3.13 converts a condition to bool before POP_JUMP_IF_* and UNARY_NOT. Their handlers
    # take any value's truth themselves, and a tensor condition must reach the jump: a graph
    # break there runs natively and resumes on either side, one at TO_BOOL could not.
    return None


@handler("COPY")
def _copy(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(frame.stack[-iarg(inst)])


@handler("SWAP")
def _swap(frame: Frame, inst: dis.Instruction) -> None:
    i = -iarg(inst)
    frame.stack[i], frame.stack[-1] = frame.stack[-1], frame.stack[i]


@handler("LOAD_CONST")
def _load_const(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(_const_var(inst.argval))


def _const_var(value: Any) -> Var:
    # Code constants are immutable (tuples, frozensets, code objects), so they need no guard.
    if type(value) is tuple:
        return Var("tuple", tuple, items=tuple(_const_var(v) for v in value))
    return const(value)


@handler("RETURN_CONST")
def _return_const(frame: Frame, inst: dis.Instruction) -> None:
    frame.result = _const_var(inst.argval)


@handler("RETURN_VALUE")
def _return_value(frame: Frame, inst: dis.Instruction) -> None:
    frame.result = frame.pop()


def load_local(frame: Frame, name: str) -> Var:
    """The Var bound to local ``name`` (arguments of the root frame are wrapped on first use)."""
    var = frame.locals.get(name)
    if var is not None:
        return var
    if name in frame.pending:
        var = frame.state.wrap(frame.pending.pop(name), Source("local", name))
        frame.locals[name] = var
        return var
    if name in frame.cells:
        raise Unsupported(f"local {name!r} lives in a cell")
    raise Unsupported(f"local variable {name!r} is read before it is assigned")


def _load_fast_slot(frame: Frame, name: str) -> Var:
    # 3.13 compiles LOAD_CLOSURE to LOAD_FAST of the cell's slot, which pushes the cell itself
    # (https://docs.python.org/3.13/library/dis.html#opcode-LOAD_CLOSURE).
    if PY313 and (name in frame.code.co_cellvars or name in frame.code.co_freevars):
        return closure_cell(frame, name)
    return load_local(frame, name)


@handler("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(_load_fast_slot(frame, inst.argval))


@handler("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(frame: Frame, inst: dis.Instruction) -> None:
    # 3.12 inlined comprehensions save the outer binding (or NULL when unbound) and restore it after.
    name = inst.argval
    try:
        var = load_local(frame, name)
    except Unsupported:
        var = NULL
    frame.locals.pop(name, None)
    frame.push(var)


@handler("STORE_FAST")
def _store_fast(frame: Frame, inst: dis.Instruction) -> None:
    store_local(frame, inst.argval, frame.pop())


def store_local(frame: Frame, name: str, value: Var) -> None:
    """Bind local ``name`` (NULL unbinds it: a 3.12 inlined comprehension restoring an unbound name)."""
    frame.pending.pop(name, None)
    if value is NULL:
        frame.locals.pop(name, None)
    else:
        frame.locals[name] = value


# 3.13's superinstructions over two locals; dis gives both names as argval, the first is
# the one stored or loaded first (https://docs.python.org/3.13/library/dis.html#opcode-LOAD_FAST_LOAD_FAST).
@handler("LOAD_FAST_LOAD_FAST")
def _load_fast_load_fast(frame: Frame, inst: dis.Instruction) -> None:
    first, second = inst.argval
    frame.push(_load_fast_slot(frame, first))
    frame.push(_load_fast_slot(frame, second))


@handler("STORE_FAST_STORE_FAST")
def _store_fast_store_fast(frame: Frame, inst: dis.Instruction) -> None:
    first, second = inst.argval
    store_local(frame, first, frame.pop())
    store_local(frame, second, frame.pop())


@handler("STORE_FAST_LOAD_FAST")
def _store_fast_load_fast(frame: Frame, inst: dis.Instruction) -> None:
    first, second = inst.argval
    store_local(frame, first, frame.pop())
    frame.push(_load_fast_slot(frame, second))


@handler("DELETE_FAST")
def _delete_fast(frame: Frame, inst: dis.Instruction) -> None:
    load_local(frame, inst.argval)
    frame.locals.pop(inst.argval, None)


@handler("MAKE_CELL")
def _make_cell(frame: Frame, inst: dis.Instruction) -> None:
    name = inst.argval
    initial = frame.locals.pop(name, None)
    if initial is None and name in frame.pending:
        initial = frame.state.wrap(frame.pending.pop(name), Source("local", name))
    frame.cells[name] = CellBox(initial)


def load_cell(frame: Frame, name: str) -> Var:
    """The contents of cell or free variable ``name``."""
    box = frame.cells.get(name)
    if box is None:
        if name not in frame.free_sources:
            raise Unsupported(f"free variable {name!r} has no cell")
        value, source = frame.free_sources[name]
        box = CellBox(frame.state.wrap(value, source))
        frame.cells[name] = box
    if box.contents is None:
        raise Unsupported(f"free variable {name!r} is read before it is assigned")
    return box.contents


@handler("LOAD_DEREF")
def _load_deref(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(load_cell(frame, inst.argval))


@handler("STORE_DEREF")
def _store_deref(frame: Frame, inst: dis.Instruction) -> None:
    name = inst.argval
    value = frame.pop()
    box = frame.cells.get(name)
    if box is None:
        if name in frame.free_sources:
            raise Unsupported(f"assignment to the closure variable {name!r} of the traced function")
        box = CellBox()
        frame.cells[name] = box
    if name in frame.free_sources and frame.parent is None:
        raise Unsupported(f"assignment to the closure variable {name!r} of the traced function")
    box.contents = value


@handler("DELETE_DEREF")
def _delete_deref(frame: Frame, inst: dis.Instruction) -> None:
    load_cell(frame, inst.argval)
    frame.cells[inst.argval].contents = None


@handler("LOAD_CLOSURE")
def _load_closure(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(closure_cell(frame, inst.argval))


def closure_cell(frame: Frame, name: str) -> Var:
    """The cell of cell or free variable ``name`` itself (what a closure being built captures)."""
    if name not in frame.cells:
        if name in frame.free_sources:
            load_cell(frame, name)
        else:
            frame.cells[name] = CellBox()
    return Var("cell", box=frame.cells[name])


_STABLE_MODULES = ("torch", "math", "operator", "builtins", "functools", "itertools", "collections", "typing")


def global_source(frame: Frame, name: str) -> Source | None:
    """The source of global ``name`` of the frame's function, or None when it cannot be guarded."""
    if frame.f_globals is frame.state.f_globals:
        return Source("global", name)
    if frame.globals_source is not None:
        return frame.globals_source.item(name)
    return None


def load_global(frame: Frame, name: str) -> Var:
    """The Var of global (or builtin) ``name`` as seen by the frame."""
    state = frame.state
    if frame.f_globals is state.f_globals:
        stored = state.side_effects.load_global(name)
        if stored is not None:
            return stored
    if name in frame.f_globals:
        return state.wrap(frame.f_globals[name], global_source(frame, name))
    builtins = state.f_builtins
    if name not in builtins:
        raise Unsupported(f"name {name!r} is not defined")
    if frame.f_globals is state.f_globals:
        state.guards.add(Guard("absent", None, name))
        return state.wrap(builtins[name], Source("builtin", name))
    return state.wrap(builtins[name], None)


@handler("LOAD_GLOBAL")
def _load_global(frame: Frame, inst: dis.Instruction) -> None:
    value = load_global(frame, inst.argval)
    if iarg(inst) & 1:
        frame.push_callable(value)
    else:
        frame.push(value)


@handler("STORE_GLOBAL")
def _store_global(frame: Frame, inst: dis.Instruction) -> None:
    value = frame.pop()
    if frame.f_globals is not frame.state.f_globals:
        raise Unsupported("assignment to a global of another module")
    frame.state.side_effects.store_global(inst.argval, value)


@handler("LOAD_ASSERTION_ERROR")
def _load_assertion_error(frame: Frame, inst: dis.Instruction) -> None:
    frame.push(from_python(AssertionError))


@handler("IMPORT_NAME")
def _import_name(frame: Frame, inst: dis.Instruction) -> None:
    # Importing is idempotent once a module is loaded; the module object is not guarded, as
    # for attributes of torch and the stdlib.
    fromlist = frame.pop()
    level = frame.pop()
    try:
        module = __import__(inst.argval, frame.f_globals, None, as_const(fromlist, "import"), as_const(level, "import"))
    except Exception as exc:
        raise Unsupported(f"import {inst.argval} raised {type(exc).__name__} at trace time") from exc
    frame.push(frame.state.wrap(module, None))


@handler("IMPORT_FROM")
def _import_from(frame: Frame, inst: dis.Instruction) -> None:
    module = frame.stack[-1]
    try:
        value = getattr(module.value, inst.argval)
    except AttributeError as exc:
        raise Unsupported(f"cannot import {inst.argval} (ImportError in eager)") from exc
    frame.push(frame.state.wrap(value, None))
