"""C++/OpenMP code generation: the ``ops`` handler emitting one node's C++ (the loop nests
around it are ``cpp_kernel.py``'s)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from .. import sizes
from ..errors import CodegenError
from ..indexing import Expr, contiguous_strides, indirect_symbol
from ..ir import Buffer
from ..sizes import Size
from .cpp_index import cconst, compute_ctype, storage_ctype
from .index_print import CPP, IndexPrinter

_UNARY = {
    "exp": "ptc_exp({0})",
    "exp2": "std::exp2({0})",
    "expm1": "std::expm1({0})",
    "log": "std::log({0})",
    "log2": "std::log2({0})",
    "log10": "std::log10({0})",
    "log1p": "std::log1p({0})",
    "sqrt": "std::sqrt({0})",
    "rsqrt": "ptc_rsqrt({0})",
    "reciprocal": "(decltype({0})(1) / {0})",
    "sin": "std::sin({0})",
    "cos": "std::cos({0})",
    "tan": "std::tan({0})",
    "asin": "std::asin({0})",
    "acos": "std::acos({0})",
    "atan": "std::atan({0})",
    "sinh": "std::sinh({0})",
    "cosh": "std::cosh({0})",
    "tanh": "std::tanh({0})",
    "asinh": "std::asinh({0})",
    "acosh": "std::acosh({0})",
    "atanh": "std::atanh({0})",
    "sigmoid": "ptc_sigmoid({0})",
    "erf": "std::erf({0})",
    "erfc": "std::erfc({0})",
    "erfinv": "static_cast<decltype({0})>(ptc_erfinv({0}))",
    "lgamma": "std::lgamma({0})",
    "digamma": "static_cast<decltype({0})>(ptc_digamma({0}))",
    "i0": "static_cast<decltype({0})>(ptc_i0({0}))",
    "frac": "ptc_frac({0})",
    "abs": "ptc_abs({0})",
    "neg": "(-{0})",
    "sign": "ptc_sign({0})",
    "bitwise_not": "ptc_bitwise_not({0})",
    "floor": "std::floor({0})",
    "ceil": "std::ceil({0})",
    "round": "ptc_round({0})",
    "trunc": "std::trunc({0})",
    "signbit": "ptc_signbit({0})",
    "isnan": "std::isnan({0})",
    "isinf": "std::isinf({0})",
    "logical_not": "(!{0})",
    "relu": "ptc_max({0}, decltype({0})(0))",
}

_BINARY = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "truediv": "({0} / {1})",
    "floordiv": "ptc_floordiv({0}, {1})",
    "truncdiv": "ptc_truncdiv({0}, {1})",
    "remainder": "ptc_remainder({0}, {1})",
    "fmod": "ptc_fmod({0}, {1})",
    "pow": "ptc_pow({0}, {1})",
    "maximum": "ptc_max({0}, {1})",
    "minimum": "ptc_min({0}, {1})",
    "atan2": "std::atan2({0}, {1})",
    "copysign": "std::copysign({0}, {1})",
    "nextafter": "std::nextafter({0}, {1})",
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    "left_shift": "ptc_shl({0}, {1})",
    "right_shift": "ptc_shr({0}, {1})",
    "fmax": "ptc_fmax({0}, {1})",
    "fmin": "ptc_fmin({0}, {1})",
    "hypot": "std::hypot({0}, {1})",
    "logaddexp": "ptc_logaddexp({0}, {1})",
    "heaviside": "ptc_heaviside({0}, {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "logical_and": "(static_cast<bool>({0}) && static_cast<bool>({1}))",
    "logical_or": "(static_cast<bool>({0}) || static_cast<bool>({1}))",
    "logical_xor": "(static_cast<bool>({0}) != static_cast<bool>({1}))",
}

POINTWISE_OPS = frozenset(_UNARY) | frozenset(_BINARY)
"""Names of the math ops every backend handler implements (besides load/store/where/...)."""

_COMBINE = {
    "sum": "{acc} += {v};",
    "prod": "{acc} *= {v};",
    "max": "{acc} = ptc_max({acc}, {v});",
    "min": "{acc} = ptc_min({acc}, {v});",
    "any": "{acc} = {acc} || static_cast<bool>({v});",
    "all": "{acc} = {acc} && static_cast<bool>({v});",
    "argmax": "{acc} = ptc_argmax_add({acc}, {v}, {i});",
    "argmin": "{acc} = ptc_argmin_add({acc}, {v}, {i});",
    "welford": "{acc} = ptc_welford_add({acc}, {v});",
}

MERGE = {
    "sum": "{a} += {b};",
    "prod": "{a} *= {b};",
    "max": "{a} = ptc_max({a}, {b});",
    "min": "{a} = ptc_min({a}, {b});",
    "any": "{a} = {a} || {b};",
    "all": "{a} = {a} && {b};",
    "argmax": "{a} = ptc_argmax_merge({a}, {b});",
    "argmin": "{a} = ptc_argmin_merge({a}, {b});",
    "welford": "{a} = ptc_welford_merge({a}, {b});",
}


_COSTLY_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "lgamma", "digamma", "i0",
})
"""Ops worth a store and a load to avoid computing twice (a row buffer, see RowCache)."""

ROW_CACHE_MAX = 8192
"""Most elements of one row buffer: it lives on each thread's stack and should stay in L1/L2."""

