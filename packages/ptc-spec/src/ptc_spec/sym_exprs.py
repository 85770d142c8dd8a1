"""Symbolic size expressions as Python operations: the one lowering of sympy to code.

A size expression (``floor(s0/2)``, ``Eq(Mod(s0, 8), 0)``) is exact sympy; at run time the
same value must come from Python ints. :func:`to_term` rewrites an expression into a tree of
operations that ``operator`` and ``torch.sym_max``/``sym_min`` compute exactly on ints:
integer division becomes ``//`` (never a float round trip), ``ceiling`` becomes ``-(-a // b)``.
Guard functions print that tree as source (:func:`term_source`); the tracer emits it as FX
nodes, so a graph recomputes its view/expand sizes from its inputs' sizes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import sympy
import torch


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a lowered expression: ``fn(*args)``."""

    fn: Callable[..., Any]
    args: tuple[Term, ...]


Term: TypeAlias = sympy.Symbol | int | float | bool | Op
"""A lowered expression: a symbol (read from an input's size), a Python constant, or an Op."""

# fn -> (source template, the same operation on sympy values). The templates parenthesize
# fully, so printed guards never depend on Python's precedence rules.
_OPS: dict[Callable[..., Any], tuple[str, Callable[..., sympy.Basic]]] = {
    operator.add: ("({0} + {1})", operator.add),
    operator.sub: ("({0} - {1})", operator.sub),
    operator.mul: ("({0} * {1})", operator.mul),
    operator.floordiv: ("({0} // {1})", lambda a, b: sympy.floor(a / b)),
    operator.truediv: ("({0} / {1})", operator.truediv),
    operator.mod: ("({0} % {1})", sympy.Mod),
    operator.pow: ("({0} ** {1})", operator.pow),
    operator.neg: ("(-{0})", operator.neg),
    operator.eq: ("({0} == {1})", sympy.Eq),
    operator.ne: ("({0} != {1})", sympy.Ne),
    operator.lt: ("({0} < {1})", sympy.Lt),
    operator.le: ("({0} <= {1})", sympy.Le),
    operator.gt: ("({0} > {1})", sympy.Gt),
    operator.ge: ("({0} >= {1})", sympy.Ge),
    operator.and_: ("({0} and {1})", sympy.And),
    operator.or_: ("({0} or {1})", sympy.Or),
    operator.not_: ("(not {0})", sympy.Not),
    torch.sym_max: ("max({0}, {1})", sympy.Max),
    torch.sym_min: ("min({0}, {1})", sympy.Min),
    torch.sym_float: ("float({0})", lambda a: a),
}

_RELATIONS: dict[str, Callable[..., Any]] = {
    "Equality": operator.eq,
    "Unequality": operator.ne,
    "StrictLessThan": operator.lt,
    "LessThan": operator.le,
    "StrictGreaterThan": operator.gt,
    "GreaterThan": operator.ge,
}


class UnsupportedExpression(ValueError):
    """A sympy expression has no exact lowering to Python operations."""


def integer_valued(expr: sympy.Basic) -> bool:
    """Whether ``expr`` is an integer at every allowed size (sympy leaves ``floor(36/(s0 - 2))``
    undecided, since ``s0 - 2`` might be 0 for all it knows)."""
    if expr.is_integer or isinstance(expr, (sympy.floor, sympy.ceiling, sympy.Mod)):
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min)):
        return all(integer_valued(a) for a in expr.args)
    if isinstance(expr, sympy.Pow):
        return bool(expr.exp.is_Integer and expr.exp >= 0 and integer_valued(expr.base))
    return False


def to_term(expr: sympy.Basic, kind: type = int) -> Term:
    """Lower ``expr``, whose Python type is ``kind`` (int, float or bool), to operations."""
    if kind is bool:
        return _bool(expr)
    if kind is float:
        # An integer-valued float (sym_float(s0)) stays a float, as eager's scalar would be.
        return Op(torch.sym_float, (_int(expr),)) if integer_valued(expr) else _float(expr)
    return _int(expr)


def _has_fraction(expr: sympy.Basic) -> bool:
    if isinstance(expr, sympy.Add):
        return any(_has_fraction(t) for t in expr.args)
    if isinstance(expr, sympy.Mul):
        coeff = expr.as_coeff_Mul()[0]
        negative_power = any(isinstance(f, sympy.Pow) and f.exp.is_negative for f in expr.args)
        return (isinstance(coeff, sympy.Rational) and int(coeff.q) != 1) or negative_power
    if isinstance(expr, sympy.Rational):
        return int(expr.q) != 1
    return isinstance(expr, sympy.Pow) and bool(expr.exp.is_negative)


def _fold(fn: Callable[..., Any], terms: list[Term]) -> Term:
    out = terms[0]
    for t in terms[1:]:
        out = Op(fn, (out, t))
    return out


def _sum(expr: sympy.Basic, lower: Callable[[sympy.Basic], Term]) -> Term:
    # Print sums as a person would write them, a - b rather than a + (-1)*b.
    out: Term | None = None
    for t in expr.as_ordered_terms():
        coeff, rest = t.as_coeff_Mul()
        negative = coeff.is_negative
        term = lower(-t if negative else t)
        if out is None:
            out = Op(operator.neg, (term,)) if negative else term
        else:
            out = Op(operator.sub if negative else operator.add, (out, term))
    assert out is not None
    return out


