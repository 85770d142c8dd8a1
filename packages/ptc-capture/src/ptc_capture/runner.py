"""Generated Python that runs one cache entry: read inputs, call the compiled graph, rebuild values.

The runner of an entry is plain Python source compiled once per entry: it reads the graph's
inputs through their sources, calls the backend's callable with the frame hook switched off,
replays side effects, and either returns the frame's result or runs the breaking instruction
natively and continues in a resume function.
"""

from __future__ import annotations

import builtins
import collections
import functools
import itertools
import logging
import math
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ptc_capture import framehook
from ptc_capture.autocast_state import AutocastExit, AutocastSwitch, apply_transition, nesting, restore
from ptc_capture.deferred import DeferredCall, vars_in
from ptc_capture.guards import Source, hoisted_reads, source_expr
from ptc_capture.interpreter.classes import made_in_trace
from ptc_capture.interpreter.objects import is_slot
from ptc_capture.interpreter.state import Unsupported
from ptc_capture.interpreter.views import is_view_iterator, view_unchanged
from ptc_capture.logs import channel
from ptc_capture.resume import NULL_MARK, GradModeExit, native_step, resume_parameters, strip_nulls
from ptc_capture.side_effects import Effect
from ptc_capture.symbolic_sizes import pytype_of, size_source, symbol_name
from ptc_capture.variables import DictBox, IterBox, ListBox, Var, tuple_of

__all__ = ["BreakPlan", "RunnerSource", "build_runner", "direct_target", "make_replacement"]

_log = channel("graph_code")


def _list_iterator(items: list[Any], position: int) -> Any:
    """CPython's iterator over ``items``, advanced to ``position`` (a resume function wraps it as one)."""
    found = iter(items)
    found.__setstate__(position)  # type: ignore[attr-defined]
    return found


def _advanced(iterator: Any, count: int) -> Any:
    """``iterator`` after ``count`` items were taken from it (a dict's iterator cannot be positioned)."""
    for _ in range(count):
        next(iterator)
    return iterator


@dataclass(frozen=True, slots=True)
class BreakPlan:
    """How a runner continues after its graph: the instruction to run natively and the resume codes."""

    inst: Any
    instructions: list[Any]
    kw_names: tuple[str, ...]
    stack: list[Var]
    locals: dict[str, Var]
    resume_codes: dict[int, types.CodeType]


