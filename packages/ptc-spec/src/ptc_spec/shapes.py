"""SymbolEnv: the symbolic sizes of one trace, and the guards that make the trace valid.

Dynamic sizes are sympy symbols (``s0``, ``s1`` ...) created from an example value, the
symbol's *hint*. Tracing runs meta kernels over them; whenever a kernel or the traced code
must *decide* something about a size (``if x.shape[0] > 3``, is this dim 1 and broadcast?),
the SymbolEnv answers with the hint's answer and records the condition that held as a
*guard*. A graph traced this way is valid for exactly the sizes that satisfy its guards.

Conditions that the symbols' value ranges already prove are answered without a guard:
dynamic sizes lie in ``[2, inf)`` (sizes 0 and 1 are always specialized, as in eager
torch.compile, because kernels branch on them), so ``Eq(s0, 1)`` is false for every input.
Equalities that are guarded become substitutions (``Eq(s0, s1)`` replaces s1 by s0 from
then on), so later expressions simplify and do not guard again.

*Unbacked* symbols (``u0`` ...) stand for data-dependent sizes: they have no hint, and a
decision that needs one raises :class:`UnbackedSizeError`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sympy
import torch

from .errors import UnbackedSizeError
from .meta import TensorMeta, size_symbol
from .sym_exprs import integer_valued, term_source, to_term
from .value_ranges import INF, ValueRange, decide

SHAPE_ENV_KEY = "ptc_shape_env"
"""Key of ``GraphModule.meta`` holding a graph's symbols and guards (see :meth:`SymbolEnv.state`)."""

Value = int | float | bool


def _python_value(value: sympy.Basic | Value) -> Value:
    if isinstance(value, (bool, int, float)):
        # xreplace of a bare symbol returns the Python value it was replaced by.
        return value
    if value is sympy.true or value is sympy.false:
        return bool(value)
    if isinstance(value, sympy.Integer):
        return int(value)
    return float(value)


