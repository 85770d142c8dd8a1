"""Graphs and kernels as text a person reads: one line per node with its shape, fallbacks marked."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

import ptc_spec

_DTYPES = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64",
    torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
}  # fmt: skip


def _target(target: Any) -> str:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)
    if module.startswith("torch._C._VariableFunctions") or module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{name}" if module and module != "builtins" else name


def _arg(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_arg(a) for a in args] + [f"{k}={_arg(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _meta(node: torch.fx.Node) -> str:
    meta = node.meta.get(ptc_spec.META_KEY)
    if isinstance(meta, ptc_spec.TensorMeta):
        return f"{_DTYPES.get(meta.dtype, str(meta.dtype))}[{', '.join(str(s) for s in meta.shape)}]"
    if isinstance(meta, (list, tuple)) and meta and all(isinstance(m, ptc_spec.TensorMeta) for m in meta):
        return (
            "("
            + ", ".join(f"{_DTYPES.get(m.dtype, str(m.dtype))}[{', '.join(str(s) for s in m.shape)}]" for m in meta)
            + ")"
        )
    return ""


_NODE_FORMS: dict[str, Callable[[torch.fx.Node], str]] = {
    "placeholder": lambda n: "input",
    "get_attr": lambda n: f"self.{n.target}",
    "call_method": lambda n: f"{_arg(n.args[0])}.{n.target}({_call(n.args[1:], dict(n.kwargs))})",
    "call_module": lambda n: f"self.{n.target}({_call(n.args, dict(n.kwargs))})",
    "call_function": lambda n: f"{_target(n.target)}({_call(n.args, dict(n.kwargs))})",
}
"""What each FX node kind computes, as text (the right-hand side of its line)."""


def node_line(node: torch.fx.Node) -> str:
    """One node as ``name: f32[8, 4] = aten.add.Tensor(x, y)`` (the output node as ``return ...``)."""
    if node.op == "output":
        return f"return {_arg(node.args[0])}"
    meta = _meta(node)
    head = f"{node.name}: {meta}" if meta else node.name
    return f"{head} = {_NODE_FORMS[node.op](node)}"


def graph_lines(gm: torch.fx.GraphModule) -> list[tuple[str, bool]]:
    """Each node of ``gm`` as text, with whether it runs as a fallback (an unfused eager kernel)."""
    return [(node_line(n), ptc_spec.is_fallback(n)) for n in gm.graph.nodes]


def kernel_sources(source: str, names: list[str]) -> dict[str, str]:
    """The text of each named kernel in a generated C++ translation unit or Triton module (the shared prelude left out)."""
    lines = source.splitlines()
    starts: list[tuple[int, str]] = []
    pattern = (
        re.compile(r'^(?:extern "C" .*?\b|def )(' + "|".join(re.escape(n) for n in names) + r")\(") if names else None
    )
    for i, line in enumerate(lines):
        found = pattern.match(line) if pattern is not None else None
        if found is not None:
            first = i
            while first > 0 and lines[first - 1].startswith("@"):  # a Triton kernel's decorators
                first -= 1
            starts.append((first, found.group(1)))
    out: dict[str, str] = {}
    for j, (first, name) in enumerate(starts):
        end = starts[j + 1][0] if j + 1 < len(starts) else len(lines)
        out[name] = "\n".join(lines[first:end]).rstrip()
    return out