@dataclass(slots=True)
class RunnerSource:
    """Accumulates the runner's source text and the objects it refers to."""

    params: dict[str, str]
    outputs: dict[Any, int]
    consts: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    memo: dict[int, str] = field(default_factory=dict)
    temps: int = 0
    frame_globals: Any = None
    uses_globals: bool = False
    """Whether the runner needs the frame's globals ``G`` beyond ``G[...]`` reads (a function made in the trace)."""
    size_sources: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    """Size symbol -> (input source, dim) it is read from (dim None: an int argument)."""
    size_lines: list[str] = field(default_factory=list)
    """Lines reading the symbols the runner needs from the inputs, run before the graph."""

    def k(self, value: Any) -> str:
        """The name under which the runner sees ``value``."""
        if made_in_trace(value):
            # It exists only in the trace; eager makes a new one on every call.
            raise Unsupported(f"{getattr(value, '__qualname__', type(value).__name__)} was created while tracing and cannot leave the graph")
        name = f"_k{len(self.consts)}"
        for existing, obj in self.consts.items():
            if obj is value:
                return existing
        self.consts[name] = value
        return name

    def temp(self, expr: str) -> str:
        """Bind ``expr`` to a fresh local and return its name."""
        name = f"_t{self.temps}"
        self.temps += 1
        self.lines.append(f"    {name} = {expr}")
        return name

    def expr(self, var: Var) -> str:
        """A Python expression that evaluates to the runtime value of ``var``."""
        kind = var.kind
        if kind == "tensor":
            if var.node in self.outputs:
                return f"_o[{self.outputs[var.node]}]"
            raise Unsupported("a tensor value is not a graph output")
        if kind == "const":
            value = var.value
            if value is None or type(value) in (bool, int, str) or (type(value) is float and math.isfinite(value)):
                return repr(value)
            if type(value) is set:
                # A set built in the trace: each run gets its own copy, as each eager run would.
                return f"set({self.k(value)})"
            return self.k(value)
        if kind == "null":
            return self.k(NULL_MARK)
        if kind == "tuple":
            inner = "".join(self.expr(v) + ", " for v in var.items)
            if var.value is tuple or var.value is None:
                return f"({inner})"
            return f"{self.k(tuple_of)}({self.k(var.value)}, ({inner}))"
        if kind in ("list", "dict", "iter", "userobj"):
            return self._box(var)
        if kind == "view":
            return self._view(var)
        if kind in ("function", "callable", "module", "object"):
            if var.source is not None:
                return self.memo.get(id(var)) or source_expr(var.source, self.params)
            return self.k(var.value)
        if kind == "method":
            return f"{self.k(types.MethodType)}({self.k(var.value)}, {self.expr(var.items[0])})"
        if kind in ("tensor_method", "container_method"):
            return f"{self.expr(var.items[0])}.{var.value}"
        if kind == "closure":
            return self._function(var)
        if kind == "partial":
            target, bound, keywords = var.items
            return f"{self.k(functools.partial)}({self.expr(target)}, *{self.expr(bound)}, **{self.expr(keywords)})"
        if kind == "deferred":
            return self._deferred(var)
        if kind == "sym":
            return self._size(var.value)
        if kind == "slice":
            return "slice(" + ", ".join(self.expr(v) for v in var.items) + ")"
        if kind == "ctx_exit" and isinstance(var.value, AutocastExit):
            return self.k(var.value)
        if kind == "ctx_exit":
            return f"{self.k(GradModeExit)}({bool(var.value)})"
        raise Unsupported(f"a {kind} value cannot be rebuilt after the graph")

    def _view(self, var: Var) -> str:
        # A real view of the real dict, made once (returned twice, it is one object as in eager).
        found = self.memo.get(id(var))
        if found is None:
            if var.source is not None:
                found = self.temp(source_expr(var.source, self.params))
            else:
                found = self.temp(f"{self.k(var.value)}({self.expr(var.items[0])})")
            self.memo[id(var)] = found
        return found

    def _size(self, value: Any) -> str:
        # A size computed from dynamic input sizes: recomputed from the inputs' actual sizes.
        node = value.node
        expr = node.env.simplify(node.expr)
        names: dict[str, str] = {}
        for sym in sorted(expr.free_symbols, key=str):
            if sym.name not in self.size_sources:
                raise Unsupported(f"size {sym} is not a dim of any graph input, so it cannot be rebuilt after the graph")
            names[sym.name] = symbol_name(sym.name)
            if not any(line.startswith(f"    {names[sym.name]} = ") for line in self.size_lines):
                source, dim = self.size_sources[sym.name]
                read = source_expr(source, self.params) + ("" if dim is None else f".size({dim})")
                self.size_lines.append(f"    {names[sym.name]} = {read}")
        return f"({size_source(expr, pytype_of(value), names)})"

    def _deferred(self, var: Var) -> str:
        # Made once, where first needed: every use (returned twice, stored and returned) is
        # the same object, as in eager.
        found = self.memo.get(id(var))
        if found is not None:
            return found
        call: DeferredCall = var.value
        args = [self._argument(a) for a in call.args]
        args += [f"{name}={self._argument(a)}" for name, a in call.kwargs.items()]
        if call.op == "call_method":
            name = self.temp(f"{args[0]}.{call.target}({', '.join(args[1:])})")
        else:
            name = self.temp(f"{self.k(call.target)}({', '.join(args)})")
        self.memo[id(var)] = name
        return name

    def _argument(self, value: Any) -> str:
        """An argument of a deferred call: Vars, constants and containers of them."""
        if isinstance(value, Var):
            return self.expr(value)
        if isinstance(value, tuple):
            return "(" + "".join(self._argument(v) + ", " for v in value) + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self._argument(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.k(key)}: {self._argument(v)}" for key, v in value.items()) + "}"
        if isinstance(value, slice):
            return f"slice({self._argument(value.start)}, {self._argument(value.stop)}, {self._argument(value.step)})"
        return self.k(value)

    def _box(self, var: Var) -> str:
        found = self.memo.get(id(var.box))
        if found is not None:
            return found
        if var.source is not None:
            name = self.temp(source_expr(var.source, self.params))
        elif var.kind == "list":
            name = self.temp("[" + ", ".join(self.expr(v) for v in var.box.items) + "]")
        elif var.kind == "userobj":
            cls = var.value
            attrs = "{" + ", ".join(f"{n!r}: {self.expr(v)}" for n, v in var.box.attrs.items() if not is_slot(cls, n)) + "}"
            slots = "{" + ", ".join(f"{n!r}: {self.expr(v)}" for n, v in var.box.attrs.items() if is_slot(cls, n)) + "}"
            items = self._contents(var.box.items)
            name = self.temp(f"{self.k(new_object)}({self.k(cls)}, {attrs}, {items}, {slots})")
        elif var.kind == "dict":
            entries = "{" + ", ".join(f"{self.k(key)}: {self.expr(v)}" for key, v in var.box.items.items()) + "}"
            # An OrderedDict made in the trace (its class in ``value``) is rebuilt as one, in its order.
            name = self.temp(f"{self.k(var.value)}({entries})" if isinstance(var.value, type) else entries)
        else:
            name = self.temp(self._iterator(var.box))
        self.memo[id(var.box)] = name
        return name

    def _contents(self, storage: DictBox | ListBox | set[Any] | None) -> str:
        # What new_object refills a container subclass with: a dict's pairs, a list's items, a set's values.
        if storage is None:
            return "None"
        if isinstance(storage, DictBox):
            return "[" + ", ".join(f"({self.k(key)}, {self.expr(v)})" for key, v in storage.items.items()) + "]"
        if isinstance(storage, ListBox):
            return "[" + ", ".join(self.expr(v) for v in storage.items) + "]"
        return self.k(tuple(storage))

    def _iterator(self, box: IterBox) -> str:
        # The same items in the same order, read as lazily as the traced iterator would have:
        # a list's iterator reads the list from its position on, a chain's inputs stay unread.
        if is_view_iterator(box):
            return self._view_iterator(box)
        if box.step is not None:
            if box.remake is None or box.pos < len(box.items) or box.inner is not None or box.outer is not None:
                raise Unsupported("a lazy iterator (itertools) made in the trace cannot be rebuilt after the graph")
            remade, inputs = box.remake()
            return f"{self.k(remade)}({', '.join(self.expr(v) for v in inputs)})"
        parts = [] if box.inner is None else [self.expr(box.inner)]
        if box.over is not None:
            parts.append(f"{self.k(_list_iterator)}({self.expr(box.over)}, {box.pos})")
        elif box.pos < len(box.items) or not parts:
            parts.append("iter([" + ", ".join(self.expr(v) for v in box.items[box.pos :]) + "])")
        if box.outer is not None:
            parts.append(f"{self.k(itertools.chain.from_iterable)}({self.expr(box.outer)})")
        return parts[0] if len(parts) == 1 else f"{self.k(itertools.chain)}({', '.join(parts)})"

    def _view_iterator(self, box: IterBox) -> str:
        # A fresh iterator over the real view, advanced past what the trace took; only sound
        # while the dict holds the keys the iterator started with (else eager's next raises).
        assert box.over is not None
        if not view_unchanged(box):
            raise Unsupported("an iterator over a dict that changed during iteration cannot be rebuilt after the graph")
        start = "reversed" if box.reverse else "iter"
        return f"{self.k(_advanced)}({start}({self.expr(box.over)}), {box.pos})"

    def _function(self, var: Var) -> str:
        # A function made inside the trace is rebuilt with fresh cells holding the traced
        # contents; capture refuses breaks where the frame writes those cells afterwards.
        found = self.memo.get(id(var))
        if found is not None:
            return found
        made = var.value
        cells = []
        for box in made.cells:
            cell = self.memo.get(id(box))
            if cell is None:
                inner = self.expr(box.contents) if box.contents is not None else ""
                cell = self.temp(f"{self.k(types.CellType)}({inner})")
                self.memo[id(box)] = cell
            cells.append(cell)
        defaults = "(" + "".join(self.expr(v) + ", " for v in made.defaults) + ")" if made.defaults else "None"
        closure = "(" + "".join(c + ", " for c in cells) + ")" if cells else "None"
        if made.f_globals is self.frame_globals:
            globals_expr = "G"
            self.uses_globals = True
        else:
            globals_expr = self.k(made.f_globals)
        name = self.temp(
            f"{self.k(types.FunctionType)}({self.k(made.code)}, {globals_expr}, {made.code.co_name!r}, {defaults}, {closure})"
        )
        if made.kwdefaults:
            items = ", ".join(f"{key!r}: {self.expr(v)}" for key, v in made.kwdefaults.items())
            self.lines.append(f"    {name}.__kwdefaults__ = {{{items}}}")
        self.memo[id(var)] = name
        return name

    def bind_sources(self, roots: list[Var]) -> None:
        """Read into locals, now, every value that ``roots`` reach through a source.

        The side effects replayed next may rebind what a source reads (``x = self.x`` then
        ``self.x = None``, as transformers' ModelOutput.__post_init__ does); the values the
        trace holds are the ones read before.
        """
        seen: set[int] = set()
        pending = list(roots)
        while pending:
            var = pending.pop()
            if id(var) in seen:
                continue
            seen.add(id(var))
            if var.source is not None and var.kind in ("function", "callable", "module", "object"):
                if id(var) not in self.memo:
                    self.memo[id(var)] = self.temp(source_expr(var.source, self.params))
            elif var.source is not None and var.kind in ("list", "dict", "iter", "userobj"):
                self._box(var)
            else:
                pending.extend(_parts(var))

    def effect(self, effect: Effect) -> None:
        """Append the replay of one side effect."""
        if effect.kind == "global":
            assert effect.value is not None
            self.lines.append(f"    G[{effect.name!r}] = {self.expr(effect.value)}")
        elif effect.kind in ("setattr", "raw_setattr"):
            assert effect.target is not None and effect.value is not None
            store = "setattr" if effect.kind == "setattr" else "object.__setattr__"
            self.lines.append(f"    {store}({self.expr(effect.target)}, {effect.name!r}, {self.expr(effect.value)})")
        elif effect.kind == "call":
            assert effect.value is not None
            self.expr(effect.value)  # a deferred call: emitting its value makes the call
        else:
            assert effect.target is not None
            target = self.expr(effect.target)
            box = effect.target.box
            if effect.target.kind == "list":
                self.lines.append(f"    {target}[:] = [" + ", ".join(self.expr(v) for v in box.items) + "]")
            elif effect.target.kind == "userobj":
                # A dict subclass from the frame, refilled through its base's C methods: the
                # class's own (a model output's update raises) ran in the trace already.
                self.lines.append(f"    {self.k(refill_dict)}({target}, {self._contents(box.items)})")
            else:
                items = ", ".join(f"{self.k(key)}: {self.expr(v)}" for key, v in box.items.items())
                self.lines.append(f"    {target}.clear(); {target}.update({{{items}}})")


