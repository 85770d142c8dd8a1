"""Symbolic sizes in a capture: their graph values, their Python source, and specializing them.

An input with dynamic dims gets a placeholder whose meta tensor has ``torch.SymInt`` sizes over
the capture's SymbolEnv (ptc-spec), so every size the trace reads (``x.shape[1]``, ``len(x)``,
``x.numel()``) or computes from those (``n * 2``, ``n / 2``, ``n > 512``) is a SymInt,
SymFloat or SymBool: a ``sym`` Var. Arithmetic on them stays symbolic; a decision on one
(a branch, ``range(n)``, a dict key) is made at the example sizes and recorded as a guard
by the SymbolEnv. At run time a size is needed in three places, each rebuilt from the
actual input sizes rather than baked in:

- as an op argument (``x.view(n, -1)``): the graph computes it from its inputs, as
  ``aten.sym_size.int`` of the placeholder the symbol is a dim of plus ``operator`` arithmetic
  (:class:`SizeNodes`, the same lowering ptc-spec's tracer uses, so every stage reads it);
- in the guard function, which reads each symbol from its input's size;
- in the runner, when a size leaves the graph (returned, stored, carried to a graph break).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy
import torch
import torch.fx

from ptc_spec import META_KEY, SymbolEnv, TensorMeta, Term, expr_of, term_source, term_value, to_term

__all__ = [
    "SYM_TYPES", "SizeNodes", "concrete", "constant_of", "free_symbols", "hinted", "is_symbolic", "mentions_symbols",
    "pytype_of", "size_source", "symbol_name", "symbolic_index",
]  # fmt: skip

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

aten = torch.ops.aten


def is_symbolic(value: Any) -> bool:
    """True for a SymInt/SymFloat/SymBool whose value is not a constant."""
    if not isinstance(value, SYM_TYPES):
        return False
    expr = expr_of(value)
    return not (expr.is_number or expr in (sympy.true, sympy.false))


def pytype_of(value: Any) -> type:
    """The Python type a symbolic value stands for (int, float or bool)."""
    if isinstance(value, torch.SymBool):
        return bool
    if isinstance(value, torch.SymFloat):
        return float
    if isinstance(value, torch.SymInt):
        return int
    return type(value)


def constant_of(value: Any) -> Any:
    """The plain Python value of a symbolic value whose expression is a constant (else ``value``)."""
    if not isinstance(value, SYM_TYPES):
        return value
    expr = expr_of(value)
    if expr in (sympy.true, sympy.false):
        return bool(expr)
    if expr.is_number:
        return pytype_of(value)(expr)
    return value


def concrete(value: Any) -> Any:
    """``value`` with every symbolic number replaced by its value at the example sizes, guarded.

    The specialization of code that needs a real Python value (``range(n)``, a dict key, an
    f-string): ``int(SymInt)`` asks the SymbolEnv, which records ``Eq(s0, 16)``.
    """
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymInt):
        return int(value)
    ty = type(value)
    if ty is tuple or ty is list:
        return ty(concrete(v) for v in value)
    if ty is torch.Size:
        return torch.Size([concrete(v) for v in value])
    if ty is slice:
        return slice(concrete(value.start), concrete(value.stop), concrete(value.step))
    if ty is dict:
        return {k: concrete(v) for k, v in value.items()}
    return value


def hinted(value: Any, env: SymbolEnv) -> Any:
    """``value`` at the example sizes, recording nothing: symbolic numbers become their hints and
    meta tensors with symbolic sizes become meta tensors of the hinted layout."""
    if isinstance(value, SYM_TYPES):
        return pytype_of(value)(env.size_hint(expr_of(value)))
    if isinstance(value, torch.Tensor):
        meta = TensorMeta.from_tensor(value)
        if not meta.is_symbolic:
            return value
        return meta.to_meta_tensor(hints=env.hints)
    if isinstance(value, (tuple, list)):
        items = [hinted(v, env) for v in value]
        return type(value)(items) if type(value) in (tuple, list) else items
    if isinstance(value, dict):
        return {k: hinted(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(hinted(value.start, env), hinted(value.stop, env), hinted(value.step, env))
    return value


def mentions_symbols(value: Any) -> bool:
    """True when a structure of meta arguments holds a symbolic number or a meta tensor with symbolic sizes."""
    if isinstance(value, SYM_TYPES):
        return is_symbolic(value)
    if isinstance(value, torch.Tensor):
        return TensorMeta.from_tensor(value).is_symbolic
    if isinstance(value, (tuple, list)):
        return any(mentions_symbols(v) for v in value)
    if isinstance(value, dict):
        return any(mentions_symbols(v) for v in value.values())
    if isinstance(value, slice):
        return mentions_symbols((value.start, value.stop, value.step))
    return False


def free_symbols(value: Any) -> set[sympy.Symbol]:
    """The size symbols a structure of meta arguments mentions."""
    found: set[sympy.Symbol] = set()
    if isinstance(value, SYM_TYPES):
        found |= expr_of(value).free_symbols
    elif isinstance(value, torch.Tensor):
        found |= set(TensorMeta.from_tensor(value).symbols)
    elif isinstance(value, (tuple, list)):
        for v in value:
            found |= free_symbols(v)
    elif isinstance(value, dict):
        for v in value.values():
            found |= free_symbols(v)
    elif isinstance(value, slice):
        found |= free_symbols((value.start, value.stop, value.step))
    return found


def symbolic_index(tensor: torch.Tensor, index: Any) -> torch.Tensor | None:
    """``tensor[index]`` on a meta tensor when ``index`` holds symbolic ints, else None.

    Tensor indexing converts an int index to a C++ int, which specializes a SymInt; ``select``
    takes it symbolically. So the rest of the index is applied first, with each symbolic int
    kept as a full slice, and those dims are then selected, last first (the result's sizes,
    strides and offset are those of the direct indexing).
    """
    items = index if type(index) is tuple else (index,)
    if not any(is_symbolic(i) and isinstance(i, torch.SymInt) for i in items):
        return None
    if not all(i is None or i is Ellipsis or isinstance(i, (int, slice, torch.SymInt)) for i in items):
        return None  # advanced indexing (tensors, lists): left to torch
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    plain: list[Any] = []
    selects: list[tuple[int, Any]] = []
    position = 0
    for item in items:
        if isinstance(item, torch.SymInt) and is_symbolic(item):
            selects.append((position, item))
            plain.append(slice(None))
            position += 1
        elif item is Ellipsis:
            plain.append(item)
            position += tensor.dim() - consumed
        else:
            plain.append(item)
            position += 0 if isinstance(item, (int, torch.SymInt)) else 1
    out = tensor[tuple(plain)]
    for dim, value in reversed(selects):
        out = out.select(dim, value)
    return out


def symbol_name(name: str) -> str:
    """The local variable that holds symbol ``name``'s value in generated guards and runners."""
    return f"_sym_{name}"


