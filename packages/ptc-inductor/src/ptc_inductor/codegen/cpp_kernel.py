"""C++/OpenMP code generation: the loop nests of one kernel around its nodes' C++.

Outer loops are shared by the kernel's nodes and run on OpenMP threads (decided at run time
when the amount of work is symbolic), inner loops are ``#pragma omp simd``; whole-tensor
reductions merge per-thread partials. Loop bounds and indices are C++ expressions of the
kernel's size arguments (``int64_t s0``) where sizes are symbolic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from .. import sizes
from ..analysis import node_vars
from ..config import Config
from ..indexing import contiguous_strides, xvar
from ..ir import Buffer, ComputedNode
from ..scheduler import Kernel
from ..sizes import Size, static_value
from ..virtualized import set_ops_handler
from .cpp import MERGE, ROW_CACHE_MAX, SIMD_REDUCTION, CppOps, NodeCode, RowCache
from .cpp_index import compute_ctype, storage_ctype
from .cpp_prelude import PRELUDE
from .index_print import CPP, IndexPrinter


@dataclass(frozen=True, slots=True)
class CppKernel:
    """Generated source of one kernel and the buffers it takes, in parameter order."""

    name: str
    source: str
    params: tuple[str, ...]
    sizes: tuple[str, ...] = ()
    """Names of the size symbols the kernel takes as ``int64_t`` arguments, after the buffers."""


def _numel(dims: Sequence[Size]) -> Size:
    return sizes.normalize(math.prod(dims))


class _KernelWriter:
    def __init__(self, kernel: Kernel, buffers: dict[str, Buffer], config: Config, local: frozenset[str]) -> None:
        self.kernel = kernel
        self.local = frozenset(b.name for n in kernel.nodes for b in n.outputs if b.name in local)
        self.buffers = buffers
        self.config = config
        self.counter = itertools.count()
        self.lines: list[str] = []
        self.indent = 1
        self.p = IndexPrinter(CPP)
        self.sizes = sizes.current()

    def loop(self, var: str, size: Size) -> str:
        """A C++ for-loop header of ``var`` over ``[0, size)``."""
        return f"for (int64_t {var} = 0; {var} < {self.p(size)}; ++{var})"

    def parallel_if(self, work: Size) -> tuple[bool, str]:
        """Whether a whole-tensor reduction over ``work`` points runs on threads, and the OpenMP
        clause deciding it at run time where the sizes are symbolic (`` if(parallel: ...)``:
        only the thread team, never the vectorization, depends on it)."""
        least = self.config.parallel_min_work
        fixed = static_value(work)
        if fixed is not None:
            return fixed >= least, ""
        if sizes.known_le(least, work):
            return True, ""
        return True, f" if(parallel: {self.p(work)} >= {least})"

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
        self, node: ComputedNode, partial: bool = False, outer: int | None = None, row_reads: dict[str, RowCache] | None = None
    ) -> NodeCode:
        """Run ``node``'s body through CppOps; loads that only use the first ``outer`` loop vars are hoisted.

        With ``row_reads`` (only below ``outer`` shared loops), values keyed there are read from
        their row buffers instead of computed again.
        """
        code = NodeCode()
        xs, rs = node_vars(node)
        hoist = None if outer is None else frozenset(xvar(i) for i in range(outer))
        canon: dict[sympy.Symbol, sympy.Symbol] | None = None
        row_index = ""
        if row_reads is not None and outer is not None:
            inner = rs if node.is_reduction else xs[outer:]
            canon = {v: sympy.Symbol(f"c{i}", integer=True, nonnegative=True) for i, v in enumerate(inner)}
            sizes = node.reduction_ranges if node.is_reduction else node.ranges[outer:]
            flat = sum((v * st for v, st in zip(inner, contiguous_strides(sizes))), sympy.Integer(0))
            row_index = self.p(sympy.expand(flat))
        handler = CppOps(
            code, self.buffers, self.fresh, rs, node.reduction_ranges, partial, hoist, self.local, canon, row_reads, row_index, self.p
        )
        with set_ops_handler(handler):
            node.body(xs, rs)
        return code

    def comment(self, node: ComputedNode) -> None:
        what = node.reduction_type or node.kind
        self.line(f"// {node.name}: {what} over {list(node.ranges)}"
                  + (f" x {list(node.reduction_ranges)}" if node.reduction_ranges else "")
                  + f", from graph node(s) {', '.join(node.origins)}")

    def emit_inner(self, node: ComputedNode, k: int, code: NodeCode | None = None) -> None:
        """Emit ``node``'s loops below the kernel's ``k`` shared outer loops (``code``: its body, if made already)."""
        self.comment(node)
        if code is None:
            code = self.node_code(node, outer=k)
        self.line("{")
        self.indent += 1
        for text in code.prefix:
            self.line(text)
        if node.is_reduction:
            simd = len(code.accs) == 1 and code.accs[0].rtype in SIMD_REDUCTION
            for i, size in enumerate(node.reduction_ranges):
                if i == len(node.reduction_ranges) - 1 and simd:
                    op = SIMD_REDUCTION[code.accs[0].rtype]
                    self.line(f"#pragma omp simd reduction({op}:{code.accs[0].name})")
                self.line(self.loop(f"r{i}", size))
            self.braced(code.body)
            for text in code.suffix:
                self.line(text)
        else:
            inner = node.ranges[k:]
            for i, size in enumerate(inner):
                if i == len(inner) - 1:
                    self.line("#pragma omp simd")
                self.line(self.loop(f"x{k + i}", size))
            self.braced(code.body)
        self.indent -= 1
        self.line("}")

    def emit_partial_reduction(self, node: ComputedNode, parallel: bool, clause: str = "") -> None:
        """A whole-tensor reduction: per-thread partial accumulators merged at the end (``clause``
        may keep the thread team to one thread at run time)."""
        self.comment(node)
        code = self.node_code(node, partial=parallel, outer=0)
        self.line("{")
        self.indent += 1
        for text in code.prefix:
            self.line(text)
        loops = [self.loop(f"r{i}", s) for i, s in enumerate(node.reduction_ranges)]
        if parallel:
            self.line(f"#pragma omp parallel{clause}")
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
                self.line("        " + MERGE[a.rtype].format(a=a.name, b=f"{a.name}_part"))
            self.line("    }")
            self.line("}")
        for text in code.suffix:
            self.line(text)
        self.indent -= 1
        self.line("}")

    def row_shared_codes(self, k: int, symbolic: bool = False) -> tuple[list[NodeCode], list[RowCache]]:
        """Every node's code below ``k`` shared loops, with costly row-reduction inputs kept in row buffers.

        A cache is offered only to later nodes over the same inner ranges, and is dropped once a
        node in between writes a buffer its value reads. Row buffers are stack arrays: of their
        static size, or (``symbolic``) of ``ROW_CACHE_MAX`` for a symbolic row, which the caller
        uses only when the row fits at run time.
        """
        codes: list[NodeCode] = []
        caches: list[RowCache] = []
        live: list[RowCache] = []
        for node in self.kernel.nodes:
            inner = tuple(node.reduction_ranges if node.is_reduction else node.ranges[k:])
            reads = {c.value.key: c for c in live if c.ranges == inner}
            code = self.node_code(node, outer=k, row_reads=reads)
            live = [c for c in live if not any(f"{name}[" in c.value.key for name in code.stores)]
            value = code.row_value
            row_numel = static_value(_numel(inner))
            fits = row_numel <= ROW_CACHE_MAX if row_numel is not None else symbolic
            if value is not None and fits:
                cache = RowCache(f"row{len(caches)}", value, inner, code)
                caches.append(cache)
                live.append(cache)
            codes.append(code)
        for cache in caches:
            if cache.used:
                cache.code.body.append(f"{cache.array}[{cache.value.index}] = {cache.value.name};")
        return codes, [c for c in caches if c.used]

    def emit_rows(self, k: int, codes: Sequence[NodeCode], rows: Sequence[RowCache]) -> None:
        """The nodes below ``k`` shared loops, after the row buffers they use."""
        for row in rows:
            numel = static_value(_numel(row.ranges))
            self.line(f"alignas(64) {row.value.ctype} {row.array}[{numel if numel is not None else ROW_CACHE_MAX}];")
        for node, code in zip(self.kernel.nodes, codes):
            self.emit_inner(node, k, code)

    def declare_locals(self) -> None:
        """Declare the kernel-local buffers: one value per outer point, kept out of memory."""
        for name in sorted(self.local):
            self.line(f"{compute_ctype(self.buffers[name].layout.dtype)} {name}_v;")

    def work(self) -> Size:
        total: Size = 0
        for n in self.kernel.nodes:
            inner = _numel(n.reduction_ranges)
            # A symbolic reduction range is at least 2: its points count as they are.
            total = total + _numel(n.ranges) * (max(inner, 1) if isinstance(inner, int) else inner)
        return sizes.normalize(total)

    def emit_body(self) -> None:
        work = self.work()
        least = self.config.parallel_min_work
        fixed = static_value(work)
        if fixed is not None or sizes.known_le(least, work):
            self.emit_nest(fixed is None or fixed >= least)
            return
        # Whether threads pay off is known only per call: two copies of the loop nest, so that a
        # small call never enters the OpenMP runtime (a parallel region costs about a microsecond
        # even when an if() clause keeps it to one thread).
        self.line(f"if ({self.p(work)} >= {least})")
        self.braced_nest(True)
        self.line("else")
        self.braced_nest(False)

    def braced_nest(self, parallel: bool) -> None:
        self.line("{")
        self.indent += 1
        self.emit_nest(parallel)
        self.indent -= 1
        self.line("}")

    def emit_nest(self, parallel: bool) -> None:
        """The kernel's loop nest, its outer loop on threads when ``parallel``."""
        kernel = self.kernel
        outer = kernel.outer
        flat_pointwise = all(not n.is_reduction and n.ranges == outer for n in kernel.nodes) and len(outer) >= 1
        if not outer:
            self.declare_locals()
            for node in kernel.nodes:
                if node.is_reduction and node.reduction_ranges:
                    threads, when = self.parallel_if(_numel(node.reduction_ranges))
                    self.emit_partial_reduction(node, parallel and threads, when)
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
                self.line(self.loop(f"x{i}", size))
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
            self.line(self.loop(f"x{i}", size))
        self.line("{")
        self.indent += 1
        self.declare_locals()
        codes, rows = self.row_shared_codes(k)
        wide_codes, wide_rows = self.row_shared_codes(k, symbolic=True) if self.sizes.dynamic else (codes, rows)
        unbounded = [r for r in wide_rows if static_value(_numel(r.ranges)) is None]
        if unbounded:
            # Symbolic rows are cached when they fit a buffer of ROW_CACHE_MAX (a branch per
            # row, always taken the same way in one call) and recomputed otherwise.
            fit = " && ".join(dict.fromkeys(f"{self.p(_numel(r.ranges))} <= {ROW_CACHE_MAX}" for r in unbounded))
            self.line(f"if ({fit})")
            self.line("{")
            self.indent += 1
            self.emit_rows(k, wide_codes, wide_rows)
            self.indent -= 1
            self.line("}")
            self.line("else")
            self.line("{")
            self.indent += 1
            self.emit_rows(k, codes, rows)
            self.indent -= 1
            self.line("}")
        else:
            self.emit_rows(k, codes, rows)
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
    kernel: Kernel,
    buffers: dict[str, Buffer],
    accesses: dict[str, Any],
    config: Config,
    local: frozenset[str] = frozenset(),
    aliased: frozenset[str] = frozenset(),
) -> CppKernel:
    """Generate the C++ function of one kernel; buffers in ``local`` become C++ locals, those in
    ``aliased`` may share their storage with another parameter (an output written in place)."""
    writer = _KernelWriter(kernel, buffers, config, local)
    writer.emit_body()
    names, written = writer.params(accesses)
    params = []
    for name in names:
        ct = storage_ctype(buffers[name].layout.dtype)
        const = "" if name in written else "const "
        # __restrict__ promises no other parameter reaches the same memory: false for a pair
        # written in place, so the compiler could move a write before a read of the same element.
        restrict = "" if name in aliased else " __restrict__"
        params.append(f"{const}{ct}*{restrict} {name}")
    env = sizes.current()
    size_names = tuple(env.code_name(s) for s in sizes.ordered(writer.p.used))
    params.extend(f"int64_t {n}" for n in size_names)
    head = f'extern "C" void {kernel.name}({", ".join(params)})'
    source = "\n".join([head, "{", *writer.lines, "}", ""])
    return CppKernel(kernel.name, source, tuple(names), size_names)


def generate_source(kernels: Sequence[CppKernel]) -> str:
    """The whole translation unit of a graph: the prelude, then every kernel."""
    sized = any(k.sizes for k in kernels)
    # Size arguments are passed from Python as pointer-sized integers (see cpp_backend).
    check = 'static_assert(sizeof(void*) == sizeof(int64_t), "size arguments are passed as pointer-sized integers");\n' if sized else ""
    return PRELUDE + "\n" + check + "\n".join(k.source for k in kernels)
