"""Compile a graph with symbolic sizes once, then run it at many sizes against eager.

Graphs are traced with ``ptc_spec.trace(..., shape_env=env)`` over ``dynamic_meta`` inputs (the
sizes of the example are the symbols' hints). Each run picks values for the symbols, checks
that the graph's guards admit them (the compiled graph does not check guards: capture does),
builds inputs of those sizes and compares the compiled graph with the GraphModule run eagerly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sympy
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import ptc_inductor  # noqa: E402
import ptc_spec  # noqa: E402
from ptc_inductor.config import config_from_env  # noqa: E402
from ptc_spec import SymbolEnv, TensorMeta, dynamic_meta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1"))]

Spec = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
"""An input: its example shape (the hints), the dims made dynamic, its dtype."""


def D(shape: tuple[int, ...], dims: tuple[int, ...] = (), dtype: torch.dtype = torch.float32) -> Spec:
    """An input spec (see ``Spec``)."""
    return (shape, dims, dtype)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """Fused bf16 chains stay in float32 where eager rounds after each op."""
    return {"rtol": 4e-2, "atol": 4e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}


@dataclass
class Dynamic:
    """A graph traced once with symbolic sizes and compiled once."""

    gm: torch.fx.GraphModule
    compiled: ptc_inductor.CompiledGraph
    env: SymbolEnv
    metas: list[TensorMeta]

    def symbol(self, name: str) -> sympy.Symbol:
        return self.env.symbol(name)

    def inputs(self, values: Mapping[str, int], make: Callable[[int, TensorMeta, dict[sympy.Symbol, int]], torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Inputs with each symbol at ``values`` (by name); ``make`` builds special ones (indices)."""
        hints = {self.env.symbol(k): v for k, v in values.items()}
        out = []
        for i, meta in enumerate(self.metas):
            made = make(i, meta, hints) if make is not None else None
            out.append(made if made is not None else meta.example(hints=hints, seed=i))
        return out

    def run(self, values: Mapping[str, int], *, make: Any = None, **tol: Any) -> Any:
        """Check the guards admit ``values``, then compare the compiled graph with eager there."""
        args = self.inputs(values, make)
        read = self.compiled.symbol_values(*args)
        assert read == {k: v for k, v in values.items() if k in read}, (read, values)
        assert self.env.guards_hold({**values, **read}), (values, self.env.guards)
        return compare_with_eager(self.compiled, self.gm, *args, **tol)

    def run_all(self, sizes: Sequence[Mapping[str, int]], *, make: Any = None, **tol: Any) -> None:
        """``run`` at every entry of ``sizes``; no size may compile anything new."""
        compiles = ptc_inductor.build_stats.compiles
        for values in sizes:
            self.run(values, make=make, **tol)
        assert ptc_inductor.build_stats.compiles == compiles, "a call compiled a new library"


def compile_dynamic(
    fn: Callable[..., Any], *specs: Spec, backend: str = "cpp", dialect: str = "core/1", builder: Any = None
) -> Dynamic:
    """Trace ``fn`` once over ``specs`` (the dims they name symbolic) and compile it once."""
    if backend == "triton":
        pytest.importorskip("triton")
    env = SymbolEnv()
    metas = [dynamic_meta(TensorMeta.of(shape, dtype), dims, env) for shape, dims, dtype in specs]
    gm = builder(env, metas) if builder is not None else ptc_spec.trace(fn, *metas, shape_env=env, dialect=dialect)
    # The graph file boundary: what ptc-inductor receives has been through dumps/loads.
    gm = ptc_spec.roundtrip(gm)
    shape_env = ptc_spec.shape_env_of(gm)
    assert shape_env is not None
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend=backend))
    return Dynamic(gm, compiled, shape_env, metas)


def sizes_of(**ranges: Sequence[int]) -> list[dict[str, int]]:
    """One size assignment per position: ``sizes_of(s0=[6, 9], s1=[8, 2])`` -> [{s0: 6, s1: 8}, {s0: 9, s1: 2}]."""
    names = list(ranges)
    count = len(next(iter(ranges.values())))
    return [{n: ranges[n][i] for n in names} for i in range(count)]