_TMP_NAME = re.compile(r"\btmp\d+\b")

SIMD_REDUCTION = {"sum": "+", "prod": "*", "max": "ptc_max", "min": "ptc_min"}
"""Reductions whose accumulator OpenMP can split across vector lanes."""


def _reduction_init(rtype: str, dtype: torch.dtype, src_dtype: torch.dtype) -> tuple[str, str]:
    """The C++ accumulator type and initial value of a reduction."""
    ct = compute_ctype(dtype)
    if rtype == "sum":
        return ct, cconst(0, dtype)
    if rtype == "prod":
        return ct, cconst(1, dtype)
    if rtype in ("max", "min"):
        sign = "-" if rtype == "max" else ""
        if dtype.is_floating_point:
            return ct, f"{sign}std::numeric_limits<{ct}>::infinity()"
        bound = "lowest" if rtype == "max" else "max"
        return ct, f"std::numeric_limits<{ct}>::{bound}()"
    if rtype in ("any", "all"):
        return "bool", "false" if rtype == "any" else "true"
    if rtype in ("argmax", "argmin"):
        st = compute_ctype(src_dtype)
        return f"PtcArg<{st}>", f"PtcArg<{st}>{{{st}(0), -1}}"
    if rtype == "welford":
        return f"PtcWelford<{ct}>", f"PtcWelford<{ct}>{{}}"
    raise CodegenError(f"unknown reduction type {rtype}")


@dataclass
class RowValue:
    """The costly per-element input of a row reduction, as a later node of the kernel would key it."""

    key: str
    name: str
    ctype: str
    index: str


@dataclass
class RowCache:
    """A row reduction's input kept in a per-thread array, so later nodes over the row read it.

    Softmax is the case: sum(exp(x - max)) then exp(x - max) / sum computes exp twice per
    element without it.
    """

    array: str
    value: RowValue
    ranges: tuple[int, ...]
    code: NodeCode
    used: bool = False


@dataclass
class _Acc:
    name: str
    rtype: str
    ctype: str
    init: str


class NodeCode:
    """The C++ of one node: statements before, inside and after its innermost loop."""

    def __init__(self) -> None:
        self.prefix: list[str] = []
        self.body: list[str] = []
        self.suffix: list[str] = []
        self.accs: list[_Acc] = []
        self.row_value: RowValue | None = None
        self.stores: set[str] = set()


