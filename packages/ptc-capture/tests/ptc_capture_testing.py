"""Shared test support of ptc_capture: a counting backend and the frame-hook skip marker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

from ptc_capture import framehook

needs_hook = pytest.mark.skipif(
    not framehook.available, reason=f"frame hook unavailable: {framehook.unavailable_reason}"
)


class CountingBackend:
    """A backend that runs graphs eagerly and remembers every graph it was given."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    @property
    def count(self) -> int:
        return len(self.graphs)

    def ops(self, index: int = -1) -> list[str]:
        return [
            str(n.target) if n.op == "call_method" else getattr(n.target, "__name__", str(n.target))
            for n in self.graphs[index].graph.nodes
            if n.op in ("call_function", "call_method")
        ]


