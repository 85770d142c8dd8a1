"""Sources (where a value was read from in the frame) and guards (what the trace assumed about it).

Every guard set compiles into one Python function ``check(L, G, B, C) -> bool`` over the
frame's arguments ``L``, globals ``G``, builtins ``B`` and closure cells ``C``; that function is
the whole guard evaluation of a cached call.
"""

from __future__ import annotations

import collections
import logging
import math
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ptc_capture import tensormeta
from ptc_capture.logs import channel
from ptc_capture.symbolic_sizes import size_source, symbol_name
from ptc_spec import SymbolEnv, term_source, to_term

__all__ = ["Guard", "GuardSet", "ShapeGuards", "Source", "compile_guards", "describe_condition", "hoisted_reads", "key_types", "source_expr"]

_log = channel("guards")


@dataclass(frozen=True, slots=True)
class Source:
    """How to reach a value from a frame: ``kind`` is local/global/builtin/closure/attr/raw_attr/item/raw_item/listed/
    values/raw_values/reduce/referents/called.

    ``raw_attr`` reads ``object.__getattribute__(base, name)``, past any custom __getattribute__;
    ``raw_item`` reads ``dict.__getitem__(base, key)``, past a dict subclass's own ``__getitem__``;
    ``listed`` is ``list(base)``: the items of an iterable object that is not an iterator.
    ``values`` is ``list(base.values())`` (``raw_values``: through ``dict.values``, past a subclass's
    own): with a guard fixing the dict's keys, its ``item(i)`` is the value of the i-th key,
    which is how values are reached when their keys have no literal form (``torch.float16``).

    ``reduce`` reads ``base.__reduce__()``: how a list/tuple/range iterator passed to a resume
    function exposes its sequence and position without being advanced.
    ``referents`` lists what ``base`` holds (``gc.get_referents``): a dict view or a running dict
    iterator holds its dict first, and keeps no other reference to it.
    ``called`` is ``base()``: the object a weak reference from the frame refers to.
    """

    kind: str
    name: Any = None
    base: Source | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Computed once: guard compilation hashes deep sources (a 50-block model's weights)
        # over and over, and a recomputed hash walks the whole chain each time.
        found = self._hash
        if not found:
            found = hash((self.kind, self.name, self.base)) or 1
            object.__setattr__(self, "_hash", found)
        return found

    def attr(self, name: str) -> Source:
        """The source of ``self.<name>``."""
        return Source("attr", name, self)

    def item(self, key: Any) -> Source:
        """The source of ``self[key]``."""
        return Source("item", key, self)

    def __str__(self) -> str:
        return source_expr(self)


# Local names (str -> the runner's parameter) and hoisted sources (Source -> a temporary).
_Names = dict[Any, str] | None


def _local(s: Source, names: _Names) -> str:
    if names is not None and s.name in names:
        return names[s.name]
    return f"L[{s.name!r}]"


def _global(s: Source, names: _Names) -> str:
    return f"G[{s.name!r}]"


def _builtin(s: Source, names: _Names) -> str:
    return f"B[{s.name!r}]"


def _closure(s: Source, names: _Names) -> str:
    return f"C[{s.name!r}].cell_contents"


def _attr(s: Source, names: _Names) -> str:
    assert s.base is not None
    if str(s.name).isidentifier():
        return f"{source_expr(s.base, names)}.{s.name}"
    return f"getattr({source_expr(s.base, names)}, {s.name!r})"


# Sources read from a base value by one expression: {base} is the base's expression, {name} the
# repr of the source's name. raw_attr and raw_item go past a class's own __getattribute__ /
# __getitem__ (which may translate or refuse names), reading what the trace read; reduce is how
# a list/tuple/range iterator exposes its sequence and position without being advanced.
_DERIVED = {
    "raw_attr": "object.__getattribute__({base}, {name})",
    "raw_item": "dict.__getitem__({base}, {name})",
    "listed": "list({base})",
    "values": "list({base}.values())",
    "raw_values": "list(dict.values({base}))",
    "item": "{base}[{name}]",
    "reduce": "{base}.__reduce__()",
    "referents": "__import__('gc').get_referents({base})",
    "called": "{base}()",
}


def _derived(s: Source, names: _Names) -> str:
    assert s.base is not None
    return _DERIVED[s.kind].format(base=source_expr(s.base, names), name=repr(s.name))


_SOURCE_EXPR: dict[str, Callable[[Source, _Names], str]] = {
    "local": _local,
    "global": _global,
    "builtin": _builtin,
    "closure": _closure,
    "attr": _attr,
    **dict.fromkeys(_DERIVED, _derived),
}


def source_expr(source: Source, local_names: dict[Any, str] | None = None) -> str:
    """Return the Python expression (over L, G, B, C) that reads ``source``.

    ``local_names`` renders a local as a plain variable name instead of ``L[name]``, and a
    Source found in it (a value computed once and bound to a temporary) as that name.
    """
    if local_names is not None and source in local_names:
        return local_names[source]
    return _SOURCE_EXPR[source.kind](source, local_names)


@dataclass(frozen=True, slots=True)
class Guard:
    """One assumption: ``kind`` names the check, ``expected`` what it compares with.

    Tensor guards keep sizes and strides per dimension (a tuple) so that a later
    dynamic-shapes pass can relax single dimensions.
    """

    kind: str
    source: Source | None
    expected: Any = None

    def describe(self) -> str:
        """A one-line human description."""
        if self.kind == "shape_env":
            return f"SHAPE_ENV: {self.expected}"
        where = source_expr(self.source) if self.source is not None else "<global state>"
        return f"{self.kind.upper()}: {where} {_describe_expected(self)}"


def _describe_expected(guard: Guard) -> str:
    if guard.kind == "int_symbol":
        return f"is an int, read as size {guard.expected}"
    if guard.kind == "tensor":
        ty, dtype, device, shape, stride, rg = guard.expected
        return f"{ty.__name__} {dtype} {device} size={list(shape)} stride={list(stride)} requires_grad={rg}"
    if guard.kind == "id":
        return f"is {type(guard.expected).__name__} object at {id(guard.expected):#x}"
    if guard.kind == "same_as":
        return f"is {source_expr(guard.expected)}"
    if guard.kind == "distinct_tensors":
        return "the tensor inputs are distinct objects"
    if guard.kind in ("type", "len", "keys", "const"):
        return repr(guard.expected if not isinstance(guard.expected, type) else guard.expected.__name__)
    return repr(guard.expected)


# Each emitter appends Python lines checking ``v`` (the source's value); ``k`` registers a
# constant the generated code refers to and returns its name; ``bound`` holds the size symbols
# already read into locals (``_sym_s0``) by earlier guards of the same function.
_Emit = Callable[[Guard, Callable[[Any], str], set[str]], list[str]]
_EMITTERS: dict[str, _Emit] = {}


def _emitter(kind: str) -> Callable[[_Emit], _Emit]:
    def register(fn: _Emit) -> _Emit:
        _EMITTERS[kind] = fn
        return fn

    return register


_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


@_emitter("tensor")
def _emit_tensor(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    return _tensor_lines(g, k, bound, None)


def _tensor_lines(g: Guard, k: Callable[[Any], str], bound: set[str], ids: str | None) -> list[str]:
    """A tensor guard's lines; with ``ids``, they also append the tensor's id to that list once
    it matched (the distinctness check's input)."""
    lines, collected = _tensor_check(g, k, bound, ids)
    if ids is not None and not collected:
        lines.append(f"{ids}.append(id(v))")
    return lines


def _tensor_check(g: Guard, k: Callable[[Any], str], bound: set[str], ids: str | None) -> tuple[list[str], bool]:
    """The check's lines, and whether they append the id to ``ids`` themselves."""
    ty, dtype, device, shape, stride, rg = g.expected
    # is_cpu and get_device() answer without building a torch.device object; get_device() is
    # the CUDA index (-1 for CPU and meta), so it pins a CUDA tensor's device exactly.
    if device.type == "cpu":
        device_check = "not v.is_cpu"
    elif device.type == "cuda" and device.index is not None:
        device_check = f"v.get_device() != {device.index}"
    else:
        device_check = f"v.device != {k(device)}"
    head = f"if type(v) is not {k(ty)} or v.dtype is not {k(dtype)} or v.requires_grad is not {rg}: return False"
    if all(type(s) is int for s in (*shape, *stride)):
        # Only for torch's own tensor types: a subclass may answer size(), stride() or dtype in
        # Python with something other than what its TensorImpl holds.
        packed = tensormeta.spec(dtype, device, rg, tuple(shape), tuple(stride)) if ty in _PLAIN_TENSOR_TYPES else None
        ext = tensormeta.module() if packed is not None else None
        if packed is not None and ext is not None:
            # The same comparison on the TensorImpl: about a tenth of the Python checks' time.
            # It appends the id itself: one Python line less a tensor (BERT-base checks 202).
            extra = f", {ids}" if ids is not None else ""
            return [f"if not {k(ext.check)}(v, {k(ty)}, {k(packed)}{extra}): return False"], ids is not None
        return [head, f"if {device_check} or v.size() != {k(tuple(shape))} or v.stride() != {k(tuple(stride))}: return False"], False
    # Dynamic dims: each symbol is read from the dim it stands for (the first time it is met);
    # static dims are compared one by one; strides are the layout's expressions over the symbols.
    # A tensor of another rank fails the unpacking, which the function reports as a miss.
    names = symbol_names((*shape, *stride))
    targets: list[str] = []
    checks = [device_check]
    for dim, size in enumerate(shape):
        if isinstance(size, sympy.Symbol) and size.name not in bound:
            bound.add(size.name)
            targets.append(symbol_name(size.name))
        else:
            targets.append(f"_d{dim}")
            checks.append(f"_d{dim} != {size_source(size, int, names)}")
    strides = "".join(size_source(s, int, names) + ", " for s in stride)
    checks.append(f"v.stride() != ({strides})")
    return [head, f"{''.join(t + ', ' for t in targets)}= v.size()", f"if {' or '.join(checks)}: return False"], False


def symbol_names(exprs: Iterable[Any]) -> dict[str, str]:
    """Each size symbol in ``exprs`` -> the local of generated code that holds its value."""
    found: dict[str, str] = {}
    for e in exprs:
        if isinstance(e, sympy.Basic):
            for sym in e.free_symbols:
                found[sym.name] = symbol_name(sym.name)
    return found


@dataclass(frozen=True, slots=True)
class ShapeGuards:
    """The SymbolEnv's guards of one capture: conditions on the size symbols that the trace relied on."""

    exprs: tuple[sympy.Basic, ...]
    source: str
    """The guards as one Python expression over the locals ``_sym_<name>`` the tensor guards bind."""

    @classmethod
    def of(cls, env: SymbolEnv) -> ShapeGuards:
        """A snapshot of ``env``'s guards."""
        return cls(env.guards, env.guards_source(symbol_names(env.guards)))

    def __str__(self) -> str:
        return " and ".join(describe_condition(e) for e in self.exprs)


def describe_condition(expr: sympy.Basic) -> str:
    """A size condition as a person writes it (``s0 <= 512``, ``s0 == s1``)."""
    return term_source(to_term(expr, bool)).removeprefix("(").removesuffix(")")


@_emitter("int_symbol")
def _emit_int_symbol(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    # An int argument that is a size symbol: any int, read into the symbol's local; the
    # SymbolEnv's guards then say which values the entry admits.
    bound.add(g.expected)
    return ["if type(v) is not int: return False", f"{symbol_name(g.expected)} = v"]


@_emitter("shape_env")
def _emit_shape_env(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    shape: ShapeGuards = g.expected
    return [f"if not ({shape.source}): return False"]


@_emitter("const")
def _emit_const(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    value = g.expected
    if isinstance(value, float) and math.isnan(value):
        return ["if type(v) is not float or v == v: return False"]
    if value is None or isinstance(value, bool):
        return [f"if v is not {value!r}: return False"]
    return [f"if type(v) is not {k(type(value))} or v != {k(value)}: return False"]


@_emitter("id")
def _emit_id(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    return [f"if v is not {k(g.expected)}: return False"]


@_emitter("same_as")
def _emit_same_as(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    # One tensor reached through a second source (tied weights, `f(x, x)`): the trace made them
    # one graph input and answered `is` between them, so they must stay one object.
    return [f"if v is not {source_expr(g.expected)}: return False"]


@_emitter("distinct_tensors")
def _emit_distinct_tensors(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    # The graph's tensor inputs were distinct objects when traced (`a is b` answered False, a
    # write to one not seen through another): `f(x, y)`'s entry must not serve `f(x, x)`. The
    # tensor guards collect their objects' ids into _t as they check them.
    return ["if len(set(_t)) != len(_t): return False"]


@_emitter("type")
def _emit_type(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    return [f"if type(v) is not {k(g.expected)}: return False"]


@_emitter("len")
def _emit_len(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    ty, n = g.expected
    return [f"if type(v) is not {k(ty)} or len(v) != {n}: return False"]


@_emitter("keys")
def _emit_keys(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    ty, keys = g.expected
    if ty is dict or ty is collections.OrderedDict:
        listed = "list(v)"
    else:
        # A dict subclass may override __iter__/keys; its storage's own key order is what was read.
        base = collections.OrderedDict if issubclass(ty, collections.OrderedDict) else dict
        listed = f"list({k(base.keys)}(v))"
    check = f"type(v) is not {k(ty)} or {listed} != {k(list(keys))}"
    if not all(type(key) is str for key in keys):
        # Keys compare by value across types (1 == 1.0 == True, ('a', 1) == ('a', True)), but the
        # trace baked each key in as the object it read: the types must match too.
        check += f" or {k(key_types)}({listed}) != {k(key_types(keys))}"
    return [f"if {check}: return False"]


def key_types(keys: Iterable[Any]) -> tuple[Any, ...]:
    """The type of each key, tuples spelled out item by item (what a keys guard compares besides the keys)."""
    return tuple(_key_type(key) for key in keys)


def _key_type(key: Any) -> Any:
    if type(key) is tuple:
        return (tuple, key_types(key))
    return type(key)


@_emitter("absent")
def _emit_absent(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    return [f"if {g.expected!r} in G: return False"]


@_emitter("grad_mode")
def _emit_grad_mode(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    return [f"if {k(torch.is_grad_enabled)}() is not {bool(g.expected)}: return False"]


@_emitter("state_call")
def _emit_state_call(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    predicate, value = g.expected
    return [f"if {k(predicate)}() is not {value!r}: return False"]


@_emitter("autocast")
def _emit_autocast(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    from ptc_capture.autocast_state import guard_holds

    expected = g.expected
    if not any(enabled for _, enabled, _ in expected):
        # The common case (no autocast anywhere) costs one C call.
        return [f"if {k(torch._C._is_any_autocast_enabled)}() and not {k(guard_holds)}({k(expected)}): return False"]
    return [f"if not {k(guard_holds)}({k(expected)}): return False"]


@_emitter("autocast_nesting")
def _emit_autocast_nesting(g: Guard, k: Callable[[Any], str], bound: set[str]) -> list[str]:
    from ptc_capture.autocast_state import nesting_is

    count, expected = g.expected
    return [f"if not {k(nesting_is)}({count}, {expected}): return False"]


@dataclass(slots=True)
class GuardSet:
    """The guards of one trace, in the order they were added, without duplicates (mutable while tracing)."""

    guards: dict[tuple[str, Source | None, Any], Guard] = field(default_factory=dict)

    def add(self, guard: Guard) -> None:
        """Record ``guard`` unless an identical one is there already."""
        key = (guard.kind, guard.source, _hashable(guard.expected))
        self.guards.setdefault(key, guard)

    def __iter__(self) -> Any:
        return iter(self.guards.values())

    def __len__(self) -> int:
        return len(self.guards)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value


# Sources that build a new object each time they are read (a list of a dict's values, an
# iterator's __reduce__): guards read them once into a temporary, so checking n values of one
# dict costs one list, not n.
_BUILT = ("listed", "values", "raw_values", "reduce")


def _chain(source: Source) -> list[Source]:
    """``source`` and every source it is read through, outermost (the frame's variable) first."""
    chain: list[Source] = []
    s: Source | None = source
    while s is not None:
        chain.append(s)
        s = s.base
    chain.reverse()
    return chain


def _hoist(source: Source, hoisted: dict[Any, str], shared: set[Source]) -> list[str]:
    """Lines binding each not yet bound built or ``shared`` source under ``source`` (outermost
    first) to a temporary, at its first use: later guards read the temporary instead of walking
    the chain again (a module's guards share long prefixes: ``C[0].cell_contents.layer[3]...``)."""
    lines = []
    for s in _chain(source):
        if (s.kind in _BUILT or s in shared) and s not in hoisted:
            expr = source_expr(s, hoisted)
            hoisted[s] = f"_s{len(hoisted)}"
            lines.append(f"    {hoisted[s]} = {expr}")
    return lines


# Objects that nothing can change: an identity guard on one of them fixes everything read
# from it, so guards below it (a code object's co_varnames, a constant tuple's items) are implied.
_IMMUTABLE_LEAVES = (str, bytes, int, float, complex, bool, type(None), type(Ellipsis), types.CodeType)


def _frozen(value: Any) -> bool:
    if type(value) in (tuple, frozenset):
        return all(_frozen(v) for v in value)
    return type(value) in _IMMUTABLE_LEAVES


def _implied(guards: list[Guard]) -> set[int]:
    """Indexes of guards that an identity guard on a frozen object (earlier or later) implies."""
    fixed = {g.source for g in guards if g.kind == "id" and g.source is not None and _frozen(g.expected)}
    implied = set()
    for i, g in enumerate(guards):
        if g.source is None or not fixed:
            continue
        above = _chain(g.source)[:-1]
        if any(s in fixed for s in above) or (g.kind == "type" and g.source in fixed):
            implied.add(i)
    return implied


def _shared_sources(sources: Iterable[Source]) -> set[Source]:
    """Sources, other than the frame's own variables, that two or more of ``sources`` read through."""
    uses: collections.Counter[Source] = collections.Counter()
    for source in sources:
        uses.update(set(_chain(source)))
    return {s for s, n in uses.items() if n > 1 and s.kind not in ("local", "global", "builtin")}


def hoisted_reads(sources: Iterable[Source], names: dict[Any, str], indent: str = "    ") -> list[str]:
    """Lines binding every source two or more of ``sources`` read through to a temporary (added to
    ``names``), so that ``source_expr(s, names)`` reads each of them from the nearest temporary:
    a model's parameters share their module chains, which each read walked again."""
    sources = list(sources)
    shared = _shared_sources(sources)
    return [indent + line.lstrip() for s in sources for line in _hoist(s, names, shared)]


def _through_pinned(guards: list[Guard]) -> list[Guard]:
    """The guards with each source read through the first source pinned to the same object, and
    the duplicates this makes dropped.

    An identity guard pins an object; whatever is read from it is the same through any source
    that is pinned to it. Every layer of a transformer reaches its class's ``forward`` (and the
    decorators' closures, their globals, ...) through its own module: twelve layers made twelve
    copies of each of those guards (a 12-layer BERT's guard function: 9892 lines, 6465 without
    the copies). Only the part of a source above the guarded value is rewritten: the identity
    guards themselves all stay.
    """
    guards = _typed_class_reads(guards)
    first: dict[int, Source] = {}
    pinned: dict[Source, Source] = {}
    for g in guards:
        if g.source is None:
            continue
        if g.kind == "id":
            pinned[g.source] = first.setdefault(id(g.expected), g.source)
        elif g.kind == "type" and _class_reads_as_type(g.expected):
            # A type guard pins the value's __class__ too: every BERT layer reaches its Linear
            # modules' ``__class__.forward.__globals__['F']`` through its own chain.
            for kind in ("attr", "raw_attr"):
                read = Source(kind, "__class__", g.source)
                pinned[read] = first.setdefault(id(g.expected), read)
    if len(first) == len(pinned):
        return guards
    done: dict[Source, Source] = {}

    def canonical(s: Source) -> Source:
        found = done.get(s)
        if found is None:
            # Provisionally itself: an object that leads to itself (``type.__class__``) must not
            # send the walk round in a circle.
            done[s] = s
            base = None if s.base is None else canonical(s.base)
            found = s if base is s.base else Source(s.kind, s.name, base)
            target = pinned.get(s, pinned.get(found))
            if target is not None and target != s and target != found:
                found = canonical(target)
            done[s] = found
        return found

    seen: set[Any] = set()
    kept: list[Guard] = []
    for g in guards:
        if g.source is not None and g.source.base is not None:
            base = canonical(g.source.base)
            if base != g.source.base:
                g = Guard(g.kind, Source(g.source.kind, g.source.name, base), g.expected)
        try:
            key = (g.kind, g.source, g.expected)
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable expected value: kept as it is
            duplicate = False
        if not duplicate:
            kept.append(g)
    return kept


def _typed_class_reads(guards: list[Guard]) -> list[Guard]:
    """``guards`` with a type guard added after each identity guard whose object's ``__class__``
    other guards read through. An identity guard does not fix a class (``obj.__class__ = ...``);
    the type guard does, and it lets _through_pinned read every instance's class-level values
    (``Linear.forward.__globals__['F']``) through one instance instead of each."""
    read_through: set[Source] = set()
    for g in guards:
        if g.source is not None:
            for s in _chain(g.source)[:-1]:
                if s.kind in ("attr", "raw_attr") and s.name == "__class__" and s.base is not None:
                    read_through.add(s.base)
    if not read_through:
        return guards
    typed = {g.source for g in guards if g.kind == "type"}
    out: list[Guard] = []
    for g in guards:
        out.append(g)
        source = g.source
        if g.kind == "id" and source in read_through and source not in typed:
            cls = type(g.expected)
            if _class_reads_as_type(cls):
                out.append(Guard("type", source, cls))
                typed.add(source)
    return out


def _class_reads_as_type(cls: Any) -> bool:
    """True when ``v.__class__`` is ``cls`` for every ``v`` with ``type(v) is cls``: neither the
    class nor a base replaces ``__class__``, and no custom ``__getattribute__`` intercepts reads."""
    if not isinstance(cls, type):
        return False
    try:
        mro = type.__getattribute__(cls, "__mro__")
    except AttributeError:
        return False
    return all(c is object or ("__class__" not in vars(c) and "__getattribute__" not in vars(c)) for c in mro)


def compile_guards(guards: Iterable[Guard]) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any], Any], bool]:
    """Return one function ``check(L, G, B, C)`` that is True when every guard holds."""
    consts: dict[str, Any] = {}
    by_id: dict[int, str] = {}

    def k(value: Any) -> str:
        name = by_id.get(id(value))
        if name is None:
            name = f"_k{len(consts)}"
            consts[name] = value
            by_id[id(value)] = name
        return name

    lines = ["def check(L, G, B, C):", "  try:", "    _t = []"]
    hoisted: dict[Any, str] = {}
    bound: set[str] = set()
    guards = _through_pinned(list(guards))
    # The distinctness check reads the ids the tensor guards collect, so it goes after all of them.
    distinct = any(g.kind == "distinct_tensors" for g in guards)
    guards = [g for g in guards if g.kind != "distinct_tensors"] + [g for g in guards if g.kind == "distinct_tensors"][:1]
    implied = _implied(guards)
    shared = _shared_sources([g.source for i, g in enumerate(guards) if i not in implied and g.source is not None])
    read: Source | None = None  # the source ``v`` holds; no emitted line rebinds ``v``
    for i, guard in enumerate(guards):
        if i in implied:
            continue
        if guard.source is not None and guard.source != read:
            lines += _hoist(guard.source, hoisted, shared)
            lines.append(f"    v = {source_expr(guard.source, hoisted)}")
            read = guard.source
        if guard.kind == "tensor":
            emitted = _tensor_lines(guard, k, bound, "_t" if distinct else None)
        else:
            emitted = _EMITTERS[guard.kind](guard, k, bound)
        lines += ["    " + line for line in emitted]
    # A source that no longer resolves (missing key or attribute) is a guard miss, not an error.
    lines += ["  except Exception:", "    return False", "  return True"]
    text = "\n".join(lines)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("guard function:\n%s", text)
    namespace: dict[str, Any] = dict(consts)
    exec(compile(text, "<ptc_capture guards>", "exec"), namespace)
    check: Callable[[dict[str, Any], dict[str, Any], dict[str, Any], Any], bool] = namespace["check"]
    return check
