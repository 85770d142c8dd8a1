"""C++/OpenMP code generation: one ``ops`` handler emitting C++ per node, and the loop nests."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ..analysis import node_vars
from ..config import Config
from ..errors import CodegenError
from ..indexing import Expr, contiguous_strides, indirect_symbol, xvar
from ..ir import Buffer, ComputedNode
from ..scheduler import Kernel
from ..virtualized import set_ops_handler
from .cpp_index import cconst, cexpr, compute_ctype, storage_ctype
from .cpp_prelude import PRELUDE

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

_MERGE = {
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
"""Ops worth a store and a load to avoid computing twice (a row buffer, see _RowCache)."""

_ROW_CACHE_MAX = 8192
"""Most elements of one row buffer: it lives on each thread's stack and should stay in L1/L2."""

_TMP_NAME = re.compile(r"\btmp\d+\b")

_SIMD_REDUCTION = {"sum": "+", "prod": "*", "max": "ptc_max", "min": "ptc_min"}
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
class _RowValue:
    """The costly per-element input of a row reduction, as a later node of the kernel would key it."""

    key: str
    name: str
    ctype: str
    index: str


@dataclass
class _RowCache:
    """A row reduction's input kept in a per-thread array, so later nodes over the row read it.

    Softmax is the case: sum(exp(x - max)) then exp(x - max) / sum computes exp twice per
    element without it.
    """

    array: str
    value: _RowValue
    ranges: tuple[int, ...]
    code: _NodeCode
    used: bool = False


@dataclass
class _Acc:
    name: str
    rtype: str
    ctype: str
    init: str


class _NodeCode:
    """The C++ of one node: statements before, inside and after its innermost loop."""

    def __init__(self) -> None:
        self.prefix: list[str] = []
        self.body: list[str] = []
        self.suffix: list[str] = []
        self.accs: list[_Acc] = []
        self.row_value: _RowValue | None = None
        self.stores: set[str] = set()


class CppOps:
    """The ``ops`` handler that emits C++ statements for one node into a _NodeCode."""

    def __init__(
        self,
        code: _NodeCode,
        buffers: dict[str, Buffer],
        names: Callable[[], str],
        rvars: Sequence[Expr],
        rranges: Sequence[int],
        partial: bool,
        hoist: frozenset[sympy.Symbol] | None,
        local: frozenset[str] = frozenset(),
        canon: dict[sympy.Symbol, sympy.Symbol] | None = None,
        row_reads: dict[str, _RowCache] | None = None,
        row_index: str = "",
    ) -> None:
        self.code = code
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
        return ref.replace(f"{name}[{cexpr(index)}]", f"{name}[{cexpr(sympy.expand(index.subs(self.canon)))}]")

    def load(self, name: str, index: Expr) -> str:
        if name in self.local:
            return f"{name}_v"
        dtype = self.buffers[name].layout.dtype
        ref = f"{name}[{cexpr(index)}]"
        if dtype == torch.bfloat16:
            ref = f"ptc_bf16_to_float({ref})"
        elif dtype == torch.float16:
            ref = f"ptc_half_to_float({ref})"
        if self.hoist is not None and self.masked_depth == 0 and index.free_symbols <= self.hoist:
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
        self.lines.append(f"{name}[{cexpr(index)}] = {v};")

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        return self._emit(cconst(value, dtype))

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> str:
        return self._emit(f"static_cast<{compute_ctype(dtype)}>({cexpr(sympy.expand(expr))})")

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

    def indirect_indexing(self, value: str, size: int) -> sympy.Symbol:
        name = self._fresh()
        self.lines.append(f"int64_t {name} = ptc_wrap_index({value}, {size});")
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
            self.code.row_value = _RowValue(key, value, compute_ctype(src_dtype), cexpr(sympy.expand(flat)))
        self.lines.append(_COMBINE[rtype].format(acc=target, v=value, i=cexpr(sympy.expand(flat))))
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


@dataclass(frozen=True, slots=True)
class CppKernel:
    """Generated source of one kernel and the buffers it takes, in parameter order."""

    name: str
    source: str
    params: tuple[str, ...]


def _loop(var: str, size: int) -> str:
    return f"for (int64_t {var} = 0; {var} < {size}; ++{var})"