def _parts(var: Var) -> list[Var]:
    """The Vars inside ``var`` (items, contents, attributes, arguments) that the runner may rebuild."""
    kind, box = var.kind, var.box
    if kind in ("tuple", "method", "partial", "slice", "tensor_method", "container_method", "view"):
        return list(var.items)
    if kind == "list":
        return list(box.items)
    if kind == "dict":
        return list(box.items.values())
    if kind == "iter":
        pending: list[Var] = box.pending()
        return pending + ([box.over] if box.over is not None else [])
    if kind == "userobj":
        return box.contents()  # type: ignore[no-any-return]
    if kind == "deferred":
        return list(vars_in((var.value.args, var.value.kwargs)))
    if kind == "closure":
        return [cell.contents for cell in var.value.cells if cell.contents is not None]
    return []


def new_object(
    cls: type, attrs: dict[str, Any], items: Iterable[Any] | None = None, slots: dict[str, Any] | None = None
) -> Any:
    """An instance of ``cls`` with ``attrs`` as its __dict__ and ``slots`` in its slots (how objects made in a trace are rebuilt).

    ``items`` are the contents of a container subclass (a dict's key-value pairs, a list's or a
    set's items), stored through the base class's own C methods so that a class's overrides
    (``__setitem__``, ``append``, which may refuse or mirror writes) are not run; slots are
    stored through ``object.__setattr__``, past a frozen dataclass's ``__setattr__``, as its
    ``__init__`` does.
    """
    kind: Any = cls  # narrowed by issubclass below, which the __new__ calls must not see
    if items is None:
        obj: Any = object.__new__(kind)
    elif issubclass(cls, list):
        obj = list.__new__(kind)
        list.extend(obj, items)
    elif issubclass(cls, set):
        obj = set.__new__(kind)
        set.update(obj, items)
    else:
        obj = dict.__new__(kind)
        refill_dict(obj, items)
    if attrs:
        obj.__dict__.update(attrs)
    for name, value in (slots or {}).items():
        object.__setattr__(obj, name, value)
    return obj


