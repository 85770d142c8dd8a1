"""SymNode: ptc's node behind ``torch.SymInt``, ``torch.SymBool`` and ``torch.SymFloat``.

A ``torch.SymInt(node)`` delegates everything to ``node`` by method name, from C++ (the
dispatcher and the C++ meta kernels: ``add``, ``guard_bool``, ``is_contiguous``...) and from
Python (the arithmetic dunders torch installs on SymInt call ``node.add(other_node)``;
torch's size helpers that Python meta kernels use read ``node.expr`` and ``node._hint``). Each method here is one of those names. A node holds a
sympy expression (simplified by its SymbolEnv), the SymbolEnv, and its Python type; every
decision (``guard_*``, ``bool_``, ``int_``) goes to the SymbolEnv, which records a guard.

This class deliberately has no ``shape_env`` attribute: torch's Python helpers then treat it
as a foreign SymNode and call its ``guard_*`` methods instead of reaching into torch's own
shape-environment internals.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from .shapes import SymbolEnv, short_binary_fraction

PyType = type[int] | type[float] | type[bool]

# Math on SymFloats that sizes never need symbolically: answered at the hint, guarded.
_SPECIALIZED_MATH: dict[str, Callable[[float], float]] = {
    "sym_cos": math.cos, "sym_cosh": math.cosh, "sym_sin": math.sin, "sym_sinh": math.sinh,
    "sym_tan": math.tan, "sym_tanh": math.tanh, "sym_asin": math.asin, "sym_acos": math.acos,
    "sym_atan": math.atan, "sym_log2": math.log2,
}  # fmt: skip


def _as_python_float(expr: sympy.Basic, values: dict[Any, int]) -> float:
    """``expr`` computed in Python floats, operand by operand, as eager computes a size from a
    float scale (printing it, as lambdify does, would round its constants to 15 digits)."""
    if isinstance(expr, sympy.Symbol):
        return float(values[expr])
    if isinstance(expr, sympy.Number):
        return float(expr)
    parts = [_as_python_float(a, values) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return builtins.sum(parts[1:], parts[0])
    if isinstance(expr, sympy.Mul):
        out = parts[0]
        for p in parts[1:]:
            out *= p
        return out
    if isinstance(expr, sympy.Pow):
        return float(parts[0] ** parts[1])
    return float(expr.subs(values))


def _promoted(a: SymNode, b: SymNode) -> PyType:
    return float if float in (a.pytype, b.pytype) else int


class SymNode:
    """A symbolic int, float or bool: a sympy expression over the sizes of one SymbolEnv."""

    __slots__ = ("env", "expr", "pytype")

    def __init__(self, expr: sympy.Basic | int | float | bool, env: SymbolEnv, pytype: PyType) -> None:
        self.env = env
        self.expr: sympy.Basic = env.simplify(sympy.sympify(expr))
        self.pytype = pytype

    def __repr__(self) -> builtins.str:
        return f"SymNode({self.expr}, {self.pytype.__name__})"

    # -- what it is ------------------------------------------------------------------------
    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def nested_int_coeff(self) -> None:
        return None

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        # torch's SymFloat dunders cannot unwrap a constant SymFloat (they assert SymInt or
        # SymBool), so a float node is never reported constant.
        if self.pytype is float:
            return False
        return bool(self.expr.is_number) or self.expr in (sympy.true, sympy.false)

    def has_hint(self) -> bool:
        return self.env.has_hint(self.expr)

    @property
    def hint(self) -> int | float | bool | None:
        """The value at the example sizes, or None for data-dependent sizes."""
        if not self.env.has_hint(self.expr):
            return None
        return self.pytype(self.env.size_hint(self.expr))

    @property
    def _hint(self) -> int | float | bool | None:
        # torch's statically_known_true reads ``node._hint`` to answer fast; same value.
        return self.hint

    def maybe_as_int(self) -> int | None:
        return int(self.expr) if isinstance(self.expr, sympy.Integer) else None

    def maybe_as_float(self) -> float | None:
        return float(self.expr) if self.expr.is_number else None

    def maybe_as_bool(self) -> bool | None:
        return bool(self.expr) if self.expr in (sympy.true, sympy.false) else None

    def str(self) -> builtins.str:
        return str(self.expr)

    def _graph_repr(self) -> builtins.str:
        return str(self.expr)

    def clone(self) -> SymNode:
        return self  # immutable

    # -- making nodes ----------------------------------------------------------------------
    def _new(self, expr: sympy.Basic, pytype: PyType) -> SymNode:
        return SymNode(expr, self.env, pytype)

    def _made(self, name: builtins.str, other: SymNode, build: Callable[[sympy.Basic, sympy.Basic], sympy.Basic], pytype: PyType) -> SymNode:
        """The node of ``build(self.expr, other.expr)``, simplified once per operation and operands
        (torch's meta kernels repeat the same size arithmetic for every op they trace)."""
        a, b = self.expr, other.expr
        node = object.__new__(SymNode)
        node.env = self.env
        node.expr = self.env.built((name, a, b), lambda: build(a, b))
        node.pytype = pytype
        return node

    def wrap_int(self, num: int) -> SymNode:
        return self._new(sympy.Integer(num), int)

    def wrap_float(self, num: float) -> SymNode:
        return self._new(sympy.Float(num), float)

    def wrap_bool(self, num: bool) -> SymNode:
        return self._new(sympy.true if num else sympy.false, bool)

    # -- arithmetic ------------------------------------------------------------------------
    def add(self, other: SymNode) -> SymNode:
        return self._made("add", other, operator.add, _promoted(self, other))

    def sub(self, other: SymNode) -> SymNode:
        return self._made("sub", other, operator.sub, _promoted(self, other))

    def mul(self, other: SymNode) -> SymNode:
        return self._made("mul", other, operator.mul, _promoted(self, other))

    def mod(self, other: SymNode) -> SymNode:
        return self._made("mod", other, sympy.Mod, _promoted(self, other))

    def truediv(self, other: SymNode) -> SymNode:
        return self._made("truediv", other, operator.truediv, float)

    float_truediv = truediv
    int_truediv = truediv

    def floordiv(self, other: SymNode) -> SymNode:
        return self._made("floordiv", other, lambda a, b: sympy.floor(a / b), _promoted(self, other))

    int_floordiv = floordiv

    def pow(self, other: SymNode) -> SymNode:
        return self._new(self.expr**other.expr, _promoted(self, other))

    pow_by_natural = pow

    def float_pow(self, other: SymNode) -> SymNode:
        return self._new(self.expr**other.expr, float)

    def sym_min(self, other: SymNode) -> SymNode:
        return self._made("sym_min", other, sympy.Min, _promoted(self, other))

    def sym_max(self, other: SymNode) -> SymNode:
        return self._made("sym_max", other, sympy.Max, _promoted(self, other))

    def sym_sum(self, args: Sequence[SymNode]) -> SymNode:
        pytype: PyType = float if any(a.pytype is float for a in args) else int
        return self._new(sympy.Add(*(a.expr for a in args)), pytype)

    def neg(self) -> SymNode:
        return self._new(-self.expr, self.pytype)

    def pos(self) -> SymNode:
        return self

    def abs(self) -> SymNode:
        return self._new(sympy.Abs(self.expr), self.pytype)

    def ceil(self) -> SymNode:
        return self._rounded(sympy.ceiling, math.ceil)

    def floor(self) -> SymNode:
        return self._rounded(sympy.floor, math.floor)

    def trunc(self) -> SymNode:
        # trunc rounds toward zero: floor for values >= 0, ceiling below (a guarded decision).
        nonnegative = self.env.guard_bool(sympy.Ge(self.expr, 0))
        return self.floor() if nonnegative else self.ceil()

    def _rounded(self, symbolic: Any, eager: Any) -> SymNode:
        """``floor``/``ceiling`` of this value, as eager's float arithmetic would round it.

        With only short binary-fraction constants (0.5, 1.25) float and exact arithmetic agree
        for any realistic size, so the result stays symbolic. Another constant (0.29, 1/3) makes eager's rounded product differ from the
        exact one at some sizes (floor(100 * 0.29) is 28), so the symbols are specialized and
        the value computed in Python floats, as eager computes it.
        """
        floats = self.expr.atoms(sympy.Float)
        if all(short_binary_fraction(f) for f in floats):
            exact = self.expr.xreplace({f: sympy.Rational(f) for f in floats})
            return self._new(symbolic(exact), int)
        values = {sym: self.env.guard_int(sym) for sym in self.expr.free_symbols}
        return self.wrap_int(int(eager(_as_python_float(self.expr, values))))

    sym_int = trunc

    def round(self, ndigits: int | None = None) -> SymNode:
        value = self.env.guard_float(self.expr)
        return self.wrap_int(round(value)) if ndigits is None else self.wrap_float(round(value, ndigits))

    def sym_float(self) -> SymNode:
        return self._new(self.expr, float)

    def sym_sqrt(self) -> SymNode:
        return self._new(sympy.sqrt(self.expr), float)

    def is_integer(self) -> SymNode:
        return self.wrap_bool(float(self.env.guard_float(self.expr)).is_integer())

    def __getattr__(self, name: builtins.str) -> Any:
        fn = _SPECIALIZED_MATH.get(name)
        if fn is None:
            raise AttributeError(f"ptc's SymNode has no {name!r}: torch asked for a symbolic operation ptc does not support")
        return lambda: self.wrap_float(fn(self.env.guard_float(self.expr)))

    # -- comparisons and logic -------------------------------------------------------------
    def eq(self, other: SymNode) -> SymNode:
        return self._made("eq", other, sympy.Eq, bool)

    def ne(self, other: SymNode) -> SymNode:
        return self._made("ne", other, sympy.Ne, bool)

    def lt(self, other: SymNode) -> SymNode:
        return self._made("lt", other, sympy.Lt, bool)

    def le(self, other: SymNode) -> SymNode:
        return self._made("le", other, sympy.Le, bool)

    def gt(self, other: SymNode) -> SymNode:
        return self._made("gt", other, sympy.Gt, bool)

    def ge(self, other: SymNode) -> SymNode:
        return self._made("ge", other, sympy.Ge, bool)

    def sym_and(self, other: SymNode) -> SymNode:
        return self._made("sym_and", other, sympy.And, bool)

    def sym_or(self, other: SymNode) -> SymNode:
        return self._made("sym_or", other, sympy.Or, bool)

    def sym_not(self) -> SymNode:
        return self._new(sympy.Not(self.expr), bool)

    def sym_ite(self, then: SymNode, otherwise: SymNode) -> SymNode:
        # No symbolic if-then-else: the condition is decided (and guarded) now.
        return then if self.env.guard_bool(self.expr) else otherwise

    # -- decisions -------------------------------------------------------------------------
    def guard_int(self, file: builtins.str = "", line: int = 0) -> int:
        return self.env.guard_int(self.expr)

    def guard_float(self, file: builtins.str = "", line: int = 0) -> float:
        return self.env.guard_float(self.expr)

    def guard_bool(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.guard_bool(self.expr)

    def int_(self) -> int:
        return self.env.guard_int(self.expr)

    def bool_(self) -> bool:
        return self.env.guard_bool(self.expr)

    def expect_true(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.expect_true(self.expr)

    def expect_size(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.expect_true(sympy.Ge(self.expr, 0))

    def guard_size_oblivious(self, file: builtins.str = "", line: int = 0) -> bool:
        # Decided as if no size were 0 or 1; backed sizes already are >= 2, so only a
        # condition on data-dependent sizes that this cannot settle still raises.
        known = self.env.statically_known(self.expr, size_oblivious=True)
        return known if known is not None else self.env.guard_bool(self.expr)

    def guard_or_false(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.guard_or(self.expr, False)

    def guard_or_true(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.guard_or(self.expr, True)

    def statically_known_true(self, file: builtins.str = "", line: int = 0) -> bool:
        return self.env.statically_known(self.expr) is True

    # -- layouts (eager's definitions, decided where needed) -------------------------------
    def is_contiguous(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(_Layout(self.env, sizes, strides).contiguous(range(len(sizes) - 1, -1, -1), empty_ok=True))

    def is_channels_last_contiguous_2d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(len(sizes) == 4 and _Layout(self.env, sizes, strides).contiguous((1, 3, 2, 0)))

    def is_channels_last_contiguous_3d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(len(sizes) == 5 and _Layout(self.env, sizes, strides).contiguous((1, 4, 3, 2, 0)))

    def is_channels_last_strides_2d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(len(sizes) == 4 and _Layout(self.env, sizes, strides).channels_last_strides((1, 3, 2, 0)))

    def is_channels_last_strides_3d(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(len(sizes) == 5 and _Layout(self.env, sizes, strides).channels_last_strides((1, 4, 3, 2, 0)))

    def is_non_overlapping_and_dense(self, sizes: Sequence[Any], strides: Sequence[Any]) -> SymNode:
        return self.wrap_bool(_Layout(self.env, sizes, strides).non_overlapping_and_dense())


def _expr(value: Any) -> sympy.Basic:
    if isinstance(value, SymNode):
        return value.expr
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return expr_of(value)
    return sympy.Integer(int(value))


class _Layout:
    """Eager's layout predicates over symbolic sizes and strides.

    Each comparison is decided by the SymbolEnv: mostly statically (dynamic sizes are >= 2),
    else guarded at the hints; comparisons on data-dependent sizes take the answer that can
    only make the predicate False, as eager's symbolic path does.
    """

    def __init__(self, env: SymbolEnv, sizes: Sequence[Any], strides: Sequence[Any]) -> None:
        self.env = env
        self.sizes = [_expr(s) for s in sizes]
        self.strides = [_expr(s) for s in strides]

    def _is(self, kind: type, a: sympy.Basic, b: sympy.Basic, default: bool) -> bool:
        # The relation is built (and simplified) once per operands, not on every layout query.
        return self.env.guard_or(self.env.built((kind, a, b), lambda: kind(a, b)), default)

    def contiguous(self, order: Sequence[int], empty_ok: bool = False) -> bool:
        if empty_ok and any(self._is(sympy.Eq, s, 0, False) for s in self.sizes):
            return True
        expected: sympy.Basic = sympy.Integer(1)
        for d in order:
            if self._is(sympy.Eq, self.sizes[d], 1, False):
                continue
            if not self._is(sympy.Eq, self.strides[d], expected, False):
                return False
            expected = expected * self.sizes[d]
        return True

    def channels_last_strides(self, order: Sequence[int]) -> bool:
        smallest: sympy.Basic = sympy.Integer(0)
        if self._is(sympy.Eq, self.strides[1], 0, True):
            return False
        for d in order:
            if self._is(sympy.Eq, self.sizes[d], 0, True):
                return False
            if self._is(sympy.Lt, self.strides[d], smallest, True):
                return False
            # Ambiguous layouts (e.g. N=1 with equal strides) count as contiguous, not channels last.
            if d == 0 and self._is(sympy.Eq, smallest, self.strides[1], True):
                return False
            smallest = self.strides[d]
            if self._is(sympy.Gt, self.sizes[d], 1, False):
                smallest = smallest * self.sizes[d]
        return True

    def non_overlapping_and_dense(self) -> bool:
        if len(self.sizes) == 1:
            return self._is(sympy.Lt, self.sizes[0], 2, False) or self._is(sympy.Eq, self.strides[0], 1, False)
        small = [self._is(sympy.Lt, s, 2, False) for s in self.sizes]
        # Dims of size 0 or 1 go last; the rest by increasing stride (decided pairwise).
        order = [d for d in range(len(self.sizes)) if not small[d]]
        ranked = sorted(order, key=lambda d: _StrideKey(self, d))
        required: sympy.Basic = sympy.Integer(1)
        for d in ranked:
            if not self._is(sympy.Eq, self.strides[d], required, False):
                return False
            required = required * self.sizes[d]
        return True


class _StrideKey:
    """Sort key comparing two dims' strides through the SymbolEnv."""

    __slots__ = ("dim", "layout")

    def __init__(self, layout: _Layout, dim: int) -> None:
        self.layout = layout
        self.dim = dim

    def __lt__(self, other: _StrideKey) -> bool:
        return self.layout._is(sympy.Lt, self.layout.strides[self.dim], self.layout.strides[other.dim], False)


def expr_of(value: Any) -> sympy.Basic:
    """The sympy expression of an int, float, bool or a torch.SymInt/SymFloat/SymBool over a ptc SymNode."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = value.node
        if not isinstance(node, SymNode):
            raise TypeError(f"{value!r} is backed by {type(node).__name__}, not by ptc's SymNode")
        return node.expr
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, float):
        return sympy.Float(value)
    if isinstance(value, sympy.Basic):
        return value
    raise TypeError(f"expected a number or a symbolic number, got {type(value).__name__}")


def symbolic(expr: sympy.Basic | int | float | bool, env: SymbolEnv, pytype: PyType = int) -> Any:
    """A ``torch.SymInt`` (SymFloat, SymBool for ``pytype``) over ``expr``, or a plain Python value when it is constant."""
    node = SymNode(expr, env, pytype)
    if node.is_constant():
        return pytype(node.expr)
    if pytype is bool:
        return torch.SymBool(node)
    if pytype is float:
        return torch.SymFloat(node)
    return torch.SymInt(node)
