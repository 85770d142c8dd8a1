"""Triton code generation: one ``ops`` handler emitting Triton per node, and the kernel layout.

A kernel's shared outer loops (``Kernel.outer``) are flattened into ``xindex``; each program
owns ``XBLOCK`` whole outer points. A kernel whose nodes all cover exactly the outer points is
*flat* (1D tiles). Otherwise each node's remaining loops (its reduction loops, or the inner
pointwise loops) are flattened into ``rindex`` and run in 2D ``[XBLOCK, RBLOCK]`` tiles, either
*persistent* (the whole inner range in one tile) or *looped* (``for roffset in range(...)``).

A kernel with split column reductions riding along (``Kernel.partials``) is a *row loop*: each
program takes ``XBLOCK`` chunks of rows and loops over a chunk's rows one at a time, running the
row nodes on a ``[1, RBLOCK]`` tile (as a persistent kernel would) and accumulating each column's
partial result in the same tile's lanes; the partials are stored once per chunk.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .. import sizes
from ..analysis import node_vars
from ..config import Config
from ..errors import CodegenError
from ..indexing import Expr, contiguous_strides, indirect_symbol, is_linear_in, merge_runs, run_symbol, rvar, xvar
from ..ir import Buffer, ComputedNode
from ..memory import inner_loops, shared_index
from ..scheduler import CHUNK, ROW, Kernel, Schedule, partial_index
from ..sizes import Size, equal, known_multiple, static_value, upper_bound
from ..triton_kernel import TritonKernel
from ..virtualized import set_ops_handler
from . import triton_heuristics as heur
from .index_print import PYTHON, TRITON, IndexPrinter
from .triton_index import compute_dtype, tconst, tl_dtype
from .triton_math import BINARY, BOOL_RESULT, PRELUDE, UNARY
from .triton_reduction import emit_reduction, emit_row_accumulation

INT32_LIMIT = 2**31 - 2**17
"""Indices stay 32-bit when every value they reach (padding included) is below this."""


def _numel(dims: Sequence[Size]) -> Size:
    return sizes.normalize(math.prod(dims))


@dataclass
class Section:
    """The Triton lines of one node: before its inner loop, inside it and after it."""

    prefix: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    suffix: list[str] = field(default_factory=list)
    barrier: bool = False


class TritonOps:
    """The ``ops`` handler emitting Triton statements for one node into a Section."""

    def __init__(self, writer: _KernelWriter, node: ComputedNode, section: Section, inner: tuple[Size, ...]) -> None:
        self.w = writer
        self.node = node
        self.section = section
        self.lines = section.body
        self.cse: dict[str, str] = {}
        self.inner = inner
        xs, rs = node_vars(node)
        k = len(writer.kernel.outer)
        self.outer_syms = set(xs[:k])
        self.inner_vars: list[Expr] = list(rs) if node.is_reduction else list(xs[k:])
        self.xmask = writer.xmask
        self.rmask: str | None = writer.rmask_for(_numel(inner)) if inner else None
        self.p = writer.p
        self.extra_masks: list[str] = []
        self.in_loop = writer.style == "looped" and bool(inner)
        # Where every node's lines share one scope, a value loaded once serves later nodes too.
        self.forward_loads = writer.style in ("flat", "persistent", "rowloop")
        # Row nodes of a row loop name their row x0; partials name it by chunk and row in chunk.
        self.key_subs: dict[sympy.Symbol, Expr] = writer.row_subs

    # -- bookkeeping -------------------------------------------------------------------------

    def _emit(self, expr: str, dtype: torch.dtype) -> str:
        found = self.cse.get(expr)
        if found is not None:
            return found
        name = self.w.fresh()
        self.lines.append(f"{name} = {expr}")
        self.cse[expr] = name
        self.w.dtypes[name] = dtype
        return name

    def dtype_of(self, value: str) -> torch.dtype:
        """The compute dtype of a value this handler produced."""
        return self.w.dtypes[value]

    def mask_for(self, index: Expr) -> str | None:
        """The mask a memory access at ``index`` needs: only the padded dims it depends on."""
        syms = index.free_symbols
        parts: list[str] = []
        if self.xmask and syms & self.outer_syms:
            parts.append(self.xmask)
        if self.rmask and syms & set(self.inner_vars):
            parts.append(self.rmask)
        parts.extend(self.extra_masks)
        return " & ".join(parts) if parts else None

    def full_mask(self) -> str | None:
        """The mask of every lane of the current tile."""
        parts = [m for m in (self.xmask, self.rmask) if m] + self.extra_masks
        return " & ".join(parts) if parts else None

    def _forward_key(self, name: str, index: Expr) -> tuple[str, str, tuple[Size, ...]] | None:
        uses_inner = bool(index.free_symbols & set(self.inner_vars))
        if uses_inner and self.in_loop:
            return None
        canon = index.xreplace(self.key_subs) if self.key_subs else index
        canon = canon.subs({v: sympy.Symbol(f"_i{i}", integer=True, nonnegative=True) for i, v in enumerate(self.inner_vars)})
        return name, str(sympy.expand(canon)), self.inner if uses_inner else ()

    # -- ops ---------------------------------------------------------------------------------

    def load(self, name: str, index: Expr) -> str:
        if name in self.w.local:
            # Kept in registers: the value this kernel computed for the same element. (Under a
            # masked() region too: the value exists on every lane, the region's where() picks.)
            key = self._forward_key(name, index)
            if key is None or key not in self.w.forwarded:
                raise CodegenError(f"{self.w.kernel.name}: kernel-local buffer {name} is read at {index}, where this kernel did not compute it")
            return self.w.forwarded[key]
        dtype = self.w.buffers[name].layout.dtype
        key = self._forward_key(name, index) if not self.extra_masks else None
        if key is not None and key in self.w.forwarded:
            return self.w.forwarded[key]
        if name in self.w.written:
            # Another node of this kernel wrote it at other lanes of this program: its stores
            # must be visible to every thread before these loads.
            self.section.barrier = True
        self.w.params.setdefault(name, None)
        mask = self.mask_for(index)
        extra = f", {mask}, other=0" if mask else ""
        where = self.w.index_text(index)
        if mask and not index.free_symbols & (self.outer_syms | set(self.inner_vars)):
            # One element read under a masked() region's block mask: Triton takes a block mask
            # only with a block of pointers, so the pointer is widened to the mask's shape.
            where = f"{where} + tl.zeros_like({mask}).to(tl.int32)"
        expr = f"tl.load({name} + {where}{extra})"
        if dtype in (torch.bfloat16, torch.float16):
            expr += ".to(tl.float32)"
        value = self._emit(expr, compute_dtype(dtype))
        if key is not None and self.forward_loads and name not in self.w.stored:
            self.w.forwarded[key] = value
        return value

    def store(self, name: str, index: Expr, value: str) -> None:
        dtype = self.w.buffers[name].layout.dtype
        if name in self.w.local:
            key = self._forward_key(name, index)
            if key is None or self.extra_masks:
                raise CodegenError(f"{self.w.kernel.name}: kernel-local buffer {name} is stored where its loads cannot find it")
            self.w.forwarded[key] = self._as_loaded(value, dtype)
            return
        self.w.params.setdefault(name, None)
        self.w.written.add(name)
        v = value
        if dtype == torch.bfloat16:
            # Rounded explicitly (the store's own cast is then exact): Triton's interpreter
            # does not round float32 -> bfloat16 to nearest-even.
            v = f"ptc_round_bf16({value})"
        elif self.dtype_of(value) != dtype:
            v = f"{value}.to({tl_dtype(dtype)})"
        mask = self.mask_for(index)
        where = self.w.index_text(index)
        if self.w.style != "flat" and not self.w.loop_symbols(index):
            # A reduced value is an [XBLOCK, 1] block; Triton stores blocks only through blocks
            # of pointers, so the constant index is widened to xindex's shape.
            where = f"{where} + tl.zeros_like(xindex)"
            mask = self.full_mask() if not self.rmask else self.xmask
        self.lines.append(f"tl.store({name} + {where}, {v}{', ' + mask if mask else ''})")
        key = self._forward_key(name, index)
        if key is not None and not self.extra_masks:
            self.w.forwarded[key] = self._as_loaded(value, dtype)

    def _as_loaded(self, value: str, dtype: torch.dtype) -> str:
        """``value`` as a load of it after a store to a ``dtype`` buffer gives it back (rounded)."""
        return self.to_dtype(value, dtype) if self.dtype_of(value) != compute_dtype(dtype) or dtype != compute_dtype(dtype) else value

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        return self._emit(tconst(value, dtype), compute_dtype(dtype))

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> str:
        expr = sympy.expand(expr)
        if expr.is_Integer:
            return self.constant(int(expr), dtype)
        return self._emit(f"({self.p(expr)}).to({tl_dtype(compute_dtype(dtype))})", compute_dtype(dtype))

    def to_dtype(self, x: str, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self._emit(f"({x} != 0)", torch.bool)
        if dtype == torch.bfloat16:
            # Round through the narrow type, as eager does at every op boundary.
            return self._emit(f"ptc_round_bf16({x})", torch.float32)
        if dtype == torch.float16:
            return self._emit(f"{x}.to(tl.float16).to(tl.float32)", torch.float32)
        if self.dtype_of(x) == dtype:
            return x
        return self._emit(f"{x}.to({tl_dtype(dtype)})", dtype)

    def where(self, cond: str, a: str, b: str) -> str:
        dt = torch.promote_types(self.dtype_of(a), self.dtype_of(b))
        return self._emit(f"tl.where({cond}, {a}, {b})", dt)

    def masked(self, mask: str, body: Callable[[], Any], other: Any, dtype: torch.dtype) -> str:
        saved = self.cse
        self.cse = dict(saved)
        self.extra_masks.append(mask)
        try:
            result = body()
        finally:
            self.extra_masks.pop()
            self.cse = saved
        cd = compute_dtype(dtype)
        result = self.to_dtype(result, cd) if self.dtype_of(result) != cd else result
        return self._emit(f"tl.where({mask}, {result}, {tconst(other, dtype)})", cd)

    def indirect_indexing(self, value: str, size: Size) -> sympy.Symbol:
        # Negative indices count from the end, as in eager.
        n = self.p(size)
        name = self._emit(f"tl.where({value} < 0, {value} + {n}, {value})", self.dtype_of(value))
        return indirect_symbol(name)

    def rand(self, seed: str, offset: str) -> str:
        return self._emit(f"tl.rand({seed}, {offset})", torch.float32)

    def randn(self, seed: str, offset: str) -> str:
        return self._emit(f"tl.randn({seed}, {offset})", torch.float32)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: str) -> Any:
        result = emit_reduction(self, dtype, src_dtype, rtype, value)
        # What follows runs once per outer point, after the inner range is consumed.
        self.lines = self.section.suffix
        self.cse = {}
        self.rmask = None
        self.inner_vars = []
        self.in_loop = False
        return result

    def emit_line(self, text: str) -> None:
        """Append a raw statement to the current section."""
        self.lines.append(text)

    def new_value(self, expr: str, dtype: torch.dtype, into: list[str] | None = None) -> str:
        """Bind ``expr`` to a fresh name (in ``into`` or the current lines); no CSE."""
        name = self.w.fresh()
        (self.lines if into is None else into).append(f"{name} = {expr}")
        self.w.dtypes[name] = dtype
        return name

    def __getattr__(self, name: str) -> Callable[..., str]:
        if name in UNARY:
            fmt = UNARY[name]
            return lambda x: self._emit(fmt(x, self.dtype_of(x)), torch.bool if name in BOOL_RESULT else self.dtype_of(x))
        if name in BINARY:
            fmt2 = BINARY[name]

            def binary(a: str, b: str) -> str:
                dt = torch.promote_types(self.dtype_of(a), self.dtype_of(b))
                return self._emit(fmt2(a, b, dt), torch.bool if name in BOOL_RESULT else dt)

            return binary
        raise CodegenError(f"the Triton backend has no op '{name}'")


class _PartialOps(TritonOps):
    """Emits a split column reduction inside a row loop: its chunk (x0) is the loop's ``pc``, its
    row within the chunk (r0) is ``rr``, and its columns are the tile's lanes."""

    def __init__(self, writer: _KernelWriter, node: ComputedNode, section: Section, inner: tuple[Size, ...]) -> None:
        super().__init__(writer, node, section, inner)
        xs, _ = node_vars(node)
        self.outer_syms = set()
        self.inner_vars = list(xs[1:])
        self.key_subs = {}
        self.after_loop = False

    def load(self, name: str, index: Expr) -> str:
        return super().load(name, partial_index(index))

    def store(self, name: str, index: Expr, value: str) -> None:
        super().store(name, partial_index(index), value)

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> str:
        return super().index_expr(partial_index(expr), dtype)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: str) -> Any:
        result = emit_row_accumulation(self, dtype, rtype, value)
        # The rest runs once per chunk, after the row loop (out of the scope of values loaded
        # in it), still one value per column lane.
        self.lines = self.section.suffix
        self.cse = {}
        self.after_loop = True
        return result

    def _forward_key(self, name: str, index: Expr) -> tuple[str, str, tuple[Size, ...]] | None:
        return None if self.after_loop else super()._forward_key(name, index)