def refill_dict(obj: Any, items: Iterable[tuple[Any, Any]]) -> None:
    """Make the storage of ``obj`` (a dict or OrderedDict subclass instance) hold exactly
    ``items``, in order, through the base class's own C methods (past the class's overrides)."""
    base: Any = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    base.clear(obj)
    for key, value in items:
        base.__setitem__(obj, key, value)


def _slot_names(code: types.CodeType) -> list[str]:
    nslots = code.co_argcount + code.co_kwonlyargcount
    nslots += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    return list(code.co_varnames[:nslots])


def build_runner(
    code: types.CodeType,
    f_globals: dict[str, Any],
    f_builtins: dict[str, Any],
    compiled: Callable[..., Any] | None,
    inputs: list[Any],
    outputs: list[Var],
    effects: list[Effect],
    result: Var | None,
    plan: BreakPlan | None,
    grad_mode: bool | None = None,
    autocast: AutocastSwitch | None = None,
    size_sources: dict[str, tuple[Any, int | None]] | None = None,
) -> Callable[..., Any]:
    """Return the runner function of one cache entry (its parameters are the frame's argument slots).

    ``grad_mode`` (when not None) is the grad mode to leave in place after the graph;
    ``autocast`` (when not None) says how the graph switches autocast; ``size_sources`` says
    where each size symbol is read from, for sizes that leave the graph.
    """
    slots = _slot_names(code)
    params = {name: f"_a{i}" for i, name in enumerate(slots)}
    out_index = {var.node: i for i, var in enumerate(outputs)}
    src = RunnerSource(params, out_index, frame_globals=f_globals, size_sources=dict(size_sources or {}))
    # The frame's globals arrive per call rather than being held by the runner: a cache entry
    # lives on its code object, and a strong reference to the globals would keep that code
    # (a function in those globals) alive through the code's extra slot, which GC cannot see.
    src.lines.append("")  # the header, written once we know whether the body reads G
    if compiled is not None:
        # Inputs sharing a chain (a module's parameters) read it once, with the hook off: a
        # module's __getattr__ is Python code.
        names: dict[Any, str] = dict(params)
        reads = hoisted_reads([s for s in inputs if isinstance(s, Source)], names, indent="        ")
        args = "".join(source_expr(s, names) + ", " for s in inputs)
        src.lines += ["    _prev = _set_callback(None)"]
        if autocast is not None:
            src.lines += [f"    _depth = {src.k(nesting)}()"]
        src.lines += ["    try:", *reads, f"        _o = _compiled({args})"]
        if autocast is not None:
            # A graph that raises inside a region leaves autocast as eager's with-block would:
            # restored by the region's __exit__.
            src.lines += ["    except BaseException:", f"        {src.k(restore)}({src.k(autocast.entry)}, _depth)", "        raise"]
        src.lines += ["    finally:", "        _set_callback(_prev)"]
    if grad_mode is not None:
        # The trace ends inside a grad-mode block: leave the mode as eager would have it,
        # whatever the backend did with the graph's own grad-mode switches.
        src.lines.append(f"    {src.k(torch.set_grad_enabled)}({grad_mode})")
    if autocast is not None and autocast.changes_state:
        # The trace ends inside (or after leaving) an autocast region: the graph itself ends in
        # its entry state, so put the thread where eager would be at this point.
        a = autocast
        src.lines.append(f"    {src.k(apply_transition)}({src.k(a.entry)}, {src.k(a.final)}, {a.open_regions})")
    if effects:
        roots = [v for e in effects for v in (e.target, e.value) if v is not None]
        if plan is None:
            roots += [] if result is None else [result]
        else:
            roots += [*plan.stack, *plan.locals.values()]
        src.bind_sources(roots)
    for effect in effects:
        src.effect(effect)
    if plan is None:
        assert result is not None
        src.lines.append(f"    return {src.expr(result)}")
    else:
        _break_ending(src, code, plan)
    # Sizes are read before the graph runs: an in-place op of the graph may change an input's shape.
    src.lines[1:1] = src.size_lines
    needs_globals = plan is not None or src.uses_globals or any("G[" in line for line in src.lines)
    header = ", ".join((["G"] if needs_globals else []) + list(params.values()) + (["C"] if code.co_freevars else []))
    src.lines[0] = f"def runner({header}):"
    text = "\n".join(src.lines)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("runner of %s:\n%s", code.co_qualname, text)
    namespace: dict[str, Any] = dict(src.consts)
    namespace.update(
        B=f_builtins,
        _compiled=compiled,
        # The extension's own setter: the Python wrapper's availability check would run twice a call.
        _set_callback=framehook._ext.set_callback if framehook.available else (lambda cb: None),
    )
    if plan is not None:
        namespace.update(_native=native_step, _inst=plan.inst, _kw=plan.kw_names, _insts=plan.instructions, _strip=strip_nulls)
        namespace["_resume"] = dict(plan.resume_codes)
        namespace["_FunctionType"] = types.FunctionType
    exec(compile(text, f"<ptc_capture runner of {code.co_qualname}>", "exec"), namespace)
    runner: Callable[..., Any] = namespace["runner"]
    # Called in the frame's place, the runner is the frame a traceback shows: give it the
    # function's name.
    runner.__code__ = runner.__code__.replace(co_name=code.co_name, co_qualname=code.co_qualname)
    runner._ptc_needs_globals = needs_globals  # type: ignore[attr-defined]
    if framehook.available:
        framehook.set_code_skip(runner.__code__, True)
    return runner