class CppOps:
    """The ``ops`` handler that emits C++ statements for one node into a NodeCode."""

    def __init__(
        self,
        code: NodeCode,
        buffers: dict[str, Buffer],
        names: Callable[[], str],
        rvars: Sequence[Expr],
        rranges: Sequence[int],
        partial: bool,
        hoist: frozenset[sympy.Symbol] | None,
        local: frozenset[str] = frozenset(),
        canon: dict[sympy.Symbol, sympy.Symbol] | None = None,
        row_reads: dict[str, RowCache] | None = None,
        row_index: str = "",
        printer: IndexPrinter | None = None,
    ) -> None:
        self.code = code
        # Prints indices and records the size symbols they use (the kernel's size parameters).
        self.p = printer if printer is not None else IndexPrinter(CPP)
        self.sizes = sizes.current()
        self.local = local
        self.hoist = hoist
        self.hoisted: dict[str, str] = {}
        self.masked_depth = 0
        self.buffers = buffers
        self._fresh = names
        self.lines = code.body
        self.cse: dict[str, str] = {}
        self.rvars = rvars
        self.rranges = rranges
        self.partial = partial
        # Canonical keys let two nodes of a kernel recognise the same per-element value:
        # inner loop variables are renamed to c0.. (``canon``) and temporaries to their keys.
        self.canon = canon
        self.keys: dict[str, str] = {}
        self.costly: set[str] = set()
        self.row_reads = row_reads or {}
        self.row_index = row_index

    def _key(self, expr: str) -> str | None:
        """``expr`` with every temporary replaced by its key; None if one has no key."""
        missing = False

        def sub(m: re.Match[str]) -> str:
            nonlocal missing
            k = self.keys.get(m.group(0))
            if k is None:
                missing = True
                return ""
            return k

        key = _TMP_NAME.sub(sub, expr)
        return None if missing or self.canon is None else key

    def _emit(self, expr: str, key: str | None = None, costly: bool = False) -> str:
        found = self.cse.get(expr)
        if found is not None:
            return found
        if key is None:
            key = self._key(expr)
        cache = self.row_reads.get(key) if key is not None else None
        name = self._fresh()
        if cache is not None:
            cache.used = True
            self.lines.append(f"auto {name} = {cache.array}[{self.row_index}];")
        else:
            self.lines.append(f"auto {name} = {expr};")
        self.cse[expr] = name
        if key is not None:
            self.keys[name] = key
        if costly or any(t in self.costly for t in _TMP_NAME.findall(expr)):
            self.costly.add(name)
        return name

    def _canon_ref(self, ref: str, index: Expr, name: str) -> str | None:
        if self.canon is None:
            return None
        return ref.replace(f"{name}[{self.p(index)}]", f"{name}[{self.p(sympy.expand(index.subs(self.canon)))}]")

    def load(self, name: str, index: Expr) -> str:
        if name in self.local:
            return f"{name}_v"
        dtype = self.buffers[name].layout.dtype
        ref = f"{name}[{self.p(index)}]"
        if dtype == torch.bfloat16:
            ref = f"ptc_bf16_to_float({ref})"
        elif dtype == torch.float16:
            ref = f"ptc_half_to_float({ref})"
        loop_vars = {s for s in index.free_symbols if not self.sizes.is_symbol(s)}
        if self.hoist is not None and self.masked_depth == 0 and loop_vars <= self.hoist:
            # Loop-invariant loads go before the inner loops: gcc will not vectorize a
            # loop that re-reads them, and they cost nothing there.
            found = self.hoisted.get(ref)
            if found is None:
                found = self._fresh()
                self.code.prefix.append(f"auto {found} = {ref};")
                self.hoisted[ref] = found
                if self.canon is not None:
                    self.keys[found] = ref
            return found
        return self._emit(ref, key=self._canon_ref(ref, index, name))

    def store(self, name: str, index: Expr, value: str) -> None:
        dtype = self.buffers[name].layout.dtype
        self.code.stores.add(name)
        if name in self.local:
            rounded = self.to_dtype(value, dtype) if dtype in (torch.bfloat16, torch.float16) else value
            self.lines.append(f"{name}_v = static_cast<{compute_ctype(dtype)}>({rounded});")
            return
        if dtype == torch.bfloat16:
            v = f"ptc_float_to_bf16(static_cast<float>({value}))"
        elif dtype == torch.float16:
            v = f"ptc_float_to_half(static_cast<float>({value}))"
        else:
            v = f"static_cast<{storage_ctype(dtype)}>({value})"
        self.lines.append(f"{name}[{self.p(index)}] = {v};")

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        return self._emit(cconst(value, dtype))

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> str:
        return self._emit(f"static_cast<{compute_ctype(dtype)}>({self.p(sympy.expand(expr))})")

    def to_dtype(self, x: str, dtype: torch.dtype) -> str:
        if dtype == torch.bfloat16:
            return self._emit(f"ptc_round_bf16(static_cast<float>({x}))")
        if dtype == torch.float16:
            return self._emit(f"ptc_round_half(static_cast<float>({x}))")
        return self._emit(f"static_cast<{compute_ctype(dtype)}>({x})")

    def where(self, cond: str, a: str, b: str) -> str:
        return self._emit(f"({cond} ? {a} : {b})")

    def masked(self, mask: str, body: Callable[[], Any], other: Any, dtype: torch.dtype) -> str:
        saved_lines, saved_cse = self.lines, self.cse
        inner: list[str] = []
        self.lines, self.cse = inner, dict(saved_cse)
        self.masked_depth += 1
        try:
            result = body()
        finally:
            self.lines, self.cse = saved_lines, saved_cse
            self.masked_depth -= 1
        ct = compute_ctype(dtype)
        name = self._fresh()
        lam = " ".join(inner)
        self.lines.append(
            f"auto {name} = [&]() -> {ct} {{ if (!({mask})) return {cconst(other, dtype)}; {lam} return static_cast<{ct}>({result}); }}();"
        )
        return name

    def indirect_indexing(self, value: str, size: Size) -> sympy.Symbol:
        name = self._fresh()
        self.lines.append(f"int64_t {name} = ptc_wrap_index({value}, {self.p(size)});")
        return indirect_symbol(name)

    def rand(self, seed: str, offset: str) -> str:
        return self._emit(f"ptc_rand({seed}, {offset})")

    def randn(self, seed: str, offset: str) -> str:
        return self._emit(f"ptc_randn({seed}, {offset})")

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: str) -> Any:
        ctype, init = _reduction_init(rtype, dtype, src_dtype)
        acc = self._fresh().replace("tmp", "acc")
        self.code.accs.append(_Acc(acc, rtype, ctype, init))
        self.code.prefix.append(f"{ctype} {acc} = {init};")
        flat = sum((v * s for v, s in zip(self.rvars, contiguous_strides(self.rranges))), sympy.Integer(0))
        target = f"{acc}_part" if self.partial else acc
        key = self.keys.get(value)
        if key is not None and value in self.costly and src_dtype.is_floating_point and self.code.row_value is None:
            self.code.row_value = RowValue(key, value, compute_ctype(src_dtype), self.p(sympy.expand(flat)))
        self.lines.append(_COMBINE[rtype].format(acc=target, v=value, i=self.p(sympy.expand(flat))))
        self.lines = self.code.suffix
        self.cse = {}
        if rtype in ("argmax", "argmin"):
            return f"{acc}.i"
        if rtype == "welford":
            return (f"{acc}.mean", f"{acc}.m2", f"{acc}.n")
        return acc

    def __getattr__(self, name: str) -> Callable[..., str]:
        if name in _UNARY:
            fmt = _UNARY[name]
            costly = name in _COSTLY_OPS
            return lambda x: self._emit(fmt.format(x), costly=costly)
        if name in _BINARY:
            fmt2 = _BINARY[name]
            return lambda a, b: self._emit(fmt2.format(a, b))
        raise CodegenError(f"the C++ backend has no op '{name}'")