def size_source(expr: sympy.Basic | int, pytype: type, names: Mapping[str, str]) -> str:
    """Python source computing ``expr`` (of Python type ``pytype``), symbol ``s`` read as ``names[s]``."""
    if isinstance(expr, (bool, int, float)):
        return repr(pytype(expr))
    if expr in (sympy.true, sympy.false):
        return repr(bool(expr))
    if expr.is_number:
        return repr(pytype(expr))
    return term_source(to_term(expr, pytype), names)


class SizeNodes:
    """The graph values of symbolic sizes in one graph under construction (mutable: the graph's).

    A symbol is read with ``aten.sym_size.int`` from the first placeholder that has it as a
    dim; expressions become ``operator`` nodes over those (``//`` for floor division,
    ``torch.sym_max``/``sym_min``). Each distinct term is computed once.
    """

    def __init__(self, graph: torch.fx.Graph, env: SymbolEnv) -> None:
        self.graph = graph
        self.env = env
        self.sources: dict[sympy.Symbol, tuple[torch.fx.Node, int]] = {}
        self.int_sources: dict[sympy.Symbol, Any] = {}
        """Symbols of int arguments (size symbols with no tensor dim) -> their sources."""
        self._nodes: dict[Term, torch.fx.Node] = {}

    def add_input(self, node: torch.fx.Node, meta: TensorMeta) -> None:
        """Record the dims of placeholder ``node`` that are symbols."""
        for dim, size in enumerate(meta.shape):
            if isinstance(size, sympy.Symbol):
                self.sources.setdefault(size, (node, dim))

    def add_int_input(self, sym: sympy.Symbol, source: Any) -> None:
        """Record that ``sym`` is the value of an int argument read from ``source``."""
        self.int_sources[sym] = source

    def value(self, value: Any) -> Any:
        """The graph argument standing for a SymInt/SymFloat/SymBool: a node, or a constant."""
        pytype = pytype_of(value)
        expr = self.env.simplify(expr_of(value))
        if expr in (sympy.true, sympy.false):
            return bool(expr)
        if expr.is_number:
            return pytype(expr)
        return self._emit(to_term(expr, pytype))

    def _emit(self, term: Term) -> Any:
        if isinstance(term, (bool, int, float)):
            return term
        found = self._nodes.get(term)
        if found is not None:
            return found
        if isinstance(term, sympy.Symbol):
            source = self.sources.get(term) or self._int_source(term)
            if source is None:
                # Specialized: the graph uses the example value, which the guards now fix.
                return self.env.guard_int(term)
            node = self.graph.call_function(aten.sym_size.int, source)
        else:
            node = self.graph.call_function(term.fn, tuple(self._emit(a) for a in term.args))
        node.meta[META_KEY] = self.env.simplify(term_value(term))
        self._nodes[term] = node
        return node

    def _int_source(self, sym: sympy.Symbol) -> tuple[torch.fx.Node, int] | None:
        """Where the graph reads an int argument's symbol: a tensor dim with the same value.

        Graph inputs are tensors, so an int (a size a graph break carried over, say) is read
        from a dynamic dim of the same example value, with a guard that they stay equal; with
        no such dim the int is specialized (None). A symbol of no input at all is a bug.
        """
        if sym not in self.int_sources:
            raise KeyError(f"size {sym} is not a dim of any graph input")
        hint = self.env.hints[sym]
        for other, source in self.sources.items():
            if self.env.hints.get(other) == hint and self.env.statically_known(sympy.Ne(sym, other)) is not True:
                self.env.guard_bool(sympy.Eq(sym, other))
                self.sources[sym] = source
                return source
        return None