def _numel(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


class _KernelWriter:
    def __init__(self, kernel: Kernel, buffers: dict[str, Buffer], config: Config, local: frozenset[str]) -> None:
        self.kernel = kernel
        self.local = frozenset(b.name for n in kernel.nodes for b in n.outputs if b.name in local)
        self.buffers = buffers
        self.config = config
        self.counter = itertools.count()
        self.lines: list[str] = []
        self.indent = 1

    def fresh(self) -> str:
        return f"tmp{next(self.counter)}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def braced(self, body: Sequence[str], prefix: str = "") -> None:
        """``body`` as one C++ block (each line after ``prefix``, the block's own indent)."""
        self.line(prefix + "{")
        for text in body:
            self.line(prefix + "    " + text)
        self.line(prefix + "}")

    def node_code(
        self, node: ComputedNode, partial: bool = False, outer: int | None = None, row_reads: dict[str, _RowCache] | None = None
    ) -> _NodeCode:
        """Run ``node``'s body through CppOps; loads that only use the first ``outer`` loop vars are hoisted.

        With ``row_reads`` (only below ``outer`` shared loops), values keyed there are read from
        their row buffers instead of computed again.
        """
        code = _NodeCode()
        xs, rs = node_vars(node)
        hoist = None if outer is None else frozenset(xvar(i) for i in range(outer))
        canon: dict[sympy.Symbol, sympy.Symbol] | None = None
        row_index = ""
        if row_reads is not None and outer is not None:
            inner = rs if node.is_reduction else xs[outer:]
            canon = {v: sympy.Symbol(f"c{i}", integer=True, nonnegative=True) for i, v in enumerate(inner)}
            sizes = node.reduction_ranges if node.is_reduction else node.ranges[outer:]
            flat = sum((v * st for v, st in zip(inner, contiguous_strides(sizes))), sympy.Integer(0))
            row_index = cexpr(sympy.expand(flat))
        handler = CppOps(
            code, self.buffers, self.fresh, rs, node.reduction_ranges, partial, hoist, self.local, canon, row_reads, row_index
        )
        with set_ops_handler(handler):
            node.body(xs, rs)
        return code

    def comment(self, node: ComputedNode) -> None:
        what = node.reduction_type or node.kind
        self.line(f"// {node.name}: {what} over {list(node.ranges)}"
                  + (f" x {list(node.reduction_ranges)}" if node.reduction_ranges else "")
                  + f", from graph node(s) {', '.join(node.origins)}")

    def emit_inner(self, node: ComputedNode, k: int, code: _NodeCode | None = None) -> None:
        """Emit ``node``'s loops below the kernel's ``k`` shared outer loops (``code``: its body, if made already)."""
        self.comment(node)
        if code is None:
            code = self.node_code(node, outer=k)
        self.line("{")
        self.indent += 1
        for text in code.prefix:
            self.line(text)
        if node.is_reduction:
            simd = len(code.accs) == 1 and code.accs[0].rtype in _SIMD_REDUCTION
            for i, size in enumerate(node.reduction_ranges):
                if i == len(node.reduction_ranges) - 1 and simd:
                    op = _SIMD_REDUCTION[code.accs[0].rtype]
                    self.line(f"#pragma omp simd reduction({op}:{code.accs[0].name})")
                self.line(_loop(f"r{i}", size))
            self.braced(code.body)
            for text in code.suffix:
                self.line(text)
        else:
            inner = node.ranges[k:]
            for i, size in enumerate(inner):
                if i == len(inner) - 1:
                    self.line("#pragma omp simd")
                self.line(_loop(f"x{k + i}", size))
            self.braced(code.body)
        self.indent -= 1
        self.line("}")

    def emit_partial_reduction(self, node: ComputedNode, parallel: bool) -> None:
        """A whole-tensor reduction: per-thread partial accumulators merged at the end."""
        self.comment(node)
        code = self.node_code(node, partial=parallel, outer=0)
        self.line("{")
        self.indent += 1
        for text in code.prefix:
            self.line(text)
        loops = [_loop(f"r{i}", s) for i, s in enumerate(node.reduction_ranges)]
        if parallel:
            self.line("#pragma omp parallel")
            self.line("{")
            for a in code.accs:
                self.line(f"    {a.ctype} {a.name}_part = {a.init};")
            self.line(f"    #pragma omp for collapse({len(loops)}) nowait")
        for text in loops:
            self.line(("    " if parallel else "") + text)
        self.braced(code.body, "    " if parallel else "")
        if parallel:
            self.line("    #pragma omp critical")
            self.line("    {")
            for a in code.accs:
                self.line("        " + _MERGE[a.rtype].format(a=a.name, b=f"{a.name}_part"))
            self.line("    }")
            self.line("}")
        for text in code.suffix:
            self.line(text)
        self.indent -= 1
        self.line("}")

    def row_shared_codes(self, k: int) -> tuple[list[_NodeCode], list[_RowCache]]:
        """Every node's code below ``k`` shared loops, with costly row-reduction inputs kept in row buffers.

        A cache is offered only to later nodes over the same inner ranges, and is dropped once a
        node in between writes a buffer its value reads.
        """
        codes: list[_NodeCode] = []
        caches: list[_RowCache] = []
        live: list[_RowCache] = []
        for node in self.kernel.nodes:
            inner = tuple(node.reduction_ranges if node.is_reduction else node.ranges[k:])
            reads = {c.value.key: c for c in live if c.ranges == inner}
            code = self.node_code(node, outer=k, row_reads=reads)
            live = [c for c in live if not any(f"{name}[" in c.value.key for name in code.stores)]
            value = code.row_value
            if value is not None and _numel(inner) <= _ROW_CACHE_MAX:
                cache = _RowCache(f"row{len(caches)}", value, inner, code)
                caches.append(cache)
                live.append(cache)
            codes.append(code)
        for cache in caches:
            if cache.used:
                cache.code.body.append(f"{cache.array}[{cache.value.index}] = {cache.value.name};")
        return codes, [c for c in caches if c.used]

    def declare_locals(self) -> None:
        """Declare the kernel-local buffers: one value per outer point, kept out of memory."""
        for name in sorted(self.local):
            self.line(f"{compute_ctype(self.buffers[name].layout.dtype)} {name}_v;")

    def work(self) -> int:
        return sum(_numel(n.ranges) * max(_numel(n.reduction_ranges), 1) for n in self.kernel.nodes)

    def emit_body(self) -> None:
        kernel = self.kernel
        outer = kernel.outer
        parallel = self.work() >= self.config.parallel_min_work
        flat_pointwise = all(not n.is_reduction and n.ranges == outer for n in kernel.nodes) and len(outer) >= 1
        if not outer:
            self.declare_locals()
            for node in kernel.nodes:
                if node.is_reduction and node.reduction_ranges:
                    self.emit_partial_reduction(node, parallel and _numel(node.reduction_ranges) >= self.config.parallel_min_work)
                else:
                    self.emit_inner(node, 0)
            return
        if flat_pointwise:
            # Every node covers the same points: one loop nest, all bodies in its innermost loop.
            k = len(outer)
            for i, size in enumerate(outer):
                if i == 0 and parallel:
                    collapse = f" collapse({k - 1})" if k > 2 else ""
                    self.line(f"#pragma omp parallel for{collapse}" if k > 1 else "#pragma omp parallel for simd")
                if i == k - 1 and k > 1:
                    self.line("#pragma omp simd")
                if i == 0 and k == 1 and not parallel:
                    self.line("#pragma omp simd")
                self.line(_loop(f"x{i}", size))
            self.line("{")
            self.indent += 1
            for node in kernel.nodes:
                self.comment(node)
                code = self.node_code(node)
                self.braced(code.body)
            self.indent -= 1
            self.line("}")
            return
        k = len(outer)
        if parallel:
            self.line(f"#pragma omp parallel for collapse({k})" if k > 1 else "#pragma omp parallel for")
        for i, size in enumerate(outer):
            self.line(_loop(f"x{i}", size))
        self.line("{")
        self.indent += 1
        self.declare_locals()
        codes, rows = self.row_shared_codes(k)
        for row in rows:
            self.line(f"alignas(64) {row.value.ctype} {row.array}[{_numel(row.ranges)}];")
        for node, code in zip(kernel.nodes, codes):
            self.emit_inner(node, k, code)
        self.indent -= 1
        self.line("}")

    def params(self, accesses: dict[str, Any]) -> tuple[list[str], set[str]]:
        names: list[str] = []
        written: set[str] = set()
        for node in self.kernel.nodes:
            acc = accesses[node.name]
            for name, _ in acc.loads:
                if name not in names and name not in self.local:
                    names.append(name)
            for name, _ in acc.stores:
                written.add(name)
                if name not in names and name not in self.local:
                    names.append(name)
        return names, written


def generate_kernel(
    kernel: Kernel, buffers: dict[str, Buffer], accesses: dict[str, Any], config: Config, local: frozenset[str] = frozenset()
) -> CppKernel:
    """Generate the C++ function of one kernel; buffers in ``local`` become C++ locals."""
    writer = _KernelWriter(kernel, buffers, config, local)
    writer.emit_body()
    names, written = writer.params(accesses)
    params = []
    for name in names:
        ct = storage_ctype(buffers[name].layout.dtype)
        const = "" if name in written else "const "
        params.append(f"{const}{ct}* __restrict__ {name}")
    head = f'extern "C" void {kernel.name}({", ".join(params)})'
    source = "\n".join([head, "{", *writer.lines, "}", ""])
    return CppKernel(kernel.name, source, tuple(names))


def generate_source(kernels: Sequence[CppKernel]) -> str:
    """The whole translation unit of a graph: the prelude, then every kernel."""
    return PRELUDE + "\n" + "\n".join(k.source for k in kernels)
