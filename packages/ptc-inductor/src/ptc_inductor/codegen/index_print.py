"""Printing integer index and size expressions (sympy) as C++, Triton or Python source.

One printer serves every language: they differ only in how they spell integer division, a
large literal, and max/min. Index expressions mix loop variables (``x0``, ``r1``) with size
symbols (``s0``), which print under the name the SizeEnv gives them.

Sizes may carry rational coefficients once a guard made a division exact (``s1/2`` when s1 is
known even): a sum or product with fractions prints as an exact integer division of its
numerator by the common denominator, never through floating point. Generated index
arithmetic stays non-negative, so C++'s and Triton's truncating division is floor division
there; Python's ``//`` is floor division everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from .. import sizes
from ..errors import CodegenError


@dataclass(frozen=True, slots=True)
class Language:
    """How one target language spells the integer operations an index uses."""

    name: str
    div: str
    mul: str
    max_fn: str
    min_fn: str
    big_suffix: str = ""


CPP = Language("C++", "/", "*", "std::max<int64_t>", "std::min<int64_t>", "LL")
TRITON = Language("Triton", "//", " * ", "tl.maximum", "tl.minimum")
PYTHON = Language("Python", "//", " * ", "max", "min")


class IndexPrinter:
    """Prints expressions in ``lang``; records the size symbols it printed (a kernel's size parameters)."""

    def __init__(self, lang: Language) -> None:
        self.lang = lang
        self.used: set[sympy.Symbol] = set()
        self._env = sizes.current()

    def __call__(self, e: sympy.Basic | int) -> str:
        """Source computing the integer ``e``."""
        return self.print(sympy.sympify(e))

    def print(self, e: sympy.Basic) -> str:
        lang = self.lang
        if e.is_Integer:
            v = int(e)
            return f"{v}{lang.big_suffix}" if lang.big_suffix and abs(v) >= 2**31 else str(v)
        if e.is_Symbol:
            if self._env.is_symbol(e):
                self.used.add(e)
                return self._env.code_name(e)
            return str(e.name)
        if e.is_Add or e.is_Mul:
            den = _denominator(e)
            if den != 1:
                return self._exact_division(e, den)
        if e.is_Add:
            return "(" + " + ".join(self.print(a) for a in e.as_ordered_terms()) + ")"
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            factors = [self.print(a) for a in sympy.Mul.make_args(rest)]
            if coeff != 1:
                factors.insert(0, self.print(coeff))
            return "(" + lang.mul.join(factors) + ")"
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            num, den = sympy.expand(num), sympy.expand(den)
            if den == 1:
                return self.print(num)
            if isinstance(e, sympy.floor):
                return f"({self.print(num)} {lang.div} {self.print(den)})"
            if lang is PYTHON:
                return f"(-({self.print(-num)} // {self.print(den)}))"
            # Non-negative numerator (sizes): ceil(a / b) == (a + b - 1) / b.
            return f"({self.print(sympy.expand(num + den - 1))} {lang.div} {self.print(den)})"
        if isinstance(e, sympy.Mod):
            return f"({self.print(e.args[0])} % {self.print(e.args[1])})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            fn = lang.max_fn if isinstance(e, sympy.Max) else lang.min_fn
            return _fold(fn, [self.print(a) for a in e.args])
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            return "(" + lang.mul.join([self.print(e.base)] * int(e.exp)) + ")"
        raise CodegenError(f"cannot print index expression {e} as {lang.name}")


    def _exact_division(self, e: sympy.Basic, den: int) -> str:
        """``e`` (an integer) with fractional coefficients: its integer terms as they are, plus
        the fractional ones' sum (an integer too) as one exact division. ``x1 + x0*s1/2`` prints
        ``x1 + (x0*s1) / 2``: the division depends on the outer loop only, so it is hoisted."""
        whole = [t for t in sympy.Add.make_args(e) if t.as_coeff_Mul()[0].is_Integer]
        parts = [t for t in sympy.Add.make_args(e) if not t.as_coeff_Mul()[0].is_Integer]
        divided = f"({self.print(sympy.expand(sympy.Add(*parts) * den))} {self.lang.div} {den})"
        if not whole:
            return divided
        return "(" + " + ".join([*(self.print(t) for t in sympy.Add(*whole).as_ordered_terms()), divided]) + ")"


def _fold(fn: str, args: list[str]) -> str:
    out = args[0]
    for a in args[1:]:
        out = f"{fn}({out}, {a})"
    return out


def _denominator(e: sympy.Basic) -> int:
    """The least common denominator of the rational coefficients of a sum or product."""
    den = 1
    for term in sympy.Add.make_args(e):
        coeff = term.as_coeff_Mul()[0]
        if coeff.is_Rational:
            den = math.lcm(den, int(coeff.q))
    return den


def python_size(e: sympy.Basic | int) -> str:
    """A Python expression of the size ``e`` over the symbols' names (the wrapper's locals)."""
    return IndexPrinter(PYTHON)(e)


def python_float(e: sympy.Basic) -> str:
    """A Python float expression of ``e`` (a symbolic float: ``s1 / 2`` is true division)."""
    num, den = sympy.fraction(sympy.together(sympy.sympify(e)))
    if den == 1:
        return f"float({python_size(num)})"
    return f"({python_size(sympy.expand(num))} / {python_size(sympy.expand(den))})"


Printer = Callable[[sympy.Basic | int], str]
