"""Symbolic sizes during one compile: the graph's SymbolEnv, hints, and the decisions made on sizes.

A size is a Python int or a sympy expression over the graph's size symbols (``s0, s1 ...``,
from ``ptc_spec.shape_env_of``). The compiled code runs at every size the graph's guards
admit, so a decision on a size falls in one of two kinds:

- it only affects speed (a split factor, a block size, a parallel threshold, how much to
  fuse): it is taken at the symbols' *hints* (``hint``);
- it affects what is computed (is this dim 1 and broadcast? do these two buffers have the
  same size? does a remainder stay below a divisor?): it must hold for every admitted size,
  so it is answered only when *provable* (``equal``, ``known``), and otherwise the general
  code path is kept.

The SizeEnv in force is set once around a compile (``use``) and read with ``current()``, as
the ``ops`` handler is: lowering, scheduling, planning and codegen all ask it.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeAlias

import sympy

Size: TypeAlias = int | sympy.Expr
"""A size, stride or offset: a plain int, or a sympy expression over size symbols."""

_STANDARD_NAME = re.compile(r"^[su]\d+$")


class SizeEnv:
    """What one compile knows about its sizes: the symbols, their hints and the guards' facts."""

    def __init__(self, shape_env: Any = None) -> None:
        self.shape_env = shape_env
        symbols: tuple[sympy.Symbol, ...] = tuple(shape_env.symbols) if shape_env is not None else ()
        replaced = set(shape_env.replacements) if shape_env is not None else set()
        # Symbols a guarded equality replaced never appear in simplified sizes.
        self.symbols: tuple[sympy.Symbol, ...] = tuple(s for s in symbols if s not in replaced)
        self._known: frozenset[sympy.Symbol] = frozenset(symbols)
        self._hints: dict[sympy.Symbol, int] = dict(shape_env.hints) if shape_env is not None else {}
        # Generated code names a symbol by its own name when that cannot clash with ours.
        self._code_names = {s: (s.name if _STANDARD_NAME.match(s.name) else f"ks{i}") for i, s in enumerate(symbols)}
        self._simplified: dict[Any, Size] = {}

    @property
    def dynamic(self) -> bool:
        """True when the graph was traced with symbolic sizes (even if guards specialized them all)."""
        return bool(self._known)

    def is_symbol(self, sym: sympy.Basic) -> bool:
        """True when ``sym`` is one of this graph's size symbols (not a loop variable)."""
        return sym in self._known

    def code_name(self, sym: sympy.Symbol) -> str:
        """The name generated code uses for a size symbol."""
        return self._code_names.get(sym, str(sym.name))

    def simplify(self, value: Any) -> Size:
        """``value`` in canonical form (guarded substitutions applied): an int when constant."""
        if isinstance(value, (bool, int)):
            return int(value)
        found = self._simplified.get(value)
        if found is not None:
            return found
        out = value
        if self.shape_env is not None and isinstance(value, sympy.Basic):
            out = self.shape_env.simplify(value)
        result = normalize(out)
        self._simplified[value] = result
        return result

    def hint(self, value: Size) -> int:
        """The value of ``value`` at the symbols' example values (a choice that only affects speed)."""
        if isinstance(value, int):
            return value
        expr = sympy.sympify(value)
        if expr.is_Integer:
            return int(expr)
        missing = [s for s in expr.free_symbols if s not in self._hints]
        if missing:
            # Data-dependent sizes have no example value: a moderate guess keeps heuristics sane.
            expr = expr.xreplace({s: 8192 for s in missing})
        return int(sympy.floor(expr.xreplace(self._hints)))

    def known(self, cond: Any) -> bool:
        """True when ``cond`` (a sympy relation over sizes) holds for every size the guards admit."""
        if isinstance(cond, bool):
            return cond
        if cond is sympy.true or cond is sympy.false:
            return bool(cond)
        if not isinstance(cond, sympy.Basic):
            return bool(cond)
        if cond.free_symbols and not all(self.is_symbol(s) for s in cond.free_symbols):
            return False
        if self.shape_env is None:
            return False
        return self.shape_env.statically_known(cond) is True


_DEFAULT = SizeEnv()


class _Current(threading.local):
    def __init__(self) -> None:
        self.stack: list[SizeEnv] = []


_STATE = _Current()


@contextlib.contextmanager
def use(env: SizeEnv) -> Iterator[SizeEnv]:
    """Make ``env`` the SizeEnv of the code in the block (one compile)."""
    _STATE.stack.append(env)
    try:
        yield env
    finally:
        _STATE.stack.pop()


