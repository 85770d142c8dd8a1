"""The backends ptc registers under the ``ptc.backends`` entry-point group.

A backend is any callable ``backend(gm, example_inputs) -> callable`` (ptc-capture's
protocol); ``make_backend`` binds one to the options of a ptc.compile call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.fx

from . import distributed, progress
from .config import CompileOptions, make_options
from .pipeline import STATS, Compiled, aot_compile, compile_core, handoff, run_as_is

Backend = Callable[[torch.fx.GraphModule, Sequence[Any]], Compiled]


def _eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions) -> Compiled:
    return handoff(gm, options)


def _aot_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions) -> Compiled:
    return aot_compile(gm, example_inputs, options, run_as_is)


def _inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions) -> Compiled:
    return aot_compile(gm, example_inputs, options, compile_core)


def _cudagraphs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: CompileOptions) -> Compiled:
    import ptc_cudagraphs

    compiled = aot_compile(gm, example_inputs, options, run_as_is)
    return ptc_cudagraphs.cudagraphify(compiled, list(example_inputs))


BACKENDS: dict[str, Callable[[torch.fx.GraphModule, Sequence[Any], CompileOptions], Compiled]] = {
    "eager": _eager,
    "aot_eager": _aot_eager,
    "inductor": _inductor,
    "cudagraphs": _cudagraphs,
}
"""ptc's own backends by name."""


def make_backend(name: str, options: CompileOptions) -> Backend:
    """Return ptc's backend ``name`` bound to ``options``."""
    stage = BACKENDS[name]

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Compiled:
        graphs, kernels = STATS.graphs, STATS.kernels
        with progress.compiling(f"a graph of {len(gm.graph.nodes)} nodes", lambda: (STATS.graphs - graphs, STATS.kernels - kernels)):
            if options.ddp_split and name != "eager":
                split = distributed.compile_for_ddp(gm, example_inputs, lambda piece, examples: stage(piece, examples, options))
                if split is not None:
                    return split
            return stage(gm, example_inputs, options)

    backend.__name__ = name
    return backend


def aot_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Compiled:
    """Entry point ``aot_eager``: capture -> aot, graphs run as they are."""
    return _aot_eager(gm, example_inputs, make_options(None, None))


def inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Compiled:
    """Entry point ``inductor``: capture -> aot -> decomp -> inductor, for training and inference."""
    return _inductor(gm, example_inputs, make_options(None, None))


def cudagraphs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Compiled:
    """Entry point ``cudagraphs``: aot graphs replayed through CUDA graph trees."""
    return _cudagraphs(gm, example_inputs, make_options(None, None))
