"""Value ranges of size symbols, and the bounds they imply for sympy expressions.

A SymbolEnv decides a comparison without a guard when the ranges of its symbols already prove
it: a dynamic input size lies in ``[2, inf)``, so ``Eq(s0, 1)`` is false and ``s0*s1 >= s1``
is true for any input. Bounds are computed by interval arithmetic over the expression tree;
they are sound (the true value always lies inside) but not tight, which is all a decision
procedure that falls back to guarding needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

import sympy

Bound: TypeAlias = int | Fraction | float
"""An exact bound, or ``math.inf`` / ``-math.inf`` for an unbounded side."""

INF = math.inf


@dataclass(frozen=True, slots=True)
class ValueRange:
    """The closed interval ``[lower, upper]`` a symbol's value lies in (``upper`` may be inf)."""

    lower: Bound
    upper: Bound

    def __post_init__(self) -> None:
        if self.lower > self.upper:
            raise ValueError(f"empty value range [{self.lower}, {self.upper}]")

    def contains(self, value: int | float) -> bool:
        """True when ``value`` lies in the range."""
        return self.lower <= value <= self.upper

    def intersect(self, other: ValueRange) -> ValueRange:
        """The values in both ranges (ValueError when none)."""
        return ValueRange(max(self.lower, other.lower), min(self.upper, other.upper))

    def __str__(self) -> str:
        upper = "inf" if self.upper == INF else str(self.upper)
        return f"[{self.lower}, {upper}]"


_UNKNOWN = ValueRange(-INF, INF)


def _mul(a: Bound, b: Bound) -> Bound:
    # 0 * inf is 0 here: a factor that is exactly 0 makes the product 0 whatever the other is.
    if a == 0 or b == 0:
        return 0
    return a * b


def _product(a: ValueRange, b: ValueRange) -> ValueRange:
    corners = [_mul(x, y) for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
    return ValueRange(min(corners), max(corners))


def _power(base: ValueRange, exp: int) -> ValueRange:
    if exp == 0:
        return ValueRange(1, 1)
    if exp > 0:
        if base.lower >= 0:
            return ValueRange(base.lower**exp, base.upper**exp)
        if exp % 2 == 0:
            widest: Bound = max(-base.lower, base.upper)
            return ValueRange(0, widest**exp)
        return ValueRange(base.lower**exp, base.upper**exp)
    if base.lower > 0:
        k = -exp
        low: Bound = 0 if base.upper == INF else Fraction(1, 1) / Fraction(base.upper) ** k
        return ValueRange(low, Fraction(1, 1) / Fraction(base.lower) ** k)
    return _UNKNOWN


def _floor(b: Bound) -> Bound:
    return b if b in (INF, -INF) else math.floor(b)


def _ceil(b: Bound) -> Bound:
    return b if b in (INF, -INF) else math.ceil(b)


def _number(expr: sympy.Basic) -> Bound:
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Rational):
        return Fraction(int(expr.p), int(expr.q))
    if expr is sympy.oo:
        return INF
    if expr is sympy.S.NegativeInfinity:
        return -INF
    return float(expr)


def _symbol_default(sym: sympy.Symbol) -> ValueRange:
    # A symbol the SymbolEnv does not know is bounded only by its sympy assumptions.
    if sym.is_positive:
        return ValueRange(1, INF)
    if sym.is_nonnegative:
        return ValueRange(0, INF)
    return _UNKNOWN