def current() -> SizeEnv:
    """The SizeEnv in force (a static one outside any compile)."""
    return _STATE.stack[-1] if _STATE.stack else _DEFAULT


def normalize(value: Any) -> Size:
    """An int for constant sizes, else the expanded sympy expression."""
    if isinstance(value, (bool, int)):
        return int(value)
    expr = sympy.expand(sympy.sympify(value))
    return int(expr) if expr.is_Integer else expr


def hint(value: Size) -> int:
    """``value`` at the current hints."""
    return current().hint(value)


def equal(a: Size, b: Size) -> bool:
    """True when ``a == b`` for every admitted size (the same expression, or a guarded fact)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    diff = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    if diff == 0:
        return True
    if diff.is_number:
        return False
    return current().known(sympy.Eq(diff, 0))


def known_lt(a: Size, b: Size) -> bool:
    """True when ``a < b`` for every admitted size."""
    return _known_positive(sympy.sympify(b) - sympy.sympify(a), strict=True)


def known_le(a: Size, b: Size) -> bool:
    """True when ``a <= b`` for every admitted size."""
    return _known_positive(sympy.sympify(b) - sympy.sympify(a), strict=False)


def _known_positive(diff: sympy.Expr, strict: bool) -> bool:
    diff = sympy.expand(diff)
    if diff.is_number:
        return bool(diff > 0) if strict else bool(diff >= 0)
    # Sizes are positive integers: sympy decides s0 + s1 > 0 from the symbols' assumptions.
    decided = diff.is_positive if strict else diff.is_nonnegative
    if decided:
        return True
    return current().known(sympy.Gt(diff, 0) if strict else sympy.Ge(diff, 0))


def known_multiple(value: Size, divisor: Size) -> bool:
    """True when ``divisor`` divides ``value`` for every admitted size."""
    if isinstance(value, int) and isinstance(divisor, int):
        return divisor != 0 and value % divisor == 0
    quotient = sympy.expand(sympy.sympify(value) / sympy.sympify(divisor))
    if integral(quotient):
        return True
    return current().known(sympy.Eq(sympy.Mod(sympy.sympify(value), sympy.sympify(divisor)), 0))


def integral(expr: sympy.Expr) -> bool:
    """True when ``expr`` is a sum of integer multiples of integer-valued products (an integer for
    integer symbols): ``3*s0*x1`` is, ``s1/2`` and ``x0/s1`` are not."""
    for term in sympy.Add.make_args(expr):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return False
        if any(f.is_integer is not True for f in sympy.Mul.make_args(rest)):
            return False
    return True


def upper_bound(value: Size) -> int | None:
    """The largest value ``value`` takes over the symbols' ranges, or None when unbounded or unknown.

    Only for expressions that grow with every symbol (sums and products of sizes with
    non-negative coefficients, their floor and ceiling): their maximum is at the ranges' tops.
    """
    fixed = static_value(value)
    if fixed is not None:
        return fixed
    env = current()
    expr = sympy.sympify(value)
    if env.shape_env is None or not _increasing(expr):
        return None
    tops: dict[sympy.Symbol, int] = {}
    for sym in expr.free_symbols:
        if not env.is_symbol(sym):
            return None
        top = env.shape_env.value_range(sym).upper
        if top == math.inf:
            return None
        tops[sym] = int(top)
    return int(sympy.floor(expr.xreplace(tops)))


def _increasing(e: sympy.Basic) -> bool:
    """True when ``e`` does not decrease as any (positive) symbol grows."""
    if e.is_Number or e.is_Symbol:
        return True
    if e.is_Add:
        return all(a.is_Number or _increasing(a) for a in e.args)
    if e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        return bool(coeff >= 0) and all(_increasing(f) for f in sympy.Mul.make_args(rest))
    if e.is_Pow:
        return bool(e.exp.is_Integer and int(e.exp) > 0 and _increasing(e.base))
    if isinstance(e, (sympy.floor, sympy.ceiling, sympy.Max, sympy.Min)):
        return all(_increasing(a) for a in e.args)
    return False


def static_value(value: Size) -> int | None:
    """``value`` as an int when it is constant, else None."""
    if isinstance(value, int):
        return value
    return int(value) if getattr(value, "is_Integer", False) else None


def ordered(symbols: Iterable[sympy.Symbol]) -> tuple[sympy.Symbol, ...]:
    """``symbols`` in the graph's symbol order (s0 before s1 before s10)."""
    env = current()
    rank = {s: i for i, s in enumerate(env.symbols)}
    return tuple(sorted(set(symbols), key=lambda s: (rank.get(s, len(rank)), s.name)))