class _KernelWriter:
    def __init__(
        self, kernel: Kernel, buffers: dict[str, Buffer], config: Config, strided: bool = False, stored: frozenset[str] = frozenset(),
        local: frozenset[str] = frozenset(), reads: frozenset[str] = frozenset(), tiled: bool = False,
        accesses: dict[str, Any] | None = None,
    ) -> None:
        self.kernel = kernel
        # Each node's loads and stores (the scheduler's), for the nodes that may share a loop.
        self.accesses = accesses
        self.reads = reads
        # Buffers only this kernel reads, each at the element it wrote: kept in registers, never stored.
        self.local = local
        self.buffers = buffers
        self.config = config
        self.counter = itertools.count()
        self.dtypes: dict[str, torch.dtype] = {}
        self.params: dict[str, None] = {}
        self.written: set[str] = set()
        self.forwarded: dict[tuple[str, str, tuple[Size, ...]], str] = {}
        # Buffers some node of this kernel stores to: their loads are never reused (a store
        # in between would make them stale); the stored values are forwarded instead.
        self.stored = stored
        # Prints indices and sizes; records the size symbols used (the kernel's int64 arguments).
        self.p = IndexPrinter(TRITON)
        # Runs of outer loop variables some index reads as one (index_text), defined in header().
        self.runs: dict[tuple[int, int], None] = {}
        self.sizes = sizes.current()
        k = len(kernel.outer)
        self.xnumel = _numel(kernel.outer)
        self.inners = [n.reduction_ranges if n.is_reduction else n.ranges[k:] for n in kernel.row_nodes]
        self.inners += [n.ranges[1:] for n in kernel.partial_nodes]
        inner_numels = [_numel(r) for r in self.inners if r]
        self.rnumel: Size = max(inner_numels, key=sizes.hint, default=0)
        # A persistent tile must hold every inner range at every size: only a bounded one fits.
        tops = [upper_bound(n) for n in inner_numels]
        top = None if any(t is None for t in tops) else max((t for t in tops if t is not None), default=0)
        flat = k >= 1 and all(not n.is_reduction and not inner for n, inner in zip(kernel.nodes, self.inners))
        # A row loop's grid runs over chunks of rows, each ``chunk`` rows long.
        self.chunks, self.chunk = (kernel.partial_nodes[0].ranges[0], kernel.partial_nodes[0].reduction_ranges[0]) if kernel.partials else (0, 0)
        if kernel.partials:
            self.style = "rowloop"
        elif tiled:
            # A transposing copy (see reordered_loops): [XBLOCK, RBLOCK] tiles, each access
            # contiguous along one of the two axes.
            self.style = "looped"
            strided = True
        elif flat:
            self.style = "flat"
        elif any(self.inners) and top is not None and heur.next_pow2(top) <= heur.persistent_limit(self._widest_itemsize(), strided):
            # An inner range of no points (a sum over an empty dim) is a one-lane masked tile:
            # a looped kernel would give every outer point its own program.
            self.style = "persistent"
        else:
            self.style = "looped"
        self.strided = strided and self.style != "rowloop"
        self.rblock = heur.next_pow2(top or 0) if self.style in ("persistent", "rowloop") else 0
        max_x = heur.MAX_XBLOCK_FLAT if self.style == "flat" else heur.MAX_XBLOCK_INNER
        # Every chunk of a row loop is whole: its programs need no mask.
        self.xmask = None if known_multiple(self.xnumel, max_x) or self.style == "rowloop" else "xmask"
        self.index_dtype = self._index_dtype()
        # A row loop steps over ``rows`` rows of a chunk at once (a tile row each).
        self.rows = heur.rowloop_rows(self.rblock, int(self.chunk)) if self.style == "rowloop" else 0
        rows = str(self.rows) if self.style == "rowloop" else "XBLOCK"
        self.tile = f"[{rows}, RBLOCK]"
        self.column = f"[{rows}, 1]"
        self.row_subs: dict[sympy.Symbol, Expr] = {xvar(0): self.chunk * CHUNK + ROW} if self.style == "rowloop" else {}

    def _widest_itemsize(self) -> int:
        return max((b.layout.dtype.itemsize for b in self.buffers.values()), default=4)

    def _index_dtype(self) -> str:
        # 32-bit indices must be right at every size: symbolic sizes need bounded ranges.
        xs = upper_bound(self.xnumel)
        rs = [upper_bound(_numel(r)) for r in self.inners if r]
        # Every buffer it addresses: an offset into one it only reads is as large as that one.
        touched = {b.name for n in self.kernel.nodes for b in n.outputs} | {r for r in self.reads if r in self.buffers}
        stores = [upper_bound(self.buffers[b].layout.storage_numel) for b in touched]
        if xs is None or any(v is None for v in (*rs, *stores)):
            return "tl.int64"
        # A flat kernel's index is xindex alone (up to one block past the end); an inner loop's
        # also spans its range plus a block. (A flat kernel used to be charged an inner block
        # too, so one over more than 2**19 points indexed in 64 bits.)
        inner = max((v or 0 for v in rs), default=0) + heur.MAX_RBLOCK if rs else 1
        reach = (xs + heur.MAX_XBLOCK_FLAT) * inner
        biggest = max((v or 0 for v in stores), default=0)
        return "tl.int32" if reach < INT32_LIMIT and biggest < INT32_LIMIT else "tl.int64"

    def loop_symbols(self, index: Expr) -> set[sympy.Symbol]:
        """The loop variables ``index`` depends on (size symbols are the same in every lane)."""
        return {s for s in index.free_symbols if not self.sizes.is_symbol(s)}

    def fresh(self) -> str:
        return f"tmp{next(self.counter)}"

    def unravel(self, flat: str, dims: Sequence[Size], names: Sequence[str]) -> list[str]:
        """Lines defining ``names`` as the row-major multi-index of ``flat`` over ``dims``."""
        out = []
        strides = contiguous_strides(dims)
        for i, (name, size, stride) in enumerate(zip(names, dims, strides)):
            q = flat if stride == 1 else f"({flat} // {self.p(stride)})"
            out.append(f"{name} = {q}" if i == 0 else f"{name} = {q} % {self.p(size)}")
        return out

    def index_text(self, index: Expr) -> str:
        """``index`` printed with its contiguous runs of outer loop variables as one (merge_runs)."""
        if self.style == "rowloop" or len(self.kernel.outer) < 2:
            return self.p(index)
        merged, runs = merge_runs(index, self.kernel.outer)
        for run in runs:
            self.runs.setdefault(run)
        return self.p(merged)

    def run_defs(self) -> list[str]:
        """Lines defining the runs ``index_text`` used from ``xindex``."""
        dims = self.kernel.outer
        strides = contiguous_strides(dims)
        out = []
        for a, b in self.runs:
            q = "xindex" if equal(strides[b], 1) else f"(xindex // {self.p(strides[b])})"
            out.append(f"{run_symbol(a, b)} = {q}" if a == 0 else f"{run_symbol(a, b)} = {q} % {self.p(_numel(dims[a:b + 1]))}")
        return out

    def rmask_for(self, numel: Size) -> str | None:
        if self.style in ("persistent", "rowloop"):
            return None if equal(numel, self.rblock) else "rmask"
        return None if known_multiple(numel, heur.MAX_RBLOCK) else "rmask"

    def node_section(self, node: ComputedNode, inner: tuple[Size, ...], partial: bool = False, cse: dict[str, str] | None = None) -> Section:
        section = Section()
        handler = (_PartialOps if partial else TritonOps)(self, node, section, inner)
        if cse is not None:
            handler.cse = cse
        xs, rs = node_vars(node)
        with set_ops_handler(handler):
            node.body(xs, rs)
        return section

    def comment(self, node: ComputedNode) -> str:
        what = node.reduction_type or node.kind
        extra = f" x {list(node.reduction_ranges)}" if node.reduction_ranges else ""
        return f"# {node.name}: {what} over {list(node.ranges)}{extra}, from graph node(s) {', '.join(node.origins)}"

    def header(self) -> list[str]:
        k = len(self.kernel.outer)
        wide = self.index_dtype == "tl.int64"
        if self.style == "rowloop":
            cast = ".to(tl.int64)" if wide else ""
            return [f"rbase = tl.arange(0, RBLOCK)[None, :]{cast}"]
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        lines = [f"xnumel = {self.p(self.xnumel)}"]
        suffix = "" if self.style == "flat" else "[:, None]"
        lines.append(f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK){suffix}")
        if self.xmask:
            lines.append("xmask = xindex < xnumel")
        lines.extend(self.unravel("xindex", self.kernel.outer, [f"x{i}" for i in range(k)]))
        lines.extend(self.run_defs())
        if self.style != "flat":
            cast = ".to(tl.int64)" if wide else ""
            lines.append(f"rbase = tl.arange(0, RBLOCK)[None, :]{cast}")
        return lines

    def inner_defs(self, node: ComputedNode, inner: tuple[Size, ...], names: Sequence[str] | None = None) -> list[str]:
        k = len(self.kernel.outer)
        if names is None:
            names = [f"r{i}" for i in range(len(inner))] if node.is_reduction else [f"x{k + i}" for i in range(len(inner))]
        lines = []
        numel = _numel(inner)
        if self.rmask_for(numel):
            lines.append(f"rmask = rindex < {self.p(numel)}")
        lines.extend(self.unravel("rindex", inner, names))
        return lines

    def body(self) -> list[str]:
        if self.style == "rowloop":
            return self.row_loop_body()
        out: list[str] = []
        if self.style == "persistent":
            out.append("rindex = rbase")
        shared = self.style == "looped"
        for group in self.loop_groups():
            # One loop, one scope: a value loaded (or computed) once serves every node in it.
            cse: dict[str, str] | None = {} if shared and len(group) > 1 else None
            sections = [self.node_section(node, inner, cse=cse) for node, inner in group]
            node, inner = group[0]
            out.extend(self.comment(n) for n, _ in group)
            if any(sec.barrier for sec in sections):
                out.append("tl.debug_barrier()")
            for sec in sections:
                out.extend(sec.prefix)
            if not inner:
                out.extend(sections[0].body)
            elif self.style == "persistent":
                out.extend(self.inner_defs(node, inner))
                out.extend(sections[0].body)
            else:
                out.append(f"for roffset in range(0, {self.p(_numel(inner))}, RBLOCK):")
                loop = ["rindex = roffset + rbase", *self.inner_defs(node, inner)]
                for sec in sections:
                    loop.extend(sec.body)
                out.extend("    " + ln for ln in loop)
            for sec in sections:
                out.extend(sec.suffix)
        return out

    def loop_groups(self) -> list[list[tuple[ComputedNode, tuple[Size, ...]]]]:
        """The kernel's nodes in order, consecutive ones that share one inner loop together.

        In a looped kernel, reductions over the same inner range share a loop when none reads
        a buffer another of them stores (or stores one another reads): their stores all come
        after the loop, so each reads what it read in a loop of its own. A batch norm's
        backward sums four products of the same two tensors; four loops read them four times
        (38 us against torch.compile's 13 us for a 32x56x56x64 bf16 one on an H200)."""
        groups: list[list[tuple[ComputedNode, tuple[Size, ...]]]] = []
        names: list[tuple[set[str], set[str]]] = []
        for node, inner in zip(self.kernel.nodes, self.inners):
            access = self.accesses.get(node.name) if self.accesses is not None else None
            loads = {name for name, _ in access.loads} if access is not None else set()
            stores = {name for name, _ in access.stores} if access is not None else set()
            last = groups[-1] if groups else None
            if (
                access is not None and self.style == "looped" and last is not None and inner and node.is_reduction
                and all(n.is_reduction and other == inner for n, other in last)
                and not (loads & names[-1][1] or stores & names[-1][0])
            ):  # fmt: skip
                last.append((node, inner))
                names[-1][0].update(loads)
                names[-1][1].update(stores)
            else:
                groups.append([(node, inner)])
                names.append((loads, stores))
        return groups

    def row_loop_body(self) -> list[str]:
        """Chunks of this program, rows of each chunk: row nodes per row, partials per chunk."""
        kernel = self.kernel
        rows = len(kernel.row_nodes)
        sections = [self.node_section(n, inner, partial=i >= rows) for i, (n, inner) in enumerate(zip(kernel.nodes, self.inners))]
        cols = self.inners[-1]
        zero = f"tl.zeros([1, 1], {self.index_dtype})"
        # Columns are the same lanes for every row: named once, before the loops.
        out = ["rindex = rbase", *self.inner_defs(kernel.partial_nodes[0], cols, ["x" + str(i + 1) for i in range(len(cols))])]
        out.append("for pcl in range(0, XBLOCK):")
        chunk_lines = [f"pc = tl.program_id(0) * XBLOCK + pcl + {zero}"]
        for sec in sections[rows:]:
            chunk_lines.extend(sec.prefix)
        chunk_lines.append(f"for rrl in range(0, {int(self.chunk) // self.rows}):")
        rr = f"rrl + {zero}" if self.rows == 1 else f"rrl * {self.rows} + tl.arange(0, {self.rows})[:, None].to({self.index_dtype})"
        row_lines = [f"rr = {rr}", f"xindex = pc * {self.chunk} + rr", "x0 = xindex"]
        for node, inner, sec in zip(kernel.row_nodes, self.inners, sections):
            row_lines.append(self.comment(node))
            if sec.barrier:
                row_lines.append("tl.debug_barrier()")
            row_lines.extend(sec.prefix)
            if inner:
                row_lines.extend(self.inner_defs(node, inner))
            row_lines.extend(sec.body)
            row_lines.extend(sec.suffix)
        for node, sec in zip(kernel.partial_nodes, sections[rows:]):
            row_lines.append(self.comment(node) + f"; partial over chunks of {self.chunk} rows")
            if sec.barrier:
                row_lines.append("tl.debug_barrier()")
            row_lines.extend(sec.body)
        chunk_lines.extend("    " + ln for ln in row_lines)
        for sec in sections[rows:]:
            chunk_lines.extend(sec.suffix)
        out.extend("    " + ln for ln in chunk_lines)
        return out


