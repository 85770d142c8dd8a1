"""The Python wrapper: allocates buffers per the memory plan, calls kernels and extern ops in order."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ..compiled import KernelCall
from ..config import Config
from ..ir import BufferArg, ExternNode, FloatSize, Layout
from ..lowering.fallback import op_name
from ..lowering.graph import LoweredGraph
from ..memory import MemoryPlan
from ..runtime.namespace import DIRECT_CALLS
from ..runtime.namespace import restride as _restride
from ..runtime.recycle import RECYCLE_MIN_BYTES, OutputRecycler
from ..scheduler import Kernel, Schedule
from ..size_sources import SymbolSource, find_sources
from ..sizes import hint, static_value
from .index_print import PYTHON, IndexPrinter, python_float


@dataclass(frozen=True, slots=True)
class WrapperSource:
    """The wrapper's Python source, the objects its namespace must hold, and how it reads each
    size symbol from its inputs (empty for static sizes)."""

    source: str
    namespace: dict[str, Any]
    symbols: tuple[SymbolSource, ...] = ()


class _Namer:
    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "torch": torch,
            "_empty": torch.empty_strided,
            "_as_strided": torch.as_strided,
        }
        self._ids: dict[Any, str] = {}
        # Sizes print over the symbols' names, locals of ``call`` read from its inputs once.
        self.sizes = IndexPrinter(PYTHON)

    def const(self, obj: Any, hint: str = "c") -> str:
        key: Any = obj if isinstance(obj, (torch.device, torch.dtype)) else id(obj)
        if key in self._ids:
            return self._ids[key]
        name = f"_{hint}{len(self.namespace)}"
        self.namespace[name] = obj
        self._ids[key] = name
        return name

    def literal(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, str)):
            return repr(value)
        if isinstance(value, FloatSize):
            self.sizes(value.expr)  # records the symbols it reads
            return python_float(value.expr)
        if isinstance(value, sympy.Basic):
            return self.sizes(value)
        if isinstance(value, int):
            return repr(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else self.const(value, "f")
        if isinstance(value, list):
            return "[" + ", ".join(self.literal(v) for v in value) + "]"
        if isinstance(value, tuple):
            return "(" + "".join(self.literal(v) + ", " for v in value) + ")"
        return self.const(value, "c")


def _may_have_elements(lay: Layout) -> bool:
    """False when the layout statically holds at most one element (its strides do not matter)."""
    n = static_value(lay.numel)
    return n is None or n > 1


def _check_before_use(lines: list[str], checks: dict[str, str]) -> list[str]:
    """``lines`` with each input's layout check placed just before the first line that reads the input.

    The first kernel starts after the checks in front of it only: a model whose wrapper receives
    200 parameters launched its first kernel 40-80 us later when all of them were checked up front
    (BERT-base on the H200), while the GPU sat idle. An input no line reads is not checked at all.
    """
    if not checks:
        return lines
    pending = dict(checks)
    out: list[str] = []
    for line in lines:
        if pending:
            code = line.split("  # ", 1)[0]
            for word in _WORD.findall(code):
                check = pending.pop(word, None)
                if check is not None:
                    out.append(check)
        out.append(line)
    return out


def generate_wrapper(
    graph: LoweredGraph,
    sched: Schedule,
    plan: MemoryPlan,
    calls: dict[str, KernelCall],
    config: Config,
) -> WrapperSource:
    """Generate ``call(*inputs)`` (and ``call_boxed([inputs])``) for a scheduled, planned graph whose kernels are ``calls``."""
    names = _Namer()
    names.namespace["_restride"] = _restride
    lines: list[str] = []
    params = [n if n else f"_scalar{i}" for i, n in enumerate(graph.inputs)]
    var_layout: dict[str, Layout] = {}
    # Tensors that may start past their storage's beginning (inputs, views a fallback returned):
    # a view of one is placed relative to its own storage offset.
    input_vars: set[str] = {view for step in sched.steps if isinstance(step, ExternNode) for view, _ in step.aliases}
    # Each input's layout check, emitted just before the input's first use (see _check_before_use).
    checks: dict[str, str] = {}
    for name in graph.inputs:
        if name:
            lay = graph.buffers[name].layout
            var_layout[name] = lay
            input_vars.add(name)
            if config.check_input_strides and _may_have_elements(lay):
                # Kernels index inputs with the strides they were compiled for; a caller
                # passing another layout gets a copy rather than wrong answers.
                size, stride = names.literal(lay.size), names.literal(lay.stride)
                # Row-major is asked of the tensor itself (cheaper than building and comparing a
                # stride tuple, and blind to strides of size-1 dims, which no index multiplies).
                wrong = f"not {name}.is_contiguous()" if lay.is_contiguous else f"{name}.stride() != {stride}"
                checks[name] = f"if {wrong}: {name} = _restride({name}, {size}, {stride})"
    ptr: dict[str, str] = {}
    for cname, tensor in graph.constants.items():
        names.namespace[cname] = tensor
        names.namespace[f"{cname}_ptr"] = tensor.data_ptr()
        ptr[cname] = f"{cname}_ptr"
        var_layout[cname] = graph.buffers[cname].layout

    def storage_of(buf: str) -> str:
        return plan.storage.get(buf, buf)

    def data_ptr(buf: str) -> str:
        if buf in ptr:
            return ptr[buf]
        return f"{storage_of(buf)}.data_ptr()"

    def view_expr(arg: BufferArg) -> str:
        var = storage_of(arg.buffer)
        lay = var_layout.get(var)
        if lay is not None and lay.size == arg.size and lay.stride == arg.stride and arg.offset == 0:
            return var
        base = f"{var}.storage_offset() + " if var in input_vars else ""
        return f"_as_strided({var}, {names.literal(arg.size)}, {names.literal(arg.stride)}, {base}{arg.offset})"

    def transposed_base(arg: Any) -> str | None:
        """The variable of which ``arg`` is the plain transpose, when that variable is a
        row-major matrix read from its start (what a linear layer's weight is)."""
        if not isinstance(arg, BufferArg) or arg.offset != 0 or len(arg.size) != 2:
            return None
        var = storage_of(arg.buffer)
        lay = var_layout.get(var)
        if lay is None or len(lay.size) != 2 or tuple(lay.stride) != (lay.size[1], 1):
            return None
        if tuple(arg.size) != (lay.size[1], lay.size[0]) or tuple(arg.stride) != (1, lay.size[1]):
            return None
        return var

    def render(a: Any) -> str:
        if isinstance(a, BufferArg):
            return view_expr(a)
        if isinstance(a, list):
            return "[" + ", ".join(render(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(render(x) + ", " for x in a) + ")"
        return names.literal(a)

    returned = {storage_of(out.view.buffer) for out in graph.outputs if out.view is not None}
    needed = _read_or_returned(sched, graph)
    kernel_sizes: set[str] = set()
    for i, step in enumerate(sched.steps):
        for buf_name in plan.allocate.get(i, ()):
            lay = graph.buffers[buf_name].layout
            var_layout[buf_name] = lay
            if config.recycle_outputs and buf_name in returned and lay.device.type == "cpu" and _recyclable(lay):
                fixed = static_value(lay.nbytes) is not None
                recycler = OutputRecycler(lay.size, lay.stride, lay.dtype, hint(lay.nbytes))
                name = names.const(recycler, "recycle")
                if fixed:
                    lines.append(f"{buf_name} = {name}.take()")
                else:
                    # Symbolic sizes: the call's own layout, served by any idle buffer large enough.
                    size, stride, nbytes = names.literal(lay.size), names.literal(lay.stride), names.literal(lay.nbytes)
                    lines.append(f"{buf_name} = {name}.take_sized({size}, {stride}, {nbytes})")
                continue
            lines.append(
                f"{buf_name} = _empty({names.literal(lay.size)}, {names.literal(lay.stride)}, "
                f"dtype={names.const(lay.dtype, 'dt')}, device={names.const(lay.device, 'dev')})"
            )
        if isinstance(step, Kernel) and step.is_empty:
            lines.append(f"# {step.name} is not launched: it writes no element (zero-size output)")
        elif isinstance(step, Kernel):
            kc = calls[step.name]
            names.namespace[kc.name] = kc.fn
            origins = ", ".join(dict.fromkeys(o for n in step.nodes for o in n.origins))
            args = [data_ptr(p) if kc.pointers else storage_of(p) for p in kc.params]
            args.extend(kc.sizes)
            kernel_sizes.update(kc.sizes)
            lines.append(f"{kc.name}({', '.join(args)})  # {origins}")
        else:
            lines.extend(_extern_lines(step, names, render, transposed_base, var_layout, config.check_extern_strides, needed))
        for var in plan.free_after.get(i, ()):
            lines.append(f"del {var}")
    outs = []
    for out in graph.outputs:
        if out.view is not None:
            outs.append(view_expr(out.view))
        else:
            outs.append(names.literal(out.value))
    if graph.output_is_tuple:
        lines.append("return (" + "".join(o + ", " for o in outs) + ")")
    else:
        lines.append(f"return {outs[0]}")
    lines = _check_before_use(lines, checks)
    symbols = _symbol_sources(graph, names.sizes.used, kernel_sizes)
    lines[:0] = _read_symbols(symbols, params, graph.input_metas)
    lines = _free_inputs_after_last_use(lines, params)
    # call_boxed takes ownership of its argument list and empties it: with the caller's own
    # references gone (a backward's saved activations), each input is freed after its last use
    # instead of at the end. call(*inputs) keeps the usual convention (the caller holds them).
    unpack = f"    {''.join(p + ', ' for p in params)}= args\n" if params else ""
    body = "\n".join("    " + ln for ln in lines)
    source = f"def call(*args):\n    return call_boxed(list(args))\n\n\ndef call_boxed(args):\n{unpack}    args.clear()\n{body}\n"
    return WrapperSource(source, names.namespace, symbols)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _free_inputs_after_last_use(lines: list[str], params: Sequence[str]) -> list[str]:
    """``lines`` with ``del <input>`` after the last line naming each input (none for an input the
    return statement names). Every generated line is one simple statement, so the line that
    names an input last is where the wrapper is done with it."""
    last: dict[str, int] = {}
    wanted = set(params)
    for i, line in enumerate(lines):
        for word in _WORD.findall(line):
            if word in wanted:
                last[word] = i
    after: dict[int, list[str]] = {}
    for name, i in last.items():
        if not lines[i].startswith("return"):
            after.setdefault(i, []).append(name)
    # An input no line names is released at once (call_boxed may hold its only reference).
    unused = [name for name in params if name not in last]
    out: list[str] = [f"del {', '.join(unused)}"] if unused else []
    for i, line in enumerate(lines):
        out.append(line)
        if i in after:
            out.append(f"del {', '.join(after[i])}")
    return out


def _recyclable(lay: Layout) -> bool:
    # A symbolic output is recycled when it is large at the hints (an output of another size
    # still gets a buffer of its own size; a small one is simply allocated).
    return hint(lay.nbytes) >= RECYCLE_MIN_BYTES


def _symbol_sources(graph: LoweredGraph, printed: set[sympy.Symbol], kernel_sizes: set[str]) -> tuple[SymbolSource, ...]:
    """How the call reads every size symbol the wrapper or a kernel uses."""
    env = graph.sizes
    if not env.dynamic:
        return ()
    by_name = {env.code_name(s): s for s in env.symbols}
    needed = set(printed) | {by_name[n] for n in kernel_sizes}
    return find_sources(graph.input_metas, env, needed)


def _read_symbols(symbols: Sequence[SymbolSource], params: Sequence[str], metas: Sequence[Any]) -> list[str]:
    """Lines reading each size symbol once: several sizes of one input in one unpacking of its shape."""
    lines: list[str] = []
    by_input: dict[int, list[SymbolSource]] = {}
    for src in symbols:
        if src.kind == "size":
            by_input.setdefault(src.input, []).append(src)
        else:
            lines.append(f"{src.name} = {src.source(params)}")
    for i, found in by_input.items():
        if len(found) == 1:
            lines.append(f"{found[0].name} = {found[0].source(params)}")
            continue
        ndim = len(metas[i].shape)
        names = ["_"] * ndim
        for src in found:
            names[src.dim] = src.name
        lines.append(f"{', '.join(names)} = {params[i]}.shape")
    return lines


def _read_or_returned(sched: Schedule, graph: LoweredGraph) -> set[str]:
    """Buffers some step reads or the graph returns."""
    found = {out.view.buffer for out in graph.outputs if out.view is not None}
    for step in sched.steps:
        if isinstance(step, Kernel):
            for node in step.nodes:
                found.update(sched.accesses[node.name].reads())
        else:
            found.update(step.reads)
    return found


_LINEAR_OPS = {torch.ops.aten.mm.default: 1, torch.ops.aten.addmm.default: 2}
"""Matmuls whose second factor (at this position) a linear layer passes transposed."""


def _extern_call(step: ExternNode, names: _Namer, render: Any, transposed_base: Any) -> str:
    """The call expression of an extern op. ``x @ w.t()`` (``+ b``) over a row-major ``w`` is
    called as ``linear(x, w, b)``: at::linear runs exactly that mm/addmm, with the transpose
    made in C++ instead of a Python-made view (an 8x64 by 64x128 addmm on the CPU machine: 5.9
    us of host time against 6.8; BERT-base has 72 a step)."""
    at = _LINEAR_OPS.get(step.op)
    if at is not None and not step.kwargs and len(step.args) == at + 1 and len(getattr(step.args[at - 1], "size", ())) == 2:
        weight = transposed_base(step.args[at])
        if weight is not None:
            bias = f", {render(step.args[0])}" if at == 2 else ""
            return f"{names.const(torch.nn.functional.linear, 'op')}({render(step.args[at - 1])}, {weight}{bias})"
    op = names.const(DIRECT_CALLS.get(step.op, step.op), "op")
    args = ", ".join([render(a) for a in step.args] + [f"{k}={render(v)}" for k, v in step.kwargs])
    return f"{op}({args})"


def _extern_lines(
    step: ExternNode, names: _Namer, render: Any, transposed_base: Any, var_layout: dict[str, Layout], check: bool,
    needed: set[str],
) -> list[str]:
    lines = [f"# fallback {op_name(step.op)}: the eager kernel, unfused"] if step.fallback else []
    lines.append(f"{step.name} = {_extern_call(step, names, render, transposed_base)}  # {', '.join(step.origins)}")
    outs = step.outputs if step.multi else step.outputs[:1]
    for j, buf in enumerate(outs):
        if buf is None:
            continue
        if step.multi:
            lines.append(f"{buf.name} = {step.name}[{j}]")
        lay = buf.layout
        var_layout[buf.name] = lay
        # An output nobody reads keeps whatever layout it came in, and may even be None (the
        # logsumexp of an attention kernel run without grad): only read ones are checked.
        if check and _may_have_elements(lay) and buf.name in needed:
            size, stride = names.literal(lay.size), names.literal(lay.stride)
            lines.append(f"if {buf.name}.stride() != {stride}: {buf.name} = _restride({buf.name}, {size}, {stride})")
    if step.multi:
        lines.append(f"del {step.name}")
    return lines