def _break_ending(src: RunnerSource, code: types.CodeType, plan: BreakPlan) -> None:
    stack = "[" + ", ".join(src.expr(v) for v in plan.stack) + "]"
    local_values = []
    for name in resume_parameters(code):
        var = plan.locals.get(name)
        if var is None and name in src.params and name not in code.co_cellvars:
            local_values.append(src.params[name])
        elif var is None:
            local_values.append("None")
        else:
            local_values.append(src.expr(var))
    src.lines.append(f"    _st = {stack}")
    src.lines.append("    _next = _native(_st, _inst, _kw, _insts)")
    src.lines.append("    _st = _strip(_st)")
    closure = "C" if code.co_freevars else "None"
    target = f"_FunctionType(_resume[_next], G, None, None, {closure})"
    joined = "".join(v + ", " for v in local_values)
    src.lines.append(f"    return {target}({joined}*_st)")


def direct_target(code: types.CodeType, runner: Callable[..., Any]) -> Callable[..., Any] | None:
    """``runner`` when the frame hook can call it with the frame's arguments as they are (only
    positional parameters, no free variables, no globals needed), else None."""
    plain = not code.co_freevars and not code.co_kwonlyargcount and not code.co_flags & 0x0C
    return runner if plain and not getattr(runner, "_ptc_needs_globals", True) else None