# Both dims of a transposed tile at least this long: below it a flat kernel's partly
# coalesced accesses cost little more than the tile's two-way layout change.
_TILE_MIN = 16


def reordered_loops(kernel: Kernel, accesses: dict[str, Any]) -> tuple[Kernel, bool] | None:
    """A single pointwise node's loops reordered to follow memory, and whether it runs in tiles.

    The loops of a flat kernel follow the logical shape, the last dim fastest. A node that
    stores contiguously along another dim ``s`` (a value stored column-major) is iterated with
    ``s`` moved innermost. If it also loads another buffer contiguously along a dim ``a`` other
    than ``s`` (a transposing copy, both at least ``_TILE_MIN`` long), it runs [rows, a] tiles
    (``a`` innermost, ``s`` fastest among the rows): Triton coalesces the loads along one axis and
    the stores along the other, changing the layout between them. BERT's key transpose (bf16
    (8, 512, 12, 64) to float32 (8, 12, 64, 512)) took 17 us flat on an H200 against
    torch.compile's 5 us. None where the loops already follow memory."""
    if len(kernel.nodes) != 1 or kernel.partials:
        return None
    node = kernel.nodes[0]
    n = len(node.ranges)
    if node.is_reduction or n < 2 or len(kernel.outer) != n:
        return None
    xs, _ = node_vars(node)
    access = accesses[node.name]
    stored = {next((d for d in range(n) if is_linear_in(index, xs[d]) == 1), None) for _, index in access.stores}
    if len(stored) != 1 or None in stored:
        return None
    (s,) = stored
    assert s is not None
    a = None
    for _, index in access.loads:
        if is_linear_in(index, xs[s]) in (0, 1):
            continue
        a = next((d for d in range(n) if d != s and is_linear_in(index, xs[d]) == 1), None)
        if a is not None:
            break
    tiled = a is not None and all(static_value(node.ranges[d]) is not None and int(node.ranges[d]) >= _TILE_MIN for d in (a, s))
    order: list[int]
    if tiled and a is not None:
        order = [d for d in range(n) if d not in (a, s)] + [s, a]
    elif s != n - 1:
        order = [d for d in range(n) if d != s] + [s]
    else:
        return None
    body = node.body

    def permuted(new_xs: Sequence[Expr], rs: Sequence[Expr]) -> Any:
        old_xs: list[Expr] = [sympy.Integer(0)] * n
        for position, d in enumerate(order):
            old_xs[d] = new_xs[position]
        return body(old_xs, rs)

    ranges = tuple(node.ranges[d] for d in order)
    return Kernel(kernel.name, (dataclasses.replace(node, ranges=ranges, body=permuted),), ranges[:-1] if tiled else ranges), tiled