class SymbolEnv:
    """The one mutable object of a trace's symbolic sizes: symbols, hints, ranges, guards."""

    def __init__(self) -> None:
        self._order: list[sympy.Symbol] = []
        self._by_name: dict[str, sympy.Symbol] = {}
        self._hints: dict[sympy.Symbol, int] = {}
        self._ranges: dict[sympy.Symbol, ValueRange] = {}
        self._replacements: dict[sympy.Symbol, sympy.Basic] = {}
        # Exact rewrites from guarded divisibility: Mod(e, n) -> 0 and floor(e/n) -> e/n.
        self._rewrites: dict[sympy.Basic, sympy.Basic] = {}
        self._guards: dict[sympy.Basic, None] = {}
        self._asserts: dict[sympy.Basic, None] = {}
        # Memos of pure functions of the facts above (replacements, rewrites, ranges, guards):
        # tracing asks the same questions thousands of times (every broadcast and contiguity
        # check of every op), and building and deciding sympy relations dominates a symbolic
        # compile without them. _forget() empties them whenever a fact changes.
        self._simplified: dict[sympy.Basic, sympy.Basic] = {}
        self._built: dict[tuple[Any, ...], sympy.Basic] = {}
        self._known: dict[tuple[sympy.Basic, bool], bool | None] = {}
        self._check: Callable[[Mapping[str, int]], bool] | None = None

    # -- symbols ---------------------------------------------------------------------------
    def create_symbol(self, hint: int, *, name: str | None = None, lower: int = 2, upper: int | None = None) -> sympy.Symbol:
        """A new backed size symbol with example value ``hint`` and range ``[lower, upper]``.

        Records ``s >= lower`` (and ``s <= upper``) as guards: the trace assumes them.
        """
        if lower < 1:
            raise ValueError(f"a dynamic size must be at least 1, not {lower}: sizes 0 are always specialized")
        vr = ValueRange(lower, INF if upper is None else upper)
        if isinstance(hint, bool) or not isinstance(hint, int) or not vr.contains(hint):
            raise ValueError(f"the hint {hint!r} of a dynamic size must be an int in {vr}; keep smaller sizes static")
        sym = size_symbol(self._fresh_name(name, "s"))
        self._add(sym, hint, vr)
        self._record(sympy.Ge(sym, lower, evaluate=False))
        if upper is not None:
            self._record(sympy.Le(sym, upper, evaluate=False))
        return sym

    def create_unbacked_symbol(self, *, name: str | None = None, lower: int = 0, upper: int | None = None) -> sympy.Symbol:
        """A new data-dependent size symbol (no hint) in ``[lower, upper]``."""
        vr = ValueRange(lower, INF if upper is None else upper)
        flags = {"positive": True} if lower >= 1 else {"nonnegative": True} if lower >= 0 else {}
        sym = sympy.Symbol(self._fresh_name(name, "u"), integer=True, **flags)
        self._add(sym, None, vr)
        return sym

    def _fresh_name(self, name: str | None, prefix: str) -> str:
        if name is not None:
            if not name.isidentifier() or name in self._by_name:
                raise ValueError(f"symbol name {name!r} is not an identifier or is already used in this SymbolEnv")
            return name
        return next(f"{prefix}{i}" for i in itertools.count() if f"{prefix}{i}" not in self._by_name)

    def _add(self, sym: sympy.Symbol, hint: int | None, vr: ValueRange) -> None:
        self._order.append(sym)
        self._by_name[sym.name] = sym
        self._ranges[sym] = vr
        if hint is not None:
            self._hints[sym] = hint

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every symbol of this environment, in creation order."""
        return tuple(self._order)

    def symbol(self, name: str) -> sympy.Symbol:
        """The symbol called ``name`` (KeyError when there is none)."""
        return self._by_name[name]

    def is_backed(self, sym: sympy.Symbol) -> bool:
        """True when ``sym`` has an example value (is not data-dependent)."""
        return sym in self._hints

    def value_range(self, sym: sympy.Symbol) -> ValueRange:
        """The range ``sym`` is known to lie in (narrowed by the guards recorded so far)."""
        return self._ranges[sym]

    @property
    def hints(self) -> Mapping[sympy.Symbol, int]:
        """The example value of every backed symbol."""
        return self._hints

    @property
    def replacements(self) -> Mapping[sympy.Symbol, sympy.Basic]:
        """Symbols that guarded equalities express in terms of others (``s1 -> s0``)."""
        return self._replacements

    # -- expressions -----------------------------------------------------------------------
    def simplify(self, expr: sympy.Basic) -> sympy.Basic:
        """``expr`` in canonical form, with the substitutions learnt from guards applied."""
        cached = self._simplified.get(expr)
        if cached is not None:
            return cached
        out = expr.xreplace(self._replacements) if self._replacements else expr
        if self._rewrites:
            exact = self._canonical(out.xreplace(self._rewrites))
            # A size must stay an integer expression: 4*floor(s0/4) becomes s0, but floor(s0/2)
            # stays (as s0/2 it would read as a float to every consumer that types sizes by
            # their expression).
            if isinstance(exact, sympy.Expr) and not integer_valued(exact):
                exact = self._canonical(out.xreplace({k: v for k, v in self._rewrites.items() if v == 0}))
            out = exact
        else:
            out = self._canonical(out)
        self._simplified[expr] = out
        return out

    def built(self, key: tuple[Any, ...], build: Callable[[], sympy.Basic]) -> sympy.Basic:
        """``simplify(build())``, memoized under ``key`` (an operation and its operand expressions)
        until the facts change: the same size arithmetic then costs one dict lookup."""
        found = self._built.get(key)
        if found is None:
            found = self.simplify(build())
            self._built[key] = found
        return found

    def _forget(self) -> None:
        """Drop every memo: a new replacement, rewrite or range can change any answer."""
        self._simplified.clear()
        self._built.clear()
        self._known.clear()

    def _canonical(self, expr: sympy.Basic) -> sympy.Basic:
        """Expanded sums of products, so equal sizes built differently compare equal, with
        Max/Min the ranges decide pruned and relations scaled to integer coefficients."""
        if isinstance(expr, sympy.core.relational.Relational):
            return self._relation(type(expr), self._canonical(expr.lhs), self._canonical(expr.rhs))
        if isinstance(expr, sympy.Not):
            return sympy.Not(self._canonical(expr.args[0]))
        if isinstance(expr, (sympy.And, sympy.Or)):
            # Drop the conjuncts (disjuncts) the ranges already decide: (s0 > 1) & (s0 > 2) is s0 > 2.
            settles = isinstance(expr, sympy.Or)
            kept = []
            for arg in expr.args:
                arg = self._canonical(arg)
                found = decide(arg, self._ranges)
                if found is settles:
                    return sympy.true if settles else sympy.false
                if found is None:
                    kept.append(arg)
            return type(expr)(*kept)
        if not isinstance(expr, sympy.Expr):
            return expr
        out = sympy.expand(expr)
        if out.has(sympy.Float) and out.has(sympy.floor, sympy.ceiling):
            out = out.replace(lambda e: isinstance(e, (sympy.floor, sympy.ceiling)) and e.has(sympy.Float), _exact_rounding)
        if out.has(sympy.Max, sympy.Min):
            out = out.replace(lambda e: isinstance(e, (sympy.Max, sympy.Min)), self._prune_extreme)
        if out.has(sympy.Mod):
            out = out.replace(lambda e: isinstance(e, sympy.Mod), self._reduce_mod)
        return out

    def _reduce_mod(self, e: sympy.Basic) -> sympy.Basic:
        # Mod(a, b) is a when 0 <= a < b for every allowed value (Mod(1, s0) with s0 >= 2).
        a, b = e.args
        return a if decide(sympy.And(sympy.Ge(a, 0), sympy.Lt(a, b)), self._ranges) else e

    def _prune_extreme(self, e: sympy.Basic) -> sympy.Basic:
        # Max(1, s0) is s0 when s0 >= 1 for every allowed value (torch's contiguous strides
        # are max(1, size) products, so this keeps strides plain).
        keep = list(e.args)
        dominates = sympy.Ge if isinstance(e, sympy.Max) else sympy.Le
        for a in e.args:
            if any(b is not a and b in keep and decide(dominates(b, a), self._ranges) for b in keep):
                keep.remove(a)
        return type(e)(*keep)

    def _relation(self, kind: type, lhs: sympy.Basic, rhs: sympy.Basic) -> sympy.Basic:
        scale = 1
        for term in (*sympy.Add.make_args(lhs), *sympy.Add.make_args(rhs)):
            coeff = term.as_coeff_Mul()[0]
            if coeff.is_Rational:
                scale = math.lcm(scale, int(coeff.q))
        if scale != 1:
            lhs, rhs = sympy.expand(lhs * scale), sympy.expand(rhs * scale)
        diff: sympy.Basic | None = None
        if kind in (sympy.Eq, sympy.Ne) and (lhs.has(sympy.floor) or rhs.has(sympy.floor)):
            rewritten = _floor_to_mod(sympy.expand(lhs - rhs))
            diff = None if rewritten.has(sympy.floor) else rewritten
        diff = self._without_positive_factors(sympy.expand(lhs - rhs) if diff is None else diff) or diff
        if diff is not None:
            kind, lhs, rhs = _sides(kind, diff)
        constant, rest = lhs.as_coeff_Add()
        if constant != 0 and rhs.is_number:
            lhs, rhs = rest, rhs - constant  # s0 + 1 == 9 reads s0 == 8
        result = kind(lhs, rhs)
        if isinstance(result, (sympy.Eq, sympy.Ne)):
            # One orientation per equality: Eq(s1, s0) and Eq(s0, s1) are one guard.
            return result.canonical
        return result

    def _without_positive_factors(self, diff: sympy.Basic) -> sympy.Basic | None:
        """``diff`` without the factors that are positive for every allowed value, or None when it has none.

        ``a*x OP 0`` is ``x OP 0`` when a > 0 (a dynamic size, say): ``s0*s1 != 2*s0`` reads ``s1 != 2``.
        """
        factored = sympy.factor_terms(diff)
        if not isinstance(factored, sympy.Mul):
            return None
        kept = [f for f in factored.args if not (f.is_positive or decide(sympy.Gt(f, 0), self._ranges))]
        if len(kept) == len(factored.args):
            return None
        # Every factor positive: the product compares with 0 as 1 does (strides of a
        # contiguous tensor: s0*floor(s1/2) >= floor(s1/2) holds for every s0 >= 2).
        return sympy.Mul(*kept) if kept else sympy.Integer(1)

    def has_hint(self, expr: sympy.Basic) -> bool:
        """True when ``expr`` mentions no data-dependent symbol."""
        return all(s in self._hints for s in self.simplify(expr).free_symbols)

    def size_hint(self, expr: sympy.Basic) -> Value:
        """The value of ``expr`` at the symbols' hints (records nothing)."""
        expr = self.simplify(expr)
        missing = [s for s in expr.free_symbols if s not in self._hints]
        if missing:
            self._raise_unbacked(expr, missing)
        return _python_value(expr.xreplace(self._hints))

    def statically_known(self, cond: sympy.Basic, *, size_oblivious: bool = False) -> bool | None:
        """True or False when ``cond`` holds or fails for every value in the symbols' ranges, else None.

        ``size_oblivious`` also assumes that data-dependent sizes are not 0 or 1.
        """
        cond = self.simplify(cond)
        key = (cond, size_oblivious)
        if key in self._known:
            return self._known[key]
        known: bool | None
        if cond in self._guards or cond in self._asserts:
            known = True
        elif cond.is_Relational and _negate(cond) in self._guards:
            known = False
        else:
            ranges: Mapping[sympy.Symbol, ValueRange] = self._ranges
            if size_oblivious:
                ranges = {s: (r if s in self._hints else r.intersect(ValueRange(2, INF))) for s, r in self._ranges.items()}
            known = decide(cond, ranges)
        self._known[key] = known
        return known

    # -- decisions (each records a guard) --------------------------------------------------
    def guard_bool(self, cond: sympy.Basic) -> bool:
        """The value of ``cond`` at the hints; guards that it keeps that value."""
        cond = self.simplify(cond)
        known = self.statically_known(cond)
        if known is not None:
            return known
        value = bool(self.size_hint(cond))
        self._record(cond if value else _negate(cond))
        return value

    def guard_int(self, expr: sympy.Basic) -> int:
        """The value of ``expr`` at the hints; guards ``Eq(expr, value)`` (specializes it)."""
        return int(self._guard_value(expr))

    def guard_float(self, expr: sympy.Basic) -> float:
        """The value of a float expression at the hints; guards that it keeps that value."""
        return float(self._guard_value(expr))

    def _guard_value(self, expr: sympy.Basic) -> Value:
        expr = self.simplify(expr)
        if expr.is_number:
            return _python_value(expr)
        value = self.size_hint(expr)
        self._record(self.simplify(sympy.Eq(expr, value)))
        return value

    def guard_or(self, cond: sympy.Basic, default: bool) -> bool:
        """Like :meth:`guard_bool`, but ``default`` (and no guard) when ``cond`` needs a data-dependent size."""
        cond = self.simplify(cond)
        known = self.statically_known(cond)
        if known is not None:
            return known
        if not self.has_hint(cond):
            return default
        return self.guard_bool(cond)

    def expect_true(self, cond: sympy.Basic) -> bool:
        """Assume ``cond`` (``torch._check``): guard it when it has a hint, else keep it as a run-time assertion."""
        cond = self.simplify(cond)
        if self.statically_known(cond) is True:
            return True
        if self.has_hint(cond):
            # False lets torch._check raise the caller's own message.
            return self.guard_bool(cond)
        if cond not in self._asserts:
            self._asserts[cond] = None
            self._known.clear()
            self._learn(cond)
        return True

    def _raise_unbacked(self, expr: sympy.Basic, missing: Iterable[sympy.Symbol]) -> None:
        names = ", ".join(sorted(s.name for s in missing))
        unknown = [s.name for s in missing if s not in self._ranges]
        if unknown:
            raise KeyError(f"{expr} mentions {', '.join(sorted(unknown))}, which this SymbolEnv did not create")
        raise UnbackedSizeError(
            f"tracing needs to know {expr}, but {names} is a data-dependent size with no example value;"
            " state what holds with torch._check, or keep this computation outside the traced function"
        )

    # -- guards ----------------------------------------------------------------------------
    def _record(self, guard: sympy.Basic) -> None:
        if isinstance(guard, sympy.And):
            for arg in guard.args:
                self._record(arg)
            return
        if guard is sympy.true or guard in self._guards:
            return
        if guard is sympy.false:
            raise AssertionError("a guard that can never hold was recorded")
        self._guards[guard] = None
        self._known.clear()
        self._check = None
        self._learn(guard)
        if isinstance(guard, sympy.Eq):
            self._specialize_unsolved(guard)

    def _specialize_unsolved(self, guard: sympy.Basic) -> None:
        # A product of sizes equal to a constant that no substitution solves (4*(s2 - 2)*(s3 - 2)
        # == 144: a flatten feeding a Linear) admits a handful of sizes only, and keeping it
        # would leave sizes like 36/(s2 - 2) that have no integer form: specialize them.
        # Relations between sizes (s0*s1 == s2*s3, two tensors' numels) and relations over
        # rounded quotients (torch.chunk's) stay guards.
        left = self.simplify(guard)
        if not isinstance(left, sympy.Eq) or left.has(sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min):
            return
        diff = sympy.expand(left.lhs - left.rhs)
        if not diff.is_polynomial() or diff.as_coeff_Add()[0] == 0:
            return
        for sym in sorted(left.free_symbols & self._hints.keys(), key=self._order.index):
            if sym not in self._replacements:
                self._record(sympy.Eq(sym, self._hints[sym]))

    def _learn(self, fact: sympy.Basic) -> None:
        """Narrow ranges and add substitutions from a condition that now always holds."""
        if isinstance(fact, sympy.And):
            for arg in fact.args:
                self._learn(arg)
            return
        if not isinstance(fact, sympy.core.relational.Relational):
            return
        diff = sympy.expand(fact.lhs - fact.rhs)
        if isinstance(fact, sympy.Eq) and isinstance(diff, sympy.Mod):
            self._divisible(*diff.args)
        elif isinstance(fact, sympy.Eq):
            self._substitute(diff)
        elif diff.free_symbols and len(diff.free_symbols) == 1:
            self._narrow(fact, diff)

    def _narrow(self, fact: sympy.Basic, diff: sympy.Basic) -> None:
        (sym,) = diff.free_symbols
        if sym not in self._ranges:
            return
        coeff = diff.coeff(sym)
        rest = sympy.expand(diff - coeff * sym)
        if not coeff.is_Rational or coeff == 0 or rest.free_symbols:
            return
        # coeff*sym + rest OP 0  <=>  sym OP' -rest/coeff (OP flipped when coeff < 0).
        edge = -rest / coeff
        name = type(fact).__name__
        if coeff < 0:
            name = _FLIPPED.get(name, name)
        lower, upper = -INF, INF
        if name == "GreaterThan":
            lower = int(sympy.ceiling(edge))
        elif name == "StrictGreaterThan":
            lower = int(sympy.floor(edge)) + 1
        elif name == "LessThan":
            upper = int(sympy.floor(edge))
        elif name == "StrictLessThan":
            upper = int(sympy.ceiling(edge)) - 1
        else:
            return
        self._ranges[sym] = self._ranges[sym].intersect(ValueRange(lower, upper))
        self._forget()

    def _divisible(self, value: sympy.Basic, divisor: sympy.Basic) -> None:
        self._rewrites[sympy.Mod(value, divisor)] = sympy.Integer(0)
        self._rewrites[sympy.floor(value / divisor)] = value / divisor
        self._forget()

    def _substitute(self, diff: sympy.Basic) -> None:
        # Replace the data-dependent or most recent symbol that the equality solves for with
        # integer coefficients, so substituted expressions stay integer polynomials.
        candidates = sorted(
            (s for s in diff.free_symbols if s in self._ranges),
            key=lambda s: (s in self._hints, -self._order.index(s)),
        )
        for sym in candidates:
            coeff = diff.coeff(sym)
            rest = sympy.expand(diff - coeff * sym)
            if sym in rest.free_symbols or not coeff.is_Integer or coeff == 0:
                continue
            value = -rest / coeff
            if not (abs(coeff) == 1 or value.is_Integer):
                continue
            if sympy.denom(sympy.together(value)) != 1:
                # s1 == s3*s4/s0 (a reshape's divisibility rewrite): a quotient of symbols is
                # no size expression; the equality stays a guard instead.
                continue
            self._replacements = {k: v.xreplace({sym: value}) for k, v in self._replacements.items()}
            self._replacements[sym] = value
            self._forget()
            # The replaced symbol's range now bounds its value (s1 -> s0 - 3 with s1 >= 2 says
            # s0 >= 5); without it, a size written s0 - 3 could not be proved >= 0 again.
            self._bound(value, self._ranges[sym])
            return

    def _bound(self, expr: sympy.Basic, vr: ValueRange) -> None:
        """Narrow ranges from ``expr`` lying in ``vr`` (learnt, not guarded: it follows from the guards)."""
        if vr.lower != -INF:
            self._learn(sympy.Ge(expr, int(vr.lower)))
        if vr.upper != INF:
            self._learn(sympy.Le(expr, int(vr.upper)))

    @property
    def guards(self) -> tuple[sympy.Basic, ...]:
        """Every condition the trace relies on, in the order it was recorded, without duplicates."""
        return tuple(self._guards)

    @property
    def runtime_asserts(self) -> tuple[sympy.Basic, ...]:
        """Conditions on data-dependent sizes assumed with ``torch._check`` (checkable only inside the graph)."""
        return tuple(self._asserts)

    def guards_source(self, names: Mapping[str, str] | None = None) -> str:
        """The guards as one Python boolean expression; symbol ``s`` prints as ``names[s]`` (default: its name)."""
        if not self._guards:
            return "True"
        return " and ".join(term_source(to_term(g, bool), names) for g in self._guards)

    def guards_hold(self, values: Mapping[str, int]) -> bool:
        """True when every guard holds for the symbol values ``values`` (by symbol name)."""
        check = self._check
        if check is None:
            check = self._check = self._compile_check()
        return check(values)

    def _compile_check(self) -> Callable[[Mapping[str, int]], bool]:
        # Generated from our own sympy printing (names are validated identifiers), compiled
        # once: evaluating five guards this way costs well under a microsecond.
        used = sorted({s.name for g in self._guards for s in g.free_symbols})
        lines = ["def _ptc_guards(v):"]
        lines += [f"    {name} = v[{name!r}]" for name in used]
        lines.append(f"    return bool({self.guards_source()})")
        scope: dict[str, Any] = {"max": max, "min": min, "float": float}
        exec(compile("\n".join(lines), "<ptc guards>", "exec"), scope)
        fn: Callable[[Mapping[str, int]], bool] = scope["_ptc_guards"]
        return fn

    # -- serializable state ----------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Symbols (name, hint or None, lower, upper or None), substitutions, guards and assertions, as graph-file values."""
        symbols = tuple(
            (s, self._hints.get(s), _bound(self._ranges[s].lower), _bound(self._ranges[s].upper)) for s in self._order
        )
        return {
            "symbols": symbols,
            "replacements": tuple(self._replacements.items()),
            "rewrites": tuple(self._rewrites.items()),
            "guards": self.guards,
            "runtime_asserts": self.runtime_asserts,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SymbolEnv:
        """Rebuild the environment that :meth:`state` described."""
        env = cls()
        for sym, hint, lower, upper in state["symbols"]:
            env._add(sym, hint, ValueRange(-INF if lower is None else lower, INF if upper is None else upper))
        env._replacements = dict(state["replacements"])
        env._rewrites = dict(state.get("rewrites", ()))
        env._guards = dict.fromkeys(state["guards"])
        env._asserts = dict.fromkeys(state["runtime_asserts"])
        return env


def short_binary_fraction(value: sympy.Float) -> bool:
    """Whether a float constant is k / 2**m with m <= 20 (0.5, 1.25, 0.75): scale factors whose
    products with sizes a float computes exactly, so exact and eager rounding agree. Every float
    is a binary fraction; 1/3's needs m = 54, and eager's rounded products then differ."""
    q = int(sympy.Rational(value).q)
    return q & (q - 1) == 0 and q <= 2**20


def _exact_rounding(e: sympy.Basic) -> sympy.Basic:
    """floor/ceiling of an expression with binary-fraction float coefficients (a scale factor:
    floor(0.5*s0)) over the exact fractions: floor(s0/2) is then integer division, as every
    consumer lowers it, and one size is never written two ways."""
    arg = e.args[0]
    floats = arg.atoms(sympy.Float)
    if not all(short_binary_fraction(f) for f in floats):
        # Not exactly a binary fraction: no rational stands for eager's rounded float product
        # at every size (SymNode specializes such roundings before they reach here).
        return e
    return type(e)(sympy.expand(arg.xreplace({f: sympy.Rational(f) for f in floats})))


def _bound(b: object) -> int | None:
    return None if b in (INF, -INF) else int(b)  # type: ignore[call-overload]


_FLIPPED = {
    "GreaterThan": "LessThan",
    "LessThan": "GreaterThan",
    "StrictGreaterThan": "StrictLessThan",
    "StrictLessThan": "StrictGreaterThan",
}


def _floor_to_mod(diff: sympy.Basic) -> sympy.Basic:
    """``diff`` with ``floor(x/n)`` written as ``(x - Mod(x, n))/n`` where that is simpler.

    A view's numel check reads ``s0*s1 == 2*s0*floor(s1/2)``; rewritten it is
    ``s0*Mod(s1, 2) == 0``, which the SymbolEnv reduces to the divisibility ``Mod(s1, 2) == 0``.
    """
    for f in diff.atoms(sympy.floor):
        num, den = sympy.fraction(sympy.together(f.args[0]))
        if den.is_Integer and den > 1:
            candidate = sympy.expand(diff.xreplace({f: (num - sympy.Mod(num, den)) / den}))
            if sympy.count_ops(candidate) < sympy.count_ops(diff):
                diff = candidate
    return diff


_REVERSED: dict[type, type] = {sympy.Eq: sympy.Eq, sympy.Ne: sympy.Ne, sympy.Ge: sympy.Le, sympy.Le: sympy.Ge, sympy.Gt: sympy.Lt, sympy.Lt: sympy.Gt}


def _sides(kind: type, diff: sympy.Basic) -> tuple[type, sympy.Basic, sympy.Basic]:
    """``diff OP 0`` as ``lhs OP rhs`` with positive terms on each side (``s0 - s1 == 0`` reads ``s0 == s1``)."""
    terms = sympy.Add.make_args(diff)
    left = [t for t in terms if not t.could_extract_minus_sign()]
    right = [-t for t in terms if t.could_extract_minus_sign()]
    lhs, rhs = sympy.Add(*left), sympy.Add(*right)
    if lhs.is_number and not rhs.is_number:
        return _REVERSED[kind], rhs, lhs
    return kind, lhs, rhs


def _negate(cond: sympy.Basic) -> sympy.Basic:
    # sympy turns Not(a >= b) into a < b and Not(Eq) into Ne; De Morgan does the same for
    # connectives, so a negated guard reads as relations, not as ~(...).
    if isinstance(cond, sympy.And):
        return sympy.Or(*(_negate(a) for a in cond.args))
    if isinstance(cond, sympy.Or):
        return sympy.And(*(_negate(a) for a in cond.args))
    return sympy.Not(cond)


def symbol_values(metas: Sequence[TensorMeta], tensors: Sequence[torch.Tensor]) -> dict[str, int] | None:
    """The size each symbol that is a dim of ``metas`` has in ``tensors``, by name (for ``guards_hold``).

    None when one symbol would take two different values (the inputs disagree on a size
    the trace assumed shared).
    """
    values: dict[str, int] = {}
    for meta, tensor in zip(metas, tensors):
        for size, actual in zip(meta.shape, tensor.shape):
            if isinstance(size, sympy.Symbol) and values.setdefault(size.name, actual) != actual:
                return None
    return values


def record_shape_env(gm: Any, env: SymbolEnv) -> None:
    """Store ``env``'s state in ``gm.meta`` (it travels with graph files)."""
    gm.meta[SHAPE_ENV_KEY] = env.state()


def shape_env_of(gm: Any) -> SymbolEnv | None:
    """The SymbolEnv recorded on a graph by the tracer, or None for a graph of static sizes."""
    state = getattr(gm, "meta", {}).get(SHAPE_ENV_KEY)
    return None if state is None else SymbolEnv.from_state(state)
