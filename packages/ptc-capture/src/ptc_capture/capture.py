"""Capturing one frame: run the interpreter (restarting once at a graph break), compile, build the entry.

``capture_frame`` is the single place that shows the order: trace → (on a break: trace again up
to the breaking instruction) → graph outputs → backend compile → runner → replacement code.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ptc_capture.config import Config, get_config
from ptc_capture.deferred import vars_in
from ptc_capture.dynamic import DynamicPolicy, check_marks
from ptc_capture.errors import CaptureInternalError, GraphBreakError, ShapeConstraintError
from ptc_capture.guards import Guard, ShapeGuards, Source, compile_guards
from ptc_capture.interpreter import CaptureState, Frame, Raised, StopAt, Unsupported, UserLocation, run_frame
from ptc_capture.interpreter.autocast import autocast_at_end, start_autocast
from ptc_capture.logs import channel
from ptc_capture.resume import NATIVE, in_try_block, make_resume_code, resume_parameters
from ptc_capture.runner import BreakPlan, build_runner, direct_target, make_replacement
from ptc_capture.variables import Var
from ptc_spec import SymbolEnv

__all__ = ["BreakRecord", "Capture", "capture_frame", "capture_function"]

_break_log = channel("graph_breaks")
_graph_log = channel("graph_code")

Backend = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class BreakRecord:
    """One graph break: why, and the user's stack (outermost first)."""

    reason: str
    stack: tuple[UserLocation, ...]

    def __str__(self) -> str:
        where = self.stack[-1] if self.stack else "?"
        return f"{self.reason} (at {where})"


@dataclass(slots=True)
class Capture:
    """The outcome of capturing one frame for one set of inputs.

    It names its code instead of holding it: entries live on the code object, and a reference
    back would keep the code alive through its extra slot, where GC cannot see the cycle.
    """

    name: str
    guards: list[Guard]
    check: Callable[..., bool]
    graph: torch.fx.GraphModule | None = None
    compiled: Callable[..., Any] | None = None
    replacement: types.CodeType | None = None
    runner: Callable[..., Any] | None = None
    breaks: list[BreakRecord] = field(default_factory=list)
    eager_reason: str | None = None
    sees_no_tensors: bool = False
    """The frame ran without reading or making any tensor (pure Python: config reads, helpers)."""
    target: types.CodeType | Callable[..., Any] | None = None
    """What the frame hook runs in the frame's place: the runner itself when it can be called
    with the frame's arguments (one Python frame less per call), else the replacement code."""
    shape_env: SymbolEnv | None = None
    """The symbols of the dynamic input dims and their guards (None when every size is static)."""


def _new_state(
    config: Config, f_globals: dict[str, Any], f_builtins: dict[str, Any], closure: tuple[Any, ...], dynamic: DynamicPolicy
) -> CaptureState:
    state = CaptureState(config, f_globals, f_builtins, closure, dynamic=dynamic)
    state.grad_enabled = state.grad_at_entry = torch.is_grad_enabled()
    state.guards.add(Guard("grad_mode", None, state.grad_enabled))
    start_autocast(state)
    state.guards.add(Guard("autocast", None, state.autocast.guard_key()))
    return state


def _root_frame(state: CaptureState, code: types.CodeType, f_locals: dict[str, Any]) -> Frame:
    root = Frame(state, code, state.f_globals, None)
    root.pending = dict(f_locals)
    for i, name in enumerate(code.co_freevars):
        try:
            contents = state.closure[i].cell_contents
        except (ValueError, IndexError):
            continue
        root.free_sources[name] = (contents, Source("closure", i))
    return root


