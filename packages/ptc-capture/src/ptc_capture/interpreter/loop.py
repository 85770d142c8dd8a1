"""The handler table and the interpreter loop: one handler per bytecode instruction name."""

from __future__ import annotations

import dis
from collections.abc import Callable

from ptc_capture.interpreter.exceptions import catch
from ptc_capture.interpreter.state import Frame, Raised, Unsupported
from ptc_capture.variables import Var

__all__ = ["HANDLERS", "handler", "run_frame"]

Handler = Callable[[Frame, dis.Instruction], None]

HANDLERS: dict[str, Handler] = {}
"""opname -> handler; ``python -m ptc_capture.interpreter`` lists it."""


def handler(*opnames: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opnames``."""

    def register(fn: Handler) -> Handler:
        for name in opnames:
            HANDLERS[name] = fn
        return fn

    return register


class StopAt(Exception):
    """The root frame reached the instruction where a graph break was decided."""


def run_frame(frame: Frame) -> Var:
    """Interpret ``frame`` until it returns; return its result Var."""
    state = frame.state
    while frame.result is None:
        inst = frame.instructions[frame.ip]
        if frame.stop_at == inst.offset:
            raise StopAt()
        frame.inst = inst
        frame.ip += 1
        state.steps += 1
        frame.step = state.steps
        if state.steps > state.config.max_instructions:
            raise Unsupported(f"more than {state.config.max_instructions} instructions were interpreted")
        fn = HANDLERS.get(inst.opname)
        if fn is None:
            raise Unsupported(f"bytecode {inst.opname} is not supported")
        try:
            fn(frame, inst)
        except Raised as exc:
            if catch(frame, exc, inst):
                continue
            exc.frames.append((frame.code, inst.offset))
            raise
    return frame.result
