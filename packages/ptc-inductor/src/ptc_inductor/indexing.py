"""Index arithmetic: sympy symbols for loop variables, floor division, modulus and bounds."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TypeAlias

import sympy

from .sizes import Size, SizeEnv, current, equal, hint, integral, known_le, known_lt, normalize

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


def floordiv(a: Expr, b: Size) -> Expr:
    """Floor division of a non-negative index by a positive size."""
    if b == 1:
        return a
    return sympy.floor(a / b)


def mod(a: Expr, b: Size) -> Expr:
    """Modulus of a non-negative index by a positive size."""
    if b == 1:
        return sympy.Integer(0)
    return sympy.Mod(a, b)


def contiguous_strides(sizes: Sequence[Size]) -> tuple[Size, ...]:
    """Row-major strides of ``sizes`` (a size-0 dim counts as 1, as in eager)."""
    strides: list[Size] = [1] * len(sizes)
    running: Size = 1
    for i in range(len(sizes) - 1, -1, -1):
        strides[i] = running
        size = sizes[i]
        # A symbolic size is never 0 or 1 (those stay static), as ptc_spec's metadata assumes.
        running = running * max(size, 1) if isinstance(size, int) else normalize(running * size)
    return tuple(strides)


def linear_index(index: Sequence[Expr], strides: Sequence[Size], offset: Size = 0) -> Expr:
    """``offset + sum(index[i] * strides[i])``."""
    total: Expr = sympy.sympify(offset)
    for i, s in zip(index, strides):
        total = total + i * s
    return sympy.expand(total)


def view_index(index: Sequence[Expr], new_size: Sequence[Size], old_size: Sequence[Size]) -> list[Expr]:
    """The index into ``old_size`` that a row-major view of it as ``new_size`` reads at ``index``.

    Dims are matched in groups whose sizes have equal products (a merge ``[.., 12, 64] ->
    [.., 768]``, a split, or one dim kept as it is): a kept dim keeps its index, and only a
    group's own indices are linearized and split again. Linearizing the whole index instead
    makes every old index a division and modulus of all the new ones, which simplification
    cannot undo when a new index is an offset (a cat's part reads ``x - 1536``): the kernel
    then computes, and cannot vectorize, what is a plain strided read.
    """
    n_old, n_new = len(old_size), len(new_size)

    def flat() -> list[Expr]:
        return unravel(linear_index(index, contiguous_strides(new_size)), old_size)

    if any(s == 0 for s in old_size) or any(s == 0 for s in new_size):
        return flat()
    out: list[Expr] = []
    i = j = 0
    while i < n_old or j < n_new:
        if i < n_old and old_size[i] == 1:
            out.append(sympy.Integer(0))
            i += 1
            continue
        if j < n_new and new_size[j] == 1:
            j += 1
            continue
        if i == n_old or j == n_new:
            return flat()
        i_end, j_end = i + 1, j + 1
        old_numel: Size = old_size[i]
        new_numel: Size = new_size[j]
        while not equal(old_numel, new_numel):
            if hint(old_numel) == hint(new_numel):
                # Products that only the hints make equal: no grouping holds at every size.
                return flat()
            if hint(old_numel) < hint(new_numel):
                if i_end == n_old:
                    return flat()
                old_numel = normalize(old_numel * old_size[i_end])
                i_end += 1
            else:
                if j_end == n_new:
                    return flat()
                new_numel = normalize(new_numel * new_size[j_end])
                j_end += 1
        if i_end - i == 1 and j_end - j == 1:
            out.append(index[j])
        else:
            group = new_size[j:j_end]
            out.extend(unravel(linear_index(index[j:j_end], contiguous_strides(group)), old_size[i:i_end]))
        i, j = i_end, j_end
    return out


def unravel(flat: Expr, sizes: Sequence[Size]) -> list[Expr]:
    """Row-major multi-index of a flat index over ``sizes``."""
    if any(s == 0 for s in sizes):
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


Bounds = tuple[Size, Size]


def _size_only(e: Expr) -> bool:
    """True when ``e`` mentions no loop variable (only numbers and size symbols)."""
    env = current()
    return all(env.is_symbol(s) for s in e.free_symbols)


def bounds(expr: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Bounds | None:
    """Inclusive bounds of ``expr`` when every loop variable lies in ``[0, ranges[v])``; None if unknown.

    Bounds are sizes (ints, or expressions over size symbols: a symbolic range gives symbolic bounds).
    """
    if expr.is_Integer:
        v = int(expr)
        return v, v
    if expr.is_Symbol:
        if expr in ranges:
            top = ranges[expr]
            return 0, (max(top - 1, 0) if isinstance(top, int) else normalize(top - 1))
        return (expr, expr) if current().is_symbol(expr) else None
    if expr.is_Add:
        lo: Size = 0
        hi: Size = 0
        for arg in expr.args:
            b = bounds(arg, ranges)
            if b is None:
                return None
            lo, hi = lo + b[0], hi + b[1]
        return normalize(lo), normalize(hi)
    if expr.is_Mul:
        return _mul_bounds(expr, ranges)
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if not _positive_size(den):
            return None
        b = bounds(sympy.expand(num), ranges)
        if b is None:
            return None
        return _floor_of(b[0], den), _floor_of(b[1], den)
    if isinstance(expr, sympy.Mod):
        m = expr.args[1]
        if not _positive_size(m):
            return None
        b = bounds(expr.args[0], ranges)
        if b is not None and known_le(0, b[0]) and known_lt(b[1], m):
            return b
        return 0, normalize(m - 1)
    if _size_only(expr):
        return normalize(expr), normalize(expr)
    return None


def _mul_bounds(expr: sympy.Mul, ranges: Mapping[sympy.Symbol, Size]) -> Bounds | None:
    """Bounds of ``c * K * f``: ``K`` a product of (non-negative) sizes, ``f`` one loop-variable factor."""
    coeff, rest = expr.as_coeff_Mul()
    varying = [f for f in sympy.Mul.make_args(rest) if not _size_only(f)]
    if not varying:
        return normalize(expr), normalize(expr)
    if len(varying) != 1:
        return None
    b = bounds(varying[0], ranges)
    if b is None:
        return None
    scale = sympy.expand(expr / varying[0])
    lo, hi = normalize(scale * b[0]), normalize(scale * b[1])
    return (lo, hi) if coeff >= 0 else (hi, lo)


def _floor_of(value: Size, den: Expr) -> Size:
    if isinstance(value, int) and den.is_Integer:
        return value // int(den)
    return normalize(sympy.floor(sympy.sympify(value) / den))


def _positive_size(e: Expr) -> bool:
    """True for a positive integer constant or a positive expression over size symbols."""
    if e.is_Integer:
        return int(e) > 0
    return _size_only(e) and known_lt(0, e)


def is_linear_in(expr: Expr, var: sympy.Symbol) -> Size | None:
    """The coefficient of ``var`` (a number or size expression) when ``expr`` is linear in it, else None."""
    coeff: Size = 0
    for term in sympy.Add.make_args(sympy.expand(expr)):
        if not term.has(var):
            continue
        rest = sympy.expand(term / var)
        if rest.has(var) or not _size_only(rest):
            return None
        coeff = coeff + rest
    return normalize(coeff)


def _split(num: Expr, den: Expr) -> tuple[Expr, Expr]:
    """``num == den * q + r`` where every term of ``q`` is an integer polynomial."""
    q: Expr = sympy.Integer(0)
    r: Expr = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(num)):
        quotient = sympy.expand(term / den)
        if integral(quotient):
            q = q + quotient
        else:
            r = r + term
    return q, r


def _divisors(num: Expr, den: Expr) -> list[Expr]:
    """Divisors of ``den`` to try splitting ``num`` by, largest first (by the symbols' hints)."""
    found: set[Expr] = {den}
    for term in sympy.Add.make_args(num):
        g = sympy.gcd(term, den)
        if g.is_Integer and int(g) <= 1:
            continue
        if g.is_Rational and not g.is_Integer:
            continue
        found.add(sympy.expand(g))
    env = current()
    return sorted(found, key=lambda g: (-env.hint(g), str(g)))


def _floor_rule(num: Expr, den: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Expr | None:
    """``floor(num / den)`` without the terms of ``num`` that cannot change it, or None.

    With ``num == g*q + r``, ``g`` dividing ``den`` and ``0 <= r < g``, the quotient is
    ``floor(q / (den/g))``: flattening ``[a, b, c]`` to ``[a*b, c]`` and back divides
    ``c*x0 + x1`` by ``b*c``, which is ``x0 // b`` since ``x1 < c`` (sizes symbolic or not).
    """
    for g in _divisors(num, den):
        outer = sympy.expand(den / g)
        if not integral(outer):
            continue
        q, r = _split(num, g)
        b = bounds(r, ranges)
        if b is not None and known_le(0, b[0]) and known_lt(b[1], g):
            return q if outer == 1 else floordiv(q, outer)
    return None


def _factor(term: Expr, kind: type) -> tuple[Expr, Expr] | None:
    """(multiplier, factor) when ``term`` is a product with exactly one factor of ``kind``."""
    found = [f for f in sympy.Mul.make_args(term) if isinstance(f, kind)]
    if len(found) != 1:
        return None
    return sympy.expand(term / found[0]), found[0]


def _recombine(e: sympy.Add) -> Expr:
    """``c*(a mod m) + c*m*floor(a/m)`` back into ``c*a``: unravelling a flat index into dims
    and linearizing it again with the same strides gives the flat index."""
    terms = list(e.args)
    for i, term in enumerate(terms):
        found = _factor(term, sympy.Mod)
        if found is None:
            continue
        c, m_part = found
        a, m = m_part.args
        for j, other in enumerate(terms):
            floor_found = _factor(other, sympy.floor) if j != i else None
            if floor_found is None:
                continue
            c2, f_part = floor_found
            if sympy.expand(c2 - c * m) == 0 and sympy.expand(f_part.args[0] - a / m) == 0:
                rest = [t for k, t in enumerate(terms) if k not in (i, j)]
                return sympy.expand(sympy.Add(c * a, *rest))
    return e


def _rule(e: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Expr:
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if _positive_size(den):
            found = _floor_rule(sympy.expand(num), sympy.expand(den), ranges)
            if found is not None:
                return found
    if isinstance(e, sympy.Mod) and _positive_size(e.args[1]):
        m = e.args[1]
        q, r = _split(e.args[0], m)
        b = bounds(r, ranges)
        if b is not None and known_le(0, b[0]) and known_lt(b[1], m):
            return r
        if q != 0:
            return sympy.Mod(r, m)
        found = _mod_rule(sympy.expand(e.args[0]), m, ranges)
        if found is not None:
            return found
    return e


def _mod_rule(num: Expr, m: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Expr | None:
    """``num mod m`` as ``g * (q mod (m/g)) + r``, with ``num == g*q + r``, ``g`` dividing ``m``
    and ``0 <= r < g``, or None: a chunk of ``g``-aligned rows (``32*x0 + r0`` with r0 < 32) taken
    modulo a dim of ``m`` rows keeps its row within the chunk."""
    for g in _divisors(num, m):
        outer = sympy.expand(m / g)
        if g == m or not integral(outer):
            continue
        q, r = _split(num, g)
        b = bounds(r, ranges)
        if q != 0 and b is not None and known_le(0, b[0]) and known_lt(b[1], g):
            return sympy.expand(g * mod(q, outer) + r)
    return None


def _walk(e: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Expr:
    if e.is_Atom:
        return e
    rebuilt = e.func(*[_walk(a, ranges) for a in e.args])
    if isinstance(rebuilt, sympy.Add):
        return _recombine(rebuilt)
    return _rule(rebuilt, ranges) if isinstance(rebuilt, (sympy.floor, sympy.Mod)) else rebuilt


@functools.lru_cache(maxsize=65536)
def _simplify_cached(expr: Expr, ranges: tuple[tuple[sympy.Symbol, Size], ...], env: SizeEnv) -> Expr:
    # The SizeEnv is part of the key: what it proves about sizes decides the rules.
    table = dict(ranges)
    current_expr = expr
    for _ in range(8):
        nxt = sympy.expand(_walk(current_expr, table))
        if nxt == current_expr:
            break
        current_expr = nxt
    return current_expr


def simplify_with_ranges(expr: Expr, ranges: Mapping[sympy.Symbol, Size]) -> Expr:
    """Drop floor divisions and moduli that the loop ranges make redundant (``x1 % 256`` with x1 < 256)."""
    if not isinstance(expr, sympy.Expr) or not expr.has(sympy.floor, sympy.Mod):
        return expr
    return _simplify_cached(expr, tuple(sorted(ranges.items(), key=lambda kv: kv[0].name)), current())


def run_symbol(first: int, last: int) -> sympy.Symbol:
    """The flat index of the loop variables ``x<first>`` .. ``x<last>`` taken as one."""
    return sympy.Symbol(f"xr{first}_{last}", integer=True, nonnegative=True)


def merge_runs(index: Expr, dims: Sequence[Size]) -> tuple[Expr, tuple[tuple[int, int], ...]]:
    """``index`` over the row-major loop variables ``x0..`` of ``dims``, with each run of two or
    more adjacent variables it walks contiguously (``x<i>``'s coefficient is ``x<i+1>``'s times
    ``dims[i+1]``) replaced by the run's ``run_symbol`` times the last one's coefficient, and the
    runs used. A kernel defines a run from its flat index with one division and one modulus at
    most, where each variable of the run took its own (GPT-2's contiguous [8, 1024, 3072] loads
    become ``xindex`` itself). An index not linear in the variables is returned as it is."""
    expanded = sympy.expand(index)
    found = [is_linear_in(expanded, xvar(i)) for i in range(len(dims))]
    coeffs = [c for c in found if c is not None]
    if len(dims) < 2 or len(coeffs) < len(dims):
        return index, ()
    runs: list[tuple[int, int]] = []
    first = 0
    for i in range(1, len(dims) + 1):
        joined = i < len(dims) and coeffs[i - 1] != 0 and coeffs[i] != 0 and equal(coeffs[i - 1], normalize(coeffs[i] * dims[i]))
        if joined:
            continue
        if i - 1 > first:
            runs.append((first, i - 1))
        first = i
    for a, b in runs:
        part = sum((coeffs[m] * xvar(m) for m in range(a, b + 1)), sympy.Integer(0))
        expanded = sympy.expand(expanded - part + coeffs[b] * run_symbol(a, b))
    return expanded, tuple(runs)
