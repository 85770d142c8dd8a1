"""Where each size symbol of a graph is read from the inputs of a call.

A compiled graph with symbolic sizes needs the value of every symbol at each call: it is
read once from the first input that has it as a whole dim (``arg0.size(1)``), else as a
whole stride, else from a SymInt input itself. The compiled callable does not check guards
(the capture that made the graph does), so a rule here only has to be right for inputs
that satisfy them: then every input agrees on each symbol's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from .errors import LoweringError
from .sizes import SizeEnv


@dataclass(frozen=True, slots=True)
class SymbolSource:
    """How a call reads one size symbol: ``kind`` "size" (``inputs[input].size(dim)``),
    "stride" (``inputs[input].stride(dim)``) or "scalar" (``inputs[input]`` is the value)."""

    name: str
    input: int
    kind: str
    dim: int = 0

    def source(self, params: Sequence[str]) -> str:
        """The Python expression reading it, given the wrapper's parameter names."""
        arg = params[self.input]
        if self.kind == "scalar":
            return arg
        return f"{arg}.{self.kind}({self.dim})"

    def read(self, inputs: Sequence[Any]) -> int:
        """The symbol's value in ``inputs`` (the graph's inputs, in order)."""
        value = inputs[self.input]
        if self.kind == "scalar":
            return int(value)
        return int(value.size(self.dim) if self.kind == "size" else value.stride(self.dim))


def find_sources(inputs: Sequence[Any], env: SizeEnv, needed: set[sympy.Symbol]) -> tuple[SymbolSource, ...]:
    """A reading rule for each symbol in ``needed``, from the placeholders' simplified metadata
    (``inputs``: a TensorMeta, a sympy size or None per graph input), in the graph's symbol order."""
    found: dict[sympy.Symbol, SymbolSource] = {}
    for kind in ("size", "stride", "scalar"):
        for i, meta in enumerate(inputs):
            if kind == "scalar":
                if isinstance(meta, sympy.Symbol) and env.is_symbol(meta):
                    found.setdefault(meta, SymbolSource(env.code_name(meta), i, "scalar"))
                continue
            values = getattr(meta, "shape" if kind == "size" else "stride", None)
            for d, v in enumerate(values or ()):
                if isinstance(v, sympy.Symbol) and env.is_symbol(v):
                    found.setdefault(v, SymbolSource(env.code_name(v), i, kind, d))
    missing = sorted(s.name for s in needed if s not in found)
    if missing:
        raise LoweringError(
            f"size symbol(s) {', '.join(missing)} are not a whole dim or stride of any graph input, so the "
            "compiled graph cannot read them at run time: mark the input dims themselves dynamic, or specialize"
        )
    rank = {s: i for i, s in enumerate(env.symbols)}
    return tuple(found[s] for s in sorted(needed, key=lambda s: (rank.get(s, len(rank)), s.name)))