def bounds(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    """A range that contains every value ``expr`` takes when its symbols lie in ``ranges``."""
    if expr.is_number:
        try:
            value = _number(expr)
        except TypeError:
            return _UNKNOWN
        return ValueRange(value, value)
    if isinstance(expr, sympy.Symbol):
        return ranges.get(expr) or _symbol_default(expr)
    rule = _RULES.get(type(expr).__name__)
    if rule is None:
        return _UNKNOWN
    return rule(expr, ranges)


def _add(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    lower: Bound = 0
    upper: Bound = 0
    for arg in expr.args:
        r = bounds(arg, ranges)
        lower, upper = lower + r.lower, upper + r.upper
    if lower != lower or upper != upper:  # inf - inf
        return _UNKNOWN
    return ValueRange(lower, upper)


def _mul_rule(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    result = ValueRange(1, 1)
    for arg in expr.args:
        result = _product(result, bounds(arg, ranges))
    return result


def _pow(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    base, exp = expr.args
    if not isinstance(exp, sympy.Integer):
        return _UNKNOWN
    return _power(bounds(base, ranges), int(exp))


def _floor_rule(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    r = bounds(expr.args[0], ranges)
    return ValueRange(_floor(r.lower), _floor(r.upper))


def _ceiling_rule(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    r = bounds(expr.args[0], ranges)
    return ValueRange(_ceil(r.lower), _ceil(r.upper))


def _mod(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    # Python's and sympy's ``a mod b`` lie in [0, b) for b > 0, and never exceed a when a >= 0.
    a, b = (bounds(arg, ranges) for arg in expr.args)
    if b.lower <= 0:
        return _UNKNOWN
    if a.lower >= 0 and a.upper < b.lower:
        return a
    upper = b.upper - 1 if expr.args[1].is_integer else b.upper
    if a.lower >= 0:
        upper = min(upper, a.upper)
    return ValueRange(0, upper)


def _extreme(pick: Callable[..., Bound]) -> Callable[[sympy.Basic, Mapping[sympy.Symbol, ValueRange]], ValueRange]:
    def rule(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
        parts = [bounds(arg, ranges) for arg in expr.args]
        return ValueRange(pick(p.lower for p in parts), pick(p.upper for p in parts))

    return rule


_RULES: dict[str, Callable[[sympy.Basic, Mapping[sympy.Symbol, ValueRange]], ValueRange]] = {
    "Add": _add,
    "Mul": _mul_rule,
    "Pow": _pow,
    "floor": _floor_rule,
    "ceiling": _ceiling_rule,
    "Mod": _mod,
    "Max": _extreme(max),
    "Min": _extreme(min),
}


def decide(relation: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> bool | None:
    """True or False when ``ranges`` prove ``relation`` (a sympy boolean) either way, else None."""
    if relation is sympy.true or relation is sympy.false:
        return bool(relation)
    if isinstance(relation, sympy.Not):
        inner = decide(relation.args[0], ranges)
        return None if inner is None else not inner
    if isinstance(relation, (sympy.And, sympy.Or)):
        return _connective(relation, ranges)
    if not isinstance(relation, sympy.core.relational.Relational):
        return None
    diff = sympy.expand(relation.lhs - relation.rhs)
    compare = _COMPARE[type(relation).__name__]
    found = compare(bounds(diff, ranges))
    if found is None:
        found = compare(_shifted_bounds(diff, ranges))
    return found


def _shifted_bounds(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> ValueRange:
    """Bounds of a polynomial, by writing each symbol as its lower bound plus a nonnegative t.

    Interval arithmetic forgets that both sides of ``s - s**2`` are the same s; after
    ``s = 2 + t`` the expansion ``-2 - 3*t - t**2`` has only nonpositive coefficients, so it
    is at most -2 for every t >= 0.
    """
    symbols = [s for s in expr.free_symbols if isinstance(s, sympy.Symbol)]
    if not symbols or not expr.is_polynomial(*symbols):
        return _UNKNOWN
    shifts = {}
    for s in symbols:
        low = (ranges.get(s) or _symbol_default(s)).lower
        if low in (INF, -INF):
            return _UNKNOWN
        shifts[s] = low + sympy.Dummy(nonnegative=True)
    terms = sympy.expand(expr.xreplace(shifts)).as_coefficients_dict()
    constant = _number(terms.pop(sympy.Integer(1), sympy.Integer(0)))
    coefficients = [_number(c) for c in terms.values()]
    if all(c >= 0 for c in coefficients):
        return ValueRange(constant, INF if coefficients else constant)
    if all(c <= 0 for c in coefficients):
        return ValueRange(-INF, constant)
    return _UNKNOWN


def _connective(relation: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRange]) -> bool | None:
    decisive = isinstance(relation, sympy.Or)  # the value that settles the whole connective
    unknown = False
    for arg in relation.args:
        found = decide(arg, ranges)
        if found is decisive:
            return decisive
        unknown = unknown or found is None
    return None if unknown else not decisive


def _ge(d: ValueRange) -> bool | None:
    return True if d.lower >= 0 else False if d.upper < 0 else None


def _gt(d: ValueRange) -> bool | None:
    return True if d.lower > 0 else False if d.upper <= 0 else None


def _le(d: ValueRange) -> bool | None:
    return True if d.upper <= 0 else False if d.lower > 0 else None


def _lt(d: ValueRange) -> bool | None:
    return True if d.upper < 0 else False if d.lower >= 0 else None


def _eq(d: ValueRange) -> bool | None:
    if d.lower == d.upper == 0:
        return True
    return False if d.lower > 0 or d.upper < 0 else None


def _ne(d: ValueRange) -> bool | None:
    found = _eq(d)
    return None if found is None else not found


# Keyed by sympy's class names: Ge is GreaterThan, Gt StrictGreaterThan, Eq Equality ...
_COMPARE: dict[str, Callable[[ValueRange], bool | None]] = {
    "GreaterThan": _ge,
    "StrictGreaterThan": _gt,
    "LessThan": _le,
    "StrictLessThan": _lt,
    "Equality": _eq,
    "Unequality": _ne,
}