def capture_frame(
    code: types.CodeType,
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    f_builtins: dict[str, Any],
    closure: tuple[Any, ...] | None,
    backend: Backend,
    *,
    fullgraph: bool = False,
    config: Config | None = None,
    dynamic: DynamicPolicy | None = None,
) -> Capture:
    """Trace one frame and return its Capture (a replacement code, or None to run it eagerly).

    ``dynamic`` chooses the input dims that are symbolic (default: none).
    """
    config = config or get_config()
    dynamic = dynamic or DynamicPolicy(False)
    cells = tuple(closure or ())
    state = _new_state(config, f_globals, f_builtins, cells, dynamic)
    state.fullgraph = fullgraph
    root = _root_frame(state, code, f_locals)
    try:
        result = run_frame(root)
        return _finish(state, root, code, backend, result, None, [])
    except Unsupported as exc:
        record = BreakRecord(exc.reason, _stack_of(root, exc))
        if fullgraph:
            where = record.stack[-1] if record.stack else code.co_filename
            raise GraphBreakError(f"graph break in {code.co_qualname}: {exc.reason} at {where}") from None
        uncaught = isinstance(exc, Raised) and not any(in_try_block(c, offset) for c, offset in exc.frames)
        if uncaught and state.compile_path_from is None:
            # The trace took eager's path throughout, so eager raises it too (a config's
            # __getattribute__ raising for getattr's default): the frame runs eagerly and raises
            # from the user's own frame. Nothing of it is left out of a graph: not a break.
            return _eager(state, code, None, f"{exc.reason}, as eager raises it")
        _break_log.debug("graph break in %s: %s", code.co_qualname, record)
        if uncaught and not _callee_raised_on_eager_values(state, root, exc):
            # Eager may not raise it: the trace took another path than eager (code that reads
            # torch.compiler.is_compiling()). Resuming would run the rest natively on the trace's
            # path; the whole frame runs eagerly instead, where every decision is eager's.
            return _eager(state, code, record, f"{exc.reason}, and no traced frame catches it")
        inst = _breaking_instruction(root)
        if any(v.kind == "method" and getattr(v.value, "__name__", "") == "__exit__" for v in root.stack):
            # Resuming would rebuild the manager after the graph: its __enter__ side effects and
            # the exception its __exit__ sees could not both stay as eager's.
            return _eager(state, code, record, "a graph break inside a with-block over a context manager written in Python")
        if inst is None or inst.opname not in NATIVE:
            return _eager(state, code, record, f"cannot resume after {inst.opname if inst else '?'}")
        if in_try_block(code, inst.offset):
            # The runner runs the breaking instruction natively, outside the frame and so outside
            # its handlers: an exception it raises (a `try: return probe() except: ...` fallback)
            # would escape instead of being caught. Checking the resume offsets alone misses the
            # case where the try block ends at the break, as with `return` inside `try`.
            return _eager(state, code, record, "a graph break inside a try block is not supported yet")
        retry_state = _new_state(config, f_globals, f_builtins, cells, dynamic)
        retry = _root_frame(retry_state, code, f_locals)
        retry.stop_at = inst.offset
        try:
            run_frame(retry)
        except StopAt:
            try:
                return _finish(retry_state, retry, code, backend, None, inst, [record])
            except Unsupported as again:
                return _eager(retry_state, code, record, again.reason)
        except Unsupported as again:
            return _eager(retry_state, code, record, again.reason)
        return _eager(retry_state, code, record, "the second trace did not reach the break")
    except (GraphBreakError, CaptureInternalError, ShapeConstraintError):
        raise
    except Exception as exc:
        inst = root.inst
        where = f"{inst.opname} at offset {inst.offset}" if inst is not None else "entry"
        message = f"ptc_capture failed on {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) at {where}: {exc!r}"
        if config.suppress_errors:
            logging.getLogger("ptc.capture").warning("%s; running it eagerly", message)
            return _eager(state, code, BreakRecord(message, root.user_stack()), message)
        raise CaptureInternalError(message) from exc


def _callee_raised_on_eager_values(state: CaptureState, root: Frame, exc: Unsupported) -> bool:
    """Whether ``exc`` came from a function the frame calls, and nothing the frame did before that
    call took the compile path (the callee did): then the frame breaks at the call like at any other.

    The callee, run natively, is captured as a frame of its own (running eagerly where it
    raises), and the rest of this frame is still compiled, so what it builds after the call
    (a model output) is not left to an eager frame, where each store on it broke again.
    """
    began = state.compile_path_from
    return isinstance(exc, Raised) and len(exc.frames) > 1 and (began is None or began >= root.step)