def _strided_reduction(kernel: Kernel, accesses: dict[str, Any]) -> bool:
    """True when some reduction loads along its innermost reduced dim with a stride other than 1."""
    for node in kernel.nodes:
        if not node.is_reduction or not node.reduction_ranges:
            continue
        last = rvar(len(node.reduction_ranges) - 1)
        for _, index in accesses[node.name].loads:
            coeff = is_linear_in(index, last) if index.has(last) else 1
            if coeff != 1:
                return True
    return False


def local_buffers(sched: Schedule, kernels: Collection[str], outputs: Collection[str], buffers: dict[str, Buffer], config: Config) -> frozenset[str]:
    """Buffers that Triton ``kernels`` keep in registers instead of storing: written by one node
    of a flat or persistent kernel, read by no other step, and read in that kernel only at the
    element its writer computed at the same point of the tile (what the load forwarding serves).

    A softmax's masked scores (BERT's attention: read by the max, the exponent and the all-masked
    test) were stored and loaded back, a full pass over the scores for nothing."""
    readers: dict[str, set[str]] = {}
    for step in sched.steps:
        names = [r for n in step.nodes for r in sched.accesses[n.name].reads()] if isinstance(step, Kernel) else list(step.reads)
        for name in names:
            readers.setdefault(name, set()).add(step.name)
    found: set[str] = set()
    for kernel in sched.kernels:
        if kernel.name not in kernels or kernel.partials:
            continue
        # The style the kernel is generated in (a transposing copy runs looped tiles).
        reordered = reordered_loops(kernel, sched.accesses)
        tiled = reordered is not None and reordered[1]
        style = _KernelWriter(reordered[0] if reordered else kernel, buffers, config, _strided_reduction(kernel, sched.accesses), tiled=tiled).style
        if style not in ("flat", "persistent"):
            continue
        k = len(kernel.outer)
        for node in kernel.nodes:
            if len(node.outputs) != 1:
                continue
            name = node.outputs[0].name
            if name in outputs or readers.get(name, set()) - {kernel.name}:
                continue
            stores = {i for n, i in sched.accesses[node.name].stores if n == name}
            if len(stores) != 1:
                continue
            wrote = shared_index(node, k, next(iter(stores)))
            if all(
                shared_index(other, k, i) == wrote and (not _uses_inner(wrote) or inner_loops(other, k) == inner_loops(node, k))
                for other in kernel.nodes if other is not node
                for n, i in sched.accesses[other.name].loads if n == name
            ):  # fmt: skip
                found.add(name)
    return frozenset(found)


