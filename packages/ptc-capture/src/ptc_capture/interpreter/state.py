"""Mutable state of one capture: the shared CaptureState and one Frame per code being interpreted."""

from __future__ import annotations

import dis
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ptc_capture.autocast_state import AutocastState
from ptc_capture.config import Config
from ptc_capture.dynamic import DynamicPolicy, Mark, constrain
from ptc_capture.graph import GraphState
from ptc_capture.guards import Guard, GuardSet, Source
from ptc_capture.side_effects import SideEffects
from ptc_capture.variables import NULL, CellBox, Var, wrap
from ptc_spec import symbolic

__all__ = [
    "PY313", "CaptureState", "Frame", "Raised", "Unsupported", "UserLocation", "call_operands", "iarg", "pop_call_ex_operands",
]  # fmt: skip

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)


@dataclass(frozen=True, slots=True)
class UserLocation:
    """A user source position: file, line and function name."""

    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"


def iarg(inst: dis.Instruction) -> int:
    """The integer argument of an instruction (0 for instructions without one)."""
    return int(inst.arg or 0)


def call_operands(first: Any, second: Any, values: list[Any], null: Any) -> tuple[Any, list[Any]]:
    """The callable and positional arguments of a CALL over ``first, second, *values`` (``null``: the NULL entry).

    NULL sits below the callable before 3.13 and above it (in self's place) from 3.13; a
    method with its self is the same two entries in both
    (https://docs.python.org/3.13/library/dis.html#opcode-CALL).
    """
    if first is null:
        return second, values
    if second is null:
        return first, values
    return first, [second, *values]


def pop_call_ex_operands(stack: list[Any], flags: int, null: Any) -> tuple[Any, Any, Any]:
    """Pop CALL_FUNCTION_EX's operands off ``stack``: the callable, the argument sequence and the
    keyword mapping (None without flag bit 0), with the NULL beside the callable (``null``).

    The NULL sits above the callable from 3.13 and below it before
    (https://docs.python.org/3.13/library/dis.html#opcode-CALL_FUNCTION_EX).
    """
    kwargs = stack.pop() if flags & 1 else None
    args = stack.pop()
    if PY313:
        stack.pop()
        return stack.pop(), args, kwargs
    fn = stack.pop()
    if stack and stack[-1] is null:
        stack.pop()
    return fn, args, kwargs


