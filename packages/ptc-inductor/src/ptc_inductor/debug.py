"""Human-readable dumps of the IR, the schedule and the memory plan, and the output_code log."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from .analysis import node_vars
from .ir import ComputedNode, ExternNode, Node
from .memory import MemoryPlan
from .scheduler import Kernel, Schedule
from .virtualized import set_ops_handler

output_code_log = logging.getLogger("ptc.inductor.output_code")


class _TextOps:
    """An ``ops`` handler that writes each call as one line of pseudo-code."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _emit(self, text: str) -> str:
        name = f"t{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return name

    def store(self, name: str, index: Any, value: Any) -> None:
        self.lines.append(f"store({name}, {index}, {value})")

    def masked(self, mask: Any, body: Callable[[], Any], other: Any, dtype: Any) -> str:
        self.lines.append(f"masked({mask}) {{")
        result = body()
        self.lines.append("}")
        return self._emit(f"masked_result({result}, other={other})")

    def indirect_indexing(self, value: Any, size: int) -> Any:
        import sympy

        name = self._emit(f"indirect({value}, {size})")
        return sympy.Symbol(name, integer=True, nonnegative=True)

    def reduction(self, dtype: Any, src_dtype: Any, rtype: str, value: Any) -> Any:
        name = self._emit(f"reduction({rtype}, {value}, dtype={dtype})")
        return (f"{name}.mean", f"{name}.m2", f"{name}.n") if rtype == "welford" else name

    def __getattr__(self, name: str) -> Callable[..., str]:
        return lambda *args: self._emit(f"{name}({', '.join(str(a) for a in args)})")


def format_node(node: Node) -> str:
    """The IR of one node as text."""
    if isinstance(node, ExternNode):
        outs = ", ".join(b.name for b in node.outputs if b is not None)
        return f"{outs} = extern {node.op}  # from {', '.join(node.origins)}"
    assert isinstance(node, ComputedNode)
    text = _TextOps()
    xs, rs = node_vars(node)
    with set_ops_handler(text):
        node.body(xs, rs)
    head = f"{node.name}: {node.kind} ranges={list(node.ranges)} reduction_ranges={list(node.reduction_ranges)}"
    layouts = "; ".join(f"{b.name} {b.layout.dtype} size={b.layout.size} stride={b.layout.stride}" for b in node.outputs)
    return "\n".join([head + f"  # from {', '.join(node.origins)}", "  " + layouts, *("    " + ln for ln in text.lines)])


def format_schedule(sched: Schedule, plan: MemoryPlan) -> str:
    """The schedule: kernels with their nodes and outer ranges, extern calls, and memory events."""
    lines = []
    for i, step in enumerate(sched.steps):
        if isinstance(step, Kernel):
            rides = f"; partials riding along: {', '.join(n.name for n in step.partial_nodes)}" if step.partials else ""
            lines.append(f"[{i}] {step.name} outer={list(step.outer)}: {', '.join(n.name for n in step.row_nodes)}{rides}")
        else:
            lines.append(f"[{i}] extern {step.op}: {step.name}")
        if plan.allocate.get(i):
            lines.append(f"      allocate {', '.join(plan.allocate[i])}")
        if plan.free_after.get(i):
            lines.append(f"      free {', '.join(plan.free_after[i])}")
    reuse = {b: s for b, s in plan.storage.items() if b != s}
    lines.append(f"reused storage: {reuse}")
    lines.append(f"kernel-local buffers (never allocated): {sorted(plan.local)}")
    lines.append(f"peak bytes: {plan.peak_bytes}")
    return "\n".join(lines) + "\n"


def write_debug_dir(path: str, files: dict[str, str]) -> None:
    """Write each ``name -> text`` into ``path``."""
    os.makedirs(path, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(path, name), "w", encoding="utf-8") as f:
            f.write(text)


def log_output_code(source: str, wrapper: str) -> None:
    """Log the generated kernels and wrapper on the ``ptc.inductor.output_code`` channel."""
    if not output_code_log.handlers and not logging.getLogger().handlers:
        # Standalone use without logging configured: PTC_LOGS asked for the code, so show it.
        output_code_log.addHandler(logging.StreamHandler(sys.stderr))
    if output_code_log.level == logging.NOTSET or output_code_log.level > logging.INFO:
        output_code_log.setLevel(logging.INFO)
    output_code_log.info("generated C++:\n%s\ngenerated wrapper:\n%s", source, wrapper)
