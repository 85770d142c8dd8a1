"""A whole graph through the Triton backend, run by a small Python step runner.

This is the stand-in for the generated wrapper until it selects backends by device: the same
pipeline (lower -> schedule -> Triton codegen -> compile/launch) with buffers allocated per
step and never reused. Tests and tools/bench_triton.py use it; ``ptc_inductor.compile`` will
not need it once the wrapper launches ``TritonLauncher`` objects itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .codegen.triton import generate_triton_kernel
from .config import Config, config_from_env
from .errors import LoweringError
from .ir import BufferArg, ExternNode
from .lowering import lower_graph
from .scheduler import Kernel, Schedule, schedule
from .triton_kernel import TritonKernel
from .triton_runtime import TritonLauncher, load_launchers, triton_options

log = logging.getLogger("ptc.inductor.triton")


@dataclass(frozen=True)
class TritonGraph:
    """A graph compiled to Triton kernels: call it like the GraphModule."""

    kernels: tuple[TritonKernel, ...]
    launchers: dict[str, TritonLauncher]
    schedule: Schedule
    run: Callable[..., Any]

    def __call__(self, *args: Any) -> Any:
        """Run the graph on ``args`` (its placeholders, in order)."""
        return self.run(*args)

    @property
    def source(self) -> str:
        """Every kernel module's source, in order."""
        return "\n".join(k.source for k in self.kernels)

    @property
    def kernel_count(self) -> int:
        """Number of generated Triton kernels."""
        return len(self.kernels)


def _view(t: torch.Tensor, arg: BufferArg) -> torch.Tensor:
    if tuple(t.shape) == arg.size and t.stride() == arg.stride and arg.offset == 0:
        return t
    return torch.as_strided(t, arg.size, arg.stride, t.storage_offset() + arg.offset)


def _restride(t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def compile_triton_graph(gm: torch.fx.GraphModule, config: Config | None = None, device: torch.device | None = None) -> TritonGraph:
    """Compile a core/1 graph into Triton kernels (compiled ahead, in parallel, when ``device`` is CUDA)."""
    cfg = config if config is not None else config_from_env()
    lowered = lower_graph(gm, cfg)
    if lowered.sizes.symbols:
        raise LoweringError("compile_triton_graph runs graphs of static sizes only: use ptc_inductor.compile(gm) with backend='triton'")
    sched = schedule(lowered.nodes, cfg, lowered.output_buffers)
    # A kernel that writes no element is never generated nor launched (see Kernel.is_empty).
    kernels = tuple(generate_triton_kernel(k, lowered.buffers, sched.accesses, cfg) for k in sched.kernels if not k.is_empty)
    launchers = load_launchers(kernels, triton_options(cfg), device, cfg)
    by_name = {k.name: k for k in kernels}
    log.debug("compiled %d nodes into %d Triton kernels", len(lowered.nodes), len(kernels))

    def render(env: dict[str, torch.Tensor], a: Any) -> Any:
        if isinstance(a, BufferArg):
            return _view(env[a.buffer], a)
        if isinstance(a, (list, tuple)):
            return type(a)(render(env, x) for x in a)
        return a

    def run(*args: Any) -> Any:
        env: dict[str, torch.Tensor] = dict(lowered.constants)
        for name, value in zip(lowered.inputs, args):
            if name:
                lay = lowered.buffers[name].layout
                same = value.stride() == lay.stride or value.numel() <= 1
                env[name] = value if same else _restride(value, lay.size, lay.stride)
        for step in sched.steps:
            if isinstance(step, Kernel):
                for node in step.nodes:
                    for buf in node.outputs:
                        lay = buf.layout
                        if buf.name not in env:
                            env[buf.name] = torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype, device=lay.device)
                if step.is_empty:
                    continue
                k = by_name[step.name]
                launchers[k.name](*[env[p] for p in k.params])
                continue
            assert isinstance(step, ExternNode)
            result = step.op(*render(env, step.args), **{key: render(env, v) for key, v in step.kwargs})
            results = result if step.multi else (result,)
            for out, r in zip(step.outputs, results):
                if out is not None and r is not None:  # None: a result the kernel was not asked for
                    same = r.stride() == out.layout.stride or r.numel() <= 1
                    env[out.name] = r if same else _restride(r, out.layout.size, out.layout.stride)
        outs = [_view(env[o.view.buffer], o.view) if o.view is not None else o.value for o in lowered.outputs]
        return tuple(outs) if lowered.output_is_tuple else outs[0]

    return TritonGraph(kernels, launchers, sched, run)
