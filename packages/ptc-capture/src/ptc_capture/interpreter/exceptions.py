"""Exceptions raised in traced code and caught there: ``try``/``except``/``finally`` handlers.

A ``Raised`` (an exception eager raises too, given the trace's values) that reaches an
instruction covered by a ``try`` block of the same frame is handed to the block's handler, as
CPython's exception table does (https://github.com/python/cpython/blob/3.11/Objects/exception_handling_notes.txt):
the stack is cut to the entry's depth, the raising instruction's offset is pushed where the
entry asks for it, then the exception, and the handler's bytecode runs traced
(``PUSH_EXC_INFO``, ``CHECK_EXC_MATCH``, ``POP_EXCEPT``, ``RERAISE``). A handler that does not
match re-raises to the next one, or out of the frame. ``Mapping.get``'s ``except KeyError`` and
``try: import x except ImportError`` patterns stay in the graph this way.

With-blocks' handlers call ``__exit__`` with the exception; they are left to a graph break.
"""

from __future__ import annotations

import dis
import types

from ptc_capture.bytecode.exceptiontable import ExceptionTableEntry, decode_exception_table
from ptc_capture.interpreter.state import Frame, Raised
from ptc_capture.variables import const

__all__ = ["catch"]


def _handler_entry(frame: Frame, offset: int) -> ExceptionTableEntry | None:
    code: types.CodeType = frame.code
    for entry in decode_exception_table(code.co_exceptiontable):
        if entry.start <= offset < entry.end:
            return entry
    return None


def _is_with_handler(frame: Frame, target: int) -> bool:
    # A with-block's handler is PUSH_EXC_INFO; WITH_EXCEPT_START (it calls __exit__).
    index = frame.index_of.get(target)
    if index is None:
        return True
    names = [inst.opname for inst in frame.instructions[index : index + 2]]
    return names == ["PUSH_EXC_INFO", "WITH_EXCEPT_START"]


def catch(frame: Frame, exc: Raised, inst: dis.Instruction) -> bool:
    """Hand ``exc``, raised at ``inst`` of ``frame``, to the frame's handler covering it; False when none does."""
    entry = _handler_entry(frame, inst.offset)
    if entry is None or _is_with_handler(frame, entry.target):
        return False
    del frame.stack[entry.depth :]
    if entry.lasti:
        frame.push(const(inst.offset))
    frame.push(const(exc.error))
    frame.ip = frame.index_of[entry.target]
    return True
