"""Index arithmetic: sympy symbols for loop variables, floor division, modulus and bounds."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TypeAlias

import sympy

Expr: TypeAlias = sympy.Expr


@functools.cache
def xvar(i: int) -> sympy.Symbol:
    """The i-th pointwise loop variable ``x<i>``."""
    return sympy.Symbol(f"x{i}", integer=True, nonnegative=True)


@functools.cache
def rvar(i: int) -> sympy.Symbol:
    """The i-th reduction loop variable ``r<i>``."""
    return sympy.Symbol(f"r{i}", integer=True, nonnegative=True)


def indirect_symbol(name: str) -> sympy.Symbol:
    """A symbol for an index computed at run time (gather, embedding)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def floordiv(a: Expr, b: int) -> Expr:
    """Floor division of a non-negative index by a positive constant."""
    if b == 1:
        return a
    return sympy.floor(a / b)


def mod(a: Expr, b: int) -> Expr:
    """Modulus of a non-negative index by a positive constant."""
    if b == 1:
        return sympy.Integer(0)
    return sympy.Mod(a, b)


def contiguous_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``sizes``."""
    strides = [1] * len(sizes)
    running = 1
    for i in range(len(sizes) - 1, -1, -1):
        strides[i] = running
        running *= max(sizes[i], 1)
    return tuple(strides)


def linear_index(index: Sequence[Expr], strides: Sequence[int], offset: int = 0) -> Expr:
    """``offset + sum(index[i] * strides[i])``."""
    total: Expr = sympy.Integer(offset)
    for i, s in zip(index, strides):
        total = total + i * s
    return sympy.expand(total)


def unravel(flat: Expr, sizes: Sequence[int]) -> list[Expr]:
    """Row-major multi-index of a flat index over ``sizes``."""
    if 0 in sizes:
        # Nothing is ever read through an index over no elements (and Mod(q, 0) is undefined).
        return [sympy.Integer(0)] * len(sizes)
    out: list[Expr] = []
    strides = contiguous_strides(sizes)
    for dim, (size, stride) in enumerate(zip(sizes, strides)):
        if size == 1:
            out.append(sympy.Integer(0))
            continue
        q = floordiv(flat, stride)
        # The flat index never reaches the total size, so the leading dim needs no modulus.
        out.append(q if dim == 0 else mod(q, size))
    return out


def bounds(expr: Expr, ranges: Mapping[sympy.Symbol, int]) -> tuple[int, int] | None:
    """Inclusive integer bounds of ``expr`` when every symbol lies in ``[0, ranges[s])``; None if unknown."""
    if expr.is_Integer:
        v = int(expr)
        return v, v
    if expr.is_Symbol:
        if expr not in ranges:
            return None
        return 0, max(ranges[expr] - 1, 0)
    if expr.is_Add:
        lo, hi = 0, 0
        for arg in expr.args:
            b = bounds(arg, ranges)
            if b is None:
                return None
            lo, hi = lo + b[0], hi + b[1]
        return lo, hi
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        if not coeff.is_Integer or rest.is_Mul:
            return None
        b = bounds(rest, ranges)
        if b is None:
            return None
        c = int(coeff)
        return (c * b[0], c * b[1]) if c >= 0 else (c * b[1], c * b[0])
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if not den.is_Integer or int(den) <= 0:
            return None
        b = bounds(sympy.expand(num), ranges)
        if b is None:
            return None
        return b[0] // int(den), b[1] // int(den)
    if isinstance(expr, sympy.Mod):
        m = expr.args[1]
        if not m.is_Integer:
            return None
        b = bounds(expr.args[0], ranges)
        if b is not None and b[0] >= 0 and b[1] < int(m):
            return b
        return 0, int(m) - 1
    return None


def is_linear_in(expr: Expr, var: sympy.Symbol) -> int | None:
    """The integer coefficient of ``var`` when ``expr`` is linear in it, else None."""
    coeff = 0
    for term in sympy.Add.make_args(sympy.expand(expr)):
        if not term.has(var):
            continue
        c, rest = term.as_coeff_Mul()
        if rest != var or not c.is_Integer:
            return None
        coeff += int(c)
    return coeff


def _split(num: Expr, den: int) -> tuple[Expr, Expr]:
    """``num == den * q + r`` with every term of ``q`` having an integer coefficient."""
    q: Expr = sympy.Integer(0)
    r: Expr = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(num)):
        coeff, rest = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) % den == 0:
            q = q + (int(coeff) // den) * rest
        else:
            r = r + term
    return q, r


def _floor_rule(num: Expr, den: int, ranges: Mapping[sympy.Symbol, int]) -> Expr | None:
    """``floor(num / den)`` without the terms of ``num`` that cannot change it, or None.

    With ``num == g*q + r``, ``g`` dividing ``den`` and ``0 <= r < g``, the quotient is
    ``floor(q / (den/g))``: flattening ``[a, b, c]`` to ``[a*b, c]`` and back divides
    ``c*x0 + x1`` by ``b*c``, which is ``x0 // b`` since ``x1 < c``.
    """
    coeffs = {int(t.as_coeff_Mul()[0]) for t in sympy.Add.make_args(num) if t.as_coeff_Mul()[0].is_Integer}
    for g in sorted({den} | {math.gcd(den, c) for c in coeffs if c}, reverse=True):
        if g == 1:
            break
        q, r = _split(num, g)
        b = bounds(r, ranges)
        if b is not None and 0 <= b[0] and b[1] < g:
            return q if g == den else floordiv(q, den // g)
    return None


def _recombine(e: sympy.Add) -> Expr:
    """``c*(a mod m) + c*m*floor(a/m)`` back into ``c*a``: unravelling a flat index into dims
    and linearizing it again with the same strides gives the flat index."""
    terms = list(e.args)
    for i, term in enumerate(terms):
        c, m_part = term.as_coeff_Mul()
        if not isinstance(m_part, sympy.Mod) or not m_part.args[1].is_Integer:
            continue
        a, m = m_part.args[0], int(m_part.args[1])
        for j, other in enumerate(terms):
            c2, f_part = other.as_coeff_Mul()
            if j == i or not isinstance(f_part, sympy.floor) or c2 != c * m:
                continue
            num, den = sympy.fraction(sympy.together(f_part.args[0]))
            if den == m and sympy.expand(num - a) == 0:
                rest = [t for k, t in enumerate(terms) if k not in (i, j)]
                return sympy.expand(sympy.Add(c * a, *rest))
    return e


def _rule(e: Expr, ranges: Mapping[sympy.Symbol, int]) -> Expr:
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den.is_Integer and int(den) > 0:
            found = _floor_rule(sympy.expand(num), int(den), ranges)
            if found is not None:
                return found
    if isinstance(e, sympy.Mod) and e.args[1].is_Integer:
        m = int(e.args[1])
        q, r = _split(e.args[0], m)
        b = bounds(r, ranges)
        if b is not None and 0 <= b[0] and b[1] < m:
            return r
        if q != 0:
            return sympy.Mod(r, m)
    return e


def _walk(e: Expr, ranges: Mapping[sympy.Symbol, int]) -> Expr:
    if e.is_Atom:
        return e
    rebuilt = e.func(*[_walk(a, ranges) for a in e.args])
    if isinstance(rebuilt, sympy.Add):
        return _recombine(rebuilt)
    return _rule(rebuilt, ranges) if isinstance(rebuilt, (sympy.floor, sympy.Mod)) else rebuilt


@functools.lru_cache(maxsize=65536)
def _simplify_cached(expr: Expr, ranges: tuple[tuple[sympy.Symbol, int], ...]) -> Expr:
    table = dict(ranges)
    current = expr
    for _ in range(8):
        nxt = sympy.expand(_walk(current, table))
        if nxt == current:
            break
        current = nxt
    return current


def simplify_with_ranges(expr: Expr, ranges: Mapping[sympy.Symbol, int]) -> Expr:
    """Drop floor divisions and moduli that the loop ranges make redundant (``x1 % 256`` with x1 < 256)."""
    if not isinstance(expr, sympy.Expr) or not expr.has(sympy.floor, sympy.Mod):
        return expr
    return _simplify_cached(expr, tuple(sorted(ranges.items(), key=lambda kv: kv[0].name)))