def _product(expr: sympy.Basic, lower: Callable[[sympy.Basic], Term]) -> Term:
    coeff, rest = expr.as_coeff_Mul()
    factors = [lower(f) for f in sympy.Mul.make_args(rest)]
    if coeff == -1:
        return Op(operator.neg, (_fold(operator.mul, factors),))
    if coeff != 1:
        factors.insert(0, int(coeff) if coeff.is_Integer else float(coeff))
    return _fold(operator.mul, factors)


def _int(expr: sympy.Basic) -> Term:
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return expr
    if isinstance(expr, (sympy.Add, sympy.Mul)) and _has_fraction(expr):
        # An integer-valued expression with fractions (s0/2 once s0 = 2*s1 is known) is
        # exactly its numerator // its denominator.
        return _divided(expr, floor=True)
    if isinstance(expr, sympy.Add):
        return _sum(expr, _int)
    if isinstance(expr, sympy.Mul):
        return _product(expr, _int)
    if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and expr.exp >= 0:
        return Op(operator.pow, (_int(expr.base), int(expr.exp)))
    if isinstance(expr, sympy.floor):
        return _divided(expr.args[0], floor=True)
    if isinstance(expr, sympy.ceiling):
        return _divided(expr.args[0], floor=False)
    if isinstance(expr, sympy.Mod):
        return Op(operator.mod, (_int(expr.args[0]), _int(expr.args[1])))
    if isinstance(expr, sympy.Max):
        return _fold(torch.sym_max, [_int(a) for a in expr.args])
    if isinstance(expr, sympy.Min):
        return _fold(torch.sym_min, [_int(a) for a in expr.args])
    raise UnsupportedExpression(f"the integer size expression {expr} has no exact Python form")


def _divided(expr: sympy.Basic, floor: bool) -> Term:
    """floor (or ceiling) of ``expr`` as integer division of its numerator by its denominator."""
    num, den = sympy.fraction(sympy.together(expr))
    if den == 1:
        return _int(num)
    if floor:
        return Op(operator.floordiv, (_int(num), _int(den)))
    # ceil(a / b) == -((-a) // b) for integers.
    return Op(operator.neg, (Op(operator.floordiv, (_int(-num), _int(den))),))


def _float(expr: sympy.Basic) -> Term:
    if expr.is_Integer:
        return int(expr)
    if expr.is_Number:
        return float(expr)
    if isinstance(expr, sympy.Symbol) or integer_valued(expr):
        return _int(expr)
    if isinstance(expr, sympy.Add):
        return _sum(expr, _float)
    if isinstance(expr, sympy.Mul):
        num, den = sympy.fraction(expr)
        if den != 1:
            return Op(operator.truediv, (_float(num), _float(den)))
        return _product(expr, _float)
    if isinstance(expr, sympy.Pow):
        exp = expr.exp
        power = int(exp) if exp.is_Integer and exp >= 0 else float(exp)
        return Op(operator.pow, (_float(expr.base), power))
    if isinstance(expr, sympy.Max):
        return _fold(torch.sym_max, [_float(a) for a in expr.args])
    if isinstance(expr, sympy.Min):
        return _fold(torch.sym_min, [_float(a) for a in expr.args])
    raise UnsupportedExpression(f"the float size expression {expr} has no exact Python form")


def _bool(expr: sympy.Basic) -> Term:
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    if isinstance(expr, sympy.Not):
        return Op(operator.not_, (_bool(expr.args[0]),))
    if isinstance(expr, (sympy.And, sympy.Or)):
        fn = operator.and_ if isinstance(expr, sympy.And) else operator.or_
        return _fold(fn, [_bool(a) for a in expr.args])
    relation = _RELATIONS.get(type(expr).__name__)
    if relation is None:
        raise UnsupportedExpression(f"the condition {expr} has no exact Python form")
    return Op(relation, (_number(expr.lhs), _number(expr.rhs)))


def _number(expr: sympy.Basic) -> Term:
    return _int(expr) if integer_valued(expr) else _float(expr)


def term_source(term: Term, names: Mapping[str, str] | None = None) -> str:
    """Python source computing ``term``; symbols print as ``names[symbol.name]`` (default: their name)."""
    if isinstance(term, sympy.Symbol):
        return names.get(term.name, term.name) if names else term.name
    if isinstance(term, Op):
        template = _OPS[term.fn][0]
        return template.format(*(term_source(a, names) for a in term.args))
    return repr(term)


def term_value(term: Term) -> sympy.Basic:
    """The sympy value of ``term`` (what a node computing it holds, symbolically)."""
    if isinstance(term, Op):
        return _OPS[term.fn][1](*(term_value(a) for a in term.args))
    if isinstance(term, bool):
        return sympy.true if term else sympy.false
    if isinstance(term, sympy.Symbol):
        return term
    return sympy.sympify(term)


def is_size_operation(fn: object) -> bool:
    """True when ``fn`` is one of the operations a lowered expression uses."""
    try:
        return fn in _OPS
    except TypeError:
        return False