def make_replacement(code: types.CodeType, runner: Callable[..., Any]) -> types.CodeType:
    """Return a code object with ``code``'s signature and free variables whose body calls ``runner``."""
    slots = _slot_names(code)
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    names = [f"_a{i}" for i in range(len(slots))]
    for i in range(npos, npos + nkw):
        names[i] = slots[i]  # keyword-only parameters are passed by name
    parts: list[str] = []
    for i in range(npos):
        parts.append(names[i])
        if i + 1 == code.co_posonlyargcount:
            parts.append("/")
    index = npos + nkw
    if code.co_flags & 0x04:
        parts.append("*" + names[index])
        index += 1
    elif nkw:
        parts.append("*")
    parts.extend(names[npos : npos + nkw])
    if code.co_flags & 0x08:
        parts.append("**" + names[index])
    # globals() is called as a constant, not looked up: the frame's builtins may lack it (a
    # namedtuple's __new__ runs with empty builtins).
    call_args = (["'__ptc_globals__'()"] if getattr(runner, "_ptc_needs_globals", True) else []) + names
    if code.co_freevars:
        free = ", ".join(code.co_freevars)
        call_args.append(f"(lambda: ({free},)).__closure__")
    body = f"def {code.co_name if code.co_name.isidentifier() else 'frame'}({', '.join(parts)}):\n"
    body += f"    return '__ptc_runner__'({', '.join(call_args)})\n"
    if code.co_freevars:
        outer = "def __ptc_outer():\n"
        outer += f"    {' = '.join(code.co_freevars)} = None\n"
        outer += "".join("    " + line + "\n" for line in body.splitlines())
        outer += f"    return {body.split('(')[0][4:]}\n"
        text = outer
    else:
        text = body
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        module_code = compile(text, code.co_filename, "exec")
    inner = _find_code(module_code, code.co_freevars)
    substitutes = {"__ptc_runner__": runner, "__ptc_globals__": builtins.globals}
    consts = tuple(substitutes.get(c, c) if isinstance(c, str) else c for c in inner.co_consts)
    replacement = inner.replace(co_consts=consts, co_name=code.co_name, co_qualname=code.co_qualname)
    if replacement.co_freevars != code.co_freevars:
        raise Unsupported("could not reproduce the frame's free variables")
    return replacement


def _find_code(module_code: types.CodeType, freevars: tuple[str, ...]) -> types.CodeType:
    outer = next(c for c in module_code.co_consts if isinstance(c, types.CodeType))
    if not freevars:
        return outer
    return next(c for c in outer.co_consts if isinstance(c, types.CodeType) and c.co_freevars)


