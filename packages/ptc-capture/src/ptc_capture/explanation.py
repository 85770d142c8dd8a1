"""explain(fn)(*args): what capture does with one call: graphs, breaks with user stacks, guards."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

__all__ = ["ExplainOutput", "explain"]


@dataclass(slots=True)
class ExplainOutput:
    """The graphs, graph breaks and guards of one explained call (``out`` is its result)."""

    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[Any] = field(default_factory=list)
    ops_per_graph: list[list[str]] = field(default_factory=list)
    guards: list[Any] = field(default_factory=list)
    out: Any = None

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}", "Break reasons:"]
        for i, record in enumerate(self.break_reasons, 1):
            lines.append(f"  {i}. {record.reason}")
            for location in record.stack:
                lines.append(f"       {location}")
        lines.append("Ops per graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  graph {i}: {len(ops)} ops: {', '.join(ops)}")
        lines.append(f"Guards ({len(self.guards)}):")
        for guard in self.guards:
            lines.append(f"  {guard.describe()}")
        return "\n".join(lines)


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    return f"{module.replace('torch._C._VariableFunctions', 'torch')}.{name}" if module else name


def explain(fn: Callable[..., Any]) -> Callable[..., ExplainOutput]:
    """Return a function that runs ``fn`` once with capture (backend eager) and reports what happened."""
    from ptc_capture.api import FrameCallback, _run_with_callback
    from ptc_capture.backends import lookup_backend
    from ptc_capture.capture import Capture

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        report = ExplainOutput()

        def record(capture: Capture) -> None:
            if capture.graph is not None:
                report.graphs.append(capture.graph)
                ops = [_op_name(n) for n in capture.graph.graph.nodes if n.op in ("call_function", "call_method")]
                report.ops_per_graph.append(ops)
            report.break_reasons.extend(capture.breaks)
            report.guards.extend(capture.guards)

        callback = FrameCallback(lookup_backend("eager"), False, record)
        target = fn._orig_mod if hasattr(fn, "_orig_mod") else fn
        if isinstance(target, torch.nn.Module):
            from ptc_capture.api import _force_hook

            _force_hook(target)
        report.out = _run_with_callback(callback, target, args, kwargs)
        report.graph_count = len(report.graphs)
        report.graph_break_count = len(report.break_reasons)
        return report

    return run