class Unsupported(Exception):
    """The interpreter cannot trace an instruction; the capture driver turns it into a graph break."""

    def __init__(self, reason: str, stack: tuple[UserLocation, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stack = stack


class Raised(Unsupported):
    """The traced code raised ``error`` (an exception eager raises too, given the trace's values).

    It is still a graph break, but not one to resume after when nothing in the traced frames
    catches it: the trace took the compile-time path (``torch.compiler.is_compiling()`` is True
    there), so re-running the rest natively could mix that path with eager's. Handlers that
    model the catching (``getattr`` with a default, ``hasattr``) catch it by ``error``'s type.
    """

    def __init__(self, reason: str, error: BaseException) -> None:
        super().__init__(reason)
        self.error = error
        self.frames: list[tuple[types.CodeType, int]] = []
        """(code, offset of the raising instruction) of each traced frame it left, innermost first."""


@dataclass(slots=True)
class CaptureState:
    """Everything shared by the root frame and the frames inlined into it."""

    config: Config
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]
    closure: tuple[Any, ...]
    graph: GraphState = field(default_factory=GraphState)
    guards: GuardSet = field(default_factory=GuardSet)
    side_effects: SideEffects = field(default_factory=SideEffects)
    tensors: dict[int, Var] = field(default_factory=dict)
    boxes: dict[int, Var] = field(default_factory=dict)
    keepalive: list[Any] = field(default_factory=list)
    grad_enabled: bool = True
    grad_at_entry: bool = True
    autocast: AutocastState = field(default_factory=AutocastState.current)
    """The autocast state in force at the instruction being traced."""
    autocast_entry: AutocastState = field(default_factory=AutocastState.current)
    autocast_nesting: int = 0
    """Autocast regions entered minus regions left so far (eager's nesting counter, relative to entry)."""
    autocast_entry_depth: int = 0
    """The thread's autocast nesting count when the trace began."""
    autocast_switched: bool = False
    """Whether the graph switches autocast (enters or leaves a region)."""
    fullgraph: bool = False
    """Whether a graph break is an error (then torch ops on deferred values are deferred too)."""
    deferred: list[Var] = field(default_factory=list)
    """Calls to run after the graph (see ptc_capture.deferred), in trace order."""
    steps: int = 0
    known: dict[Any, torch.Tensor] = field(default_factory=dict)
    """Graph node -> the real value of a small tensor that Python constants alone decide (see
    interpreter/constant_tensors.py)."""
    compile_path_from: int | None = None
    """The step at which the trace first asked ``torch.compiler.is_compiling()``: from there on
    its values may be the compile path's, not eager's."""
    realized: dict[int, Any] = field(default_factory=dict)
    """id(closure Var or CellBox) -> the real function or cell made from it for a class created in the trace."""
    closure_of: dict[int, Var] = field(default_factory=dict)
    """id(real function made from a closure Var) -> that Var: calling the function traces the closure."""
    dynamic: DynamicPolicy = field(default_factory=DynamicPolicy)
    """Which input dims become symbolic (see ptc_capture.dynamic)."""
    marks: list[tuple[Mark, Any]] = field(default_factory=list)
    """Dims marked dynamic, with their symbols: the trace must not fix them (checked at the end)."""

    def graph_input(self, tensor: torch.Tensor, source: Source | None) -> Var:
        """Return the Var of a real tensor read from ``source`` (one placeholder per tensor object)."""
        found = self.tensors.get(id(tensor))
        if found is not None:
            if source is not None and found.source is not None and source != found.source:
                self.guards.add(Guard("same_as", source, found.source))
            return found
        if source is None:
            raise Unsupported("a tensor reached the trace without a source it can be read from at run time")
        ty = type(tensor)
        if ty not in (torch.Tensor, torch.nn.Parameter):
            raise Unsupported(f"tensor subclass {ty.__name__} is not supported")
        if tensor.is_nested or tensor.layout is not torch.strided:
            # No sizes or strides a TensorMeta can hold; the trace's tensors are all dense and
            # strided (attrs' is_nested, is_sparse and layout rely on it).
            raise Unsupported(f"a {'nested' if tensor.is_nested else str(tensor.layout)} tensor is not supported")
        request = self.dynamic.request(tensor, source)
        try:
            var = self.graph.placeholder(tensor, source, request.dims)
        except ValueError:
            # Not a dense layout (a strided slice): its strides cannot follow symbolic sizes, so
            # it stays static (a marked dim then fails in constrain, naming the reason).
            var = self.graph.placeholder(tensor, source)
        assert var.meta is not None
        for mark in request.marks:
            size = var.meta.shape[mark.dim]
            constrain(self.graph.shape_env, mark, size)
            self.marks.append((mark, size))
        # Dynamic dims are guarded through their symbols (read from these dims, checked by the
        # SymbolEnv's guards at the end of the guard function), static dims by value.
        expected = (ty, tensor.dtype, tensor.device, var.meta.shape, var.meta.stride, tensor.requires_grad)
        self.guards.add(Guard("tensor", source, expected))
        self.tensors[id(tensor)] = var
        self.keepalive.append(tensor)
        return var

    def int_input(self, value: int, source: Source) -> Var | None:
        """The Var of an int argument that is a size symbol in this capture (see ptc_capture.dynamic), else None."""
        if not self.dynamic.int_is_dynamic(value, source):
            return None
        env = self.graph.shape_env
        sym = env.create_symbol(value)
        self.guards.add(Guard("int_symbol", source, sym.name))
        self.graph.sizes.add_int_input(sym, source)
        return Var("sym", symbolic(sym, env), source=source)

    def keepalive_tensor(self, var: Var) -> torch.Tensor:
        """The real tensor behind a graph input Var."""
        for tensor in self.keepalive:
            if isinstance(tensor, torch.Tensor) and self.tensors.get(id(tensor)) is var:
                return tensor
        raise KeyError(var)

    def remember_box(self, real: Any, var: Var) -> Var:
        """Keep one Var per real mutable container so aliases stay aliases."""
        found = self.boxes.get(id(real))
        if found is not None:
            return found
        self.boxes[id(real)] = var
        self.keepalive.append(real)
        return var

    def wrap(self, value: Any, source: Source | None) -> Var:
        """Wrap a real value (see variables.wrap)."""
        if isinstance(value, (list, dict)) and id(value) in self.boxes:
            return self.boxes[id(value)]
        return wrap(self, value, source)


# Weak keys: a decoded code object must not outlive its function (its frame cache goes with it).
_DECODED: weakref.WeakKeyDictionary[types.CodeType, tuple[list[dis.Instruction], dict[int, int]]] = weakref.WeakKeyDictionary()


def _decoded(code: types.CodeType) -> tuple[list[dis.Instruction], dict[int, int]]:
    """The instructions of ``code`` and the index of each by offset."""
    found = _DECODED.get(code)
    if found is None:
        instructions = list(dis.get_instructions(code))
        found = _DECODED[code] = (instructions, {inst.offset: i for i, inst in enumerate(instructions)})
    return found


@dataclass(slots=True)
class Frame:
    """One code object being interpreted: its instructions, stack, locals and cells."""

    state: CaptureState
    code: types.CodeType
    f_globals: dict[str, Any]
    globals_source: Source | None
    parent: Frame | None = None
    function: Var | None = None
    instructions: list[dis.Instruction] = field(default_factory=list)
    index_of: dict[int, int] = field(default_factory=dict)
    ip: int = 0
    inst: dis.Instruction | None = None
    stack: list[Var] = field(default_factory=list)
    locals: dict[str, Var] = field(default_factory=dict)
    pending: dict[str, Any] = field(default_factory=dict)
    cells: dict[str, CellBox] = field(default_factory=dict)
    free_sources: dict[str, tuple[Any, Source | None]] = field(default_factory=dict)
    kw_names: tuple[str, ...] = ()
    result: Var | None = None
    depth: int = 0
    stop_at: int | None = None
    yielded: list[Var] | None = None
    step: int = 0
    """``state.steps`` when the current instruction began."""

    def __post_init__(self) -> None:
        # Shared by every frame of the code object (read only): a model inlines the same
        # functions once per layer, and decoding them again was a tenth of a capture.
        self.instructions, self.index_of = _decoded(self.code)

    def push(self, var: Var) -> None:
        """Push one value."""
        self.stack.append(var)

    def push_callable(self, var: Var) -> None:
        """Push ``var`` as a callable with no self: CALL reads NULL below it before 3.13 and
        above it (in self's place) from 3.13 (https://docs.python.org/3.13/library/dis.html#opcode-CALL)."""
        if PY313:
            self.stack.append(var)
            self.stack.append(NULL)
        else:
            self.stack.append(NULL)
            self.stack.append(var)

    def pop(self) -> Var:
        """Pop one value."""
        return self.stack.pop()

    def popn(self, n: int) -> list[Var]:
        """Pop ``n`` values, returned in stack order (deepest first)."""
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def jump(self, offset: int) -> None:
        """Continue at the instruction at byte ``offset``."""
        self.ip = self.index_of[offset]

    def location(self) -> UserLocation:
        """The user position of the current instruction."""
        line = None
        if self.inst is not None:
            positions = getattr(self.inst, "positions", None)
            line = positions.lineno if positions is not None and positions.lineno else None
            if line is None:
                line = _line_before(self)
        return UserLocation(self.code.co_filename, line or self.code.co_firstlineno, self.code.co_name)

    def user_stack(self) -> tuple[UserLocation, ...]:
        """Locations from the root frame down to this one."""
        frames: list[UserLocation] = []
        f: Frame | None = self
        while f is not None:
            frames.append(f.location())
            f = f.parent
        return tuple(reversed(frames))

    def root(self) -> Frame:
        """The outermost frame."""
        f = self
        while f.parent is not None:
            f = f.parent
        return f


def _line_before(frame: Frame) -> int | None:
    for i in range(frame.ip - 1, -1, -1):
        positions = getattr(frame.instructions[i], "positions", None)
        if positions is not None and positions.lineno:
            return int(positions.lineno)
    return None