def _breaking_instruction(root: Frame) -> Any:
    inst = root.inst
    if inst is not None and inst.opname == "CALL" and root.ip >= 2:
        # 3.11 runs a call as PRECALL + CALL; the break (and the native call) starts at PRECALL.
        previous = root.instructions[root.ip - 2]
        if previous.opname == "PRECALL":
            return previous
    return inst


def _stack_of(root: Frame, exc: Unsupported) -> tuple[UserLocation, ...]:
    deepest = root
    while True:
        child = _active_child(deepest)
        if child is None:
            break
        deepest = child
    return exc.stack or deepest.user_stack()


def _active_child(frame: Frame) -> Frame | None:
    return getattr(frame, "_child", None)


def _guards_of(state: CaptureState) -> list[Guard]:
    """The trace's guards, the SymbolEnv's last: they read the symbols the tensor guards bind."""
    guards = list(state.guards)
    if len(state.graph.input_sources) > 1:
        guards.append(Guard("distinct_tensors", None))
    env = state.graph.shape_env
    if env.symbols:
        guards.append(Guard("shape_env", None, ShapeGuards.of(env)))
    return guards


def _eager(state: CaptureState, code: types.CodeType, record: BreakRecord | None, why: str) -> Capture:
    guards = _guards_of(state)
    _break_log.debug("%s runs eagerly: %s", code.co_qualname, why)
    breaks = [] if record is None else [record]
    return Capture(code.co_qualname, guards, compile_guards(guards), breaks=breaks, eager_reason=why)


def _tensors_in(values: list[Var], found: dict[Any, Var]) -> None:
    for var in values:
        if var.kind == "tensor":
            found.setdefault(var.node, var)
        elif var.kind == "tuple" or var.kind in ("method", "tensor_method", "container_method", "partial", "view"):
            _tensors_in(list(var.items), found)
        elif var.kind == "deferred":
            # The call runs after the graph on its tensor arguments: they are graph outputs.
            _tensors_in(list(vars_in((var.value.args, var.value.kwargs))), found)
        elif var.kind == "list":
            _tensors_in(list(var.box.items), found)
        elif var.kind == "dict":
            _tensors_in(list(var.box.items.values()), found)
        elif var.kind == "iter":
            # A dict view's iterator reads its values through the view (``over``).
            _tensors_in(var.box.pending() + ([var.box.over] if var.box.over is not None else []), found)
        elif var.kind == "userobj":
            _tensors_in(var.box.contents(), found)


def _check_cells_after(root: Frame, code: types.CodeType, offset: int) -> None:
    # Functions made before the break are rebuilt with fresh cells, and the resume function
    # gets fresh cells too; that is only faithful if the frame never writes a cell afterwards.
    if not code.co_cellvars:
        return
    for inst in root.instructions:
        if inst.offset > offset and inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in code.co_cellvars:
            if any(v.kind == "closure" for v in list(root.stack) + list(root.locals.values())):
                raise Unsupported("a closure made before the break shares a cell the frame writes afterwards")


def _is_bound(root: Frame, name: str) -> bool:
    if name in root.code.co_cellvars:
        box = root.cells.get(name)
        return box is not None and box.contents is not None
    return name in root.locals or name in root.pending