def _uses_inner(index: Expr) -> bool:
    """Whether an index of shared_index's form reads a node's own inner loops (its c<j>)."""
    return any(s.name[:1] == "c" and s.name[1:].isdigit() for s in index.free_symbols)


def generate_triton_kernel(
    kernel: Kernel, buffers: dict[str, Buffer], accesses: dict[str, Any], config: Config, local: frozenset[str] = frozenset()
) -> TritonKernel:
    """Generate the Triton module (helpers and one ``@triton.jit`` function) of one kernel; the
    buffers in ``local`` (see local_buffers) stay in registers and are not parameters."""
    stored = frozenset(name for n in kernel.nodes for name, _ in accesses[n.name].stores)
    reads = frozenset(name for n in kernel.nodes for name, _ in accesses[n.name].loads)
    reordered = reordered_loops(kernel, accesses)
    if reordered is not None:
        kernel = reordered[0]
    writer = _KernelWriter(
        kernel, buffers, config, _strided_reduction(kernel, accesses), stored, local, reads, tiled=reordered is not None and reordered[1], accesses=accesses
    )
    body = writer.body()
    head = writer.header()
    names = [n for n in writer.params if n not in local]
    for node in kernel.nodes:
        for name, _ in (*accesses[node.name].loads, *accesses[node.name].stores):
            if name not in names and name not in local:
                names.append(name)
    env = sizes.current()
    size_names = tuple(env.code_name(sym) for sym in sizes.ordered(writer.p.used))
    if size_names and writer.index_dtype == "tl.int32":
        # Size arguments arrive as int64; bounded sizes keep the index arithmetic 32-bit.
        head = [f"{n} = {n}.to(tl.int32)" for n in size_names] + head
    params = [*names, *size_names, "XBLOCK: tl.constexpr"] + ([] if writer.style == "flat" else ["RBLOCK: tl.constexpr"])
    origins = tuple(dict.fromkeys(o for n in kernel.nodes for o in n.origins))
    shape = f" in {writer.chunks} chunks of {writer.chunk} rows" if writer.style == "rowloop" else ""
    lines = [
        "",
        "",
        "@triton.jit",
        f"def {kernel.name}({', '.join(params)}):",
        f"    # {writer.style} kernel over {list(kernel.outer)}{shape}; graph node(s): {', '.join(origins)}",
        *("    " + ln for ln in head + body),
        "",
    ]
    source = PRELUDE + "\n".join(lines)
    dtypes = tuple(buffers[n].layout.dtype for n in names)
    # A row loop's programs each take XBLOCK chunks of rows: its grid is over chunks.
    xnumel = writer.chunks if writer.style == "rowloop" else writer.xnumel
    xsource = "" if static_value(xnumel) is not None else IndexPrinter(PYTHON)(xnumel)
    return TritonKernel(
        kernel.name, source, tuple(names), dtypes, writer.style, xnumel, writer.rnumel, writer.rblock, writer.index_dtype,
        strided=writer.strided, origins=origins, sizes=size_names, xnumel_source=xsource,
        xnumel_hint=sizes.hint(xnumel), rnumel_hint=sizes.hint(writer.rnumel), rows=max(writer.rows, 1),
    )