def _finish(
    state: CaptureState,
    root: Frame,
    code: types.CodeType,
    backend: Backend,
    result: Var | None,
    break_inst: Any,
    breaks: list[BreakRecord],
) -> Capture:
    plan: BreakPlan | None = None
    live: list[Var] = [result] if result is not None else []
    if break_inst is not None:
        nulls = tuple(v.kind == "null" for v in root.stack)
        unbound = frozenset(n for n in resume_parameters(code) if not _is_bound(root, n))
        layouts = NATIVE[break_inst.opname].layouts(nulls, break_inst, root.instructions)
        resume_codes = {off: make_resume_code(code, off, layout, unbound) for off, layout in layouts.items()}
        _check_cells_after(root, code, break_inst.offset)
        values = dict(root.locals)
        for name, box in root.cells.items():
            if name in code.co_cellvars and box.contents is not None:
                values[name] = box.contents
        plan = BreakPlan(break_inst, root.instructions, root.kw_names, list(root.stack), values, resume_codes)
        live = list(root.stack) + list(values.values())
    live += state.side_effects.values()
    found: dict[Any, Var] = {}
    _tensors_in(live, found)
    outputs = list(found.values())
    env = state.graph.shape_env
    check_marks(env, state.marks)
    guards = _guards_of(state)
    check = compile_guards(guards)
    gm = None
    compiled = None
    examples = [state.keepalive_tensor(v) for v in state.graph.input_vars]
    autocast = autocast_at_end(state)
    if state.graph.op_count or outputs:
        passthrough = not state.graph.op_count and all(v.node is not None and v.node.op == "placeholder" for v in outputs)
        if passthrough and plan is None and not state.side_effects.log:
            return Capture(code.co_qualname, guards, check, breaks=breaks, eager_reason="no tensor operations")
        state.graph.output(outputs)
        gm = state.graph.module()
        if passthrough:
            # Inputs only carried to a break or a side effect: there is nothing for the backend
            # to compile (and no graph to count), so the runner picks them out with the FX
            # module's own forward.
            compiled = gm.forward
            gm = None
        else:
            if _graph_log.isEnabledFor(logging.DEBUG):
                _graph_log.debug("graph of %s:\n%s", code.co_qualname, gm.code)
            compiled = backend(gm, examples)
    elif plan is None and not state.side_effects.log:
        no_tensors = not state.graph.input_vars and not breaks
        return Capture(code.co_qualname, guards, check, breaks=breaks, eager_reason="no tensor operations", sees_no_tensors=no_tensors)
    runner = build_runner(
        code, state.f_globals, state.f_builtins, compiled, list(state.graph.input_sources), outputs,
        list(state.side_effects.log), result, plan,
        state.grad_enabled if state.grad_enabled != state.grad_at_entry else None, autocast, state.graph.size_sources(),
    )  # fmt: skip
    replacement = make_replacement(code, runner)
    target = direct_target(code, runner) or replacement
    shape_env = env if env.symbols else None
    return Capture(code.co_qualname, guards, check, gm, compiled, replacement, runner, breaks, None, target=target, shape_env=shape_env)


def capture_function(
    fn: Callable[..., Any],
    *args: Any,
    backend: Backend | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = False,
    **kwargs: Any,
) -> Capture:
    """Trace ``fn(*args, **kwargs)`` directly (without the frame hook) and return its Capture.

    ``dynamic=True`` makes every input dim of size 2 or more symbolic; marked dims
    (``mark_dynamic``) are symbolic in any case.
    """
    if isinstance(fn, torch.nn.Module):
        forward = type(fn).forward
        return capture_function(forward, fn, *args, backend=backend, fullgraph=fullgraph, dynamic=dynamic, **kwargs)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"capture_function needs a Python function, got {type(fn).__name__}")
    # The frame's own parameters: a decorator's wrapper(self, *args, **kwargs) keeps the wrapped
    # function in __wrapped__, whose signature would name locals the wrapper's frame does not have.
    bound = inspect.signature(fn, follow_wrapped=False).bind(*args, **kwargs)
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    builtins_dict = fn.__globals__.get("__builtins__", __builtins__)
    if isinstance(builtins_dict, types.ModuleType):
        builtins_dict = vars(builtins_dict)

    def eager_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        return gm.forward

    return capture_frame(
        fn.__code__, f_locals, fn.__globals__, builtins_dict, fn.__closure__, backend or eager_backend, fullgraph=fullgraph,
        dynamic=DynamicPolicy(bool(dynamic)),
    )  # fmt: skip
