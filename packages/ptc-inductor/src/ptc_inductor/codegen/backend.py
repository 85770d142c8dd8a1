"""The boundary between the shared pipeline and the kernel backends (C++/OpenMP and Triton).

A backend turns scheduled kernels into callables; the wrapper only needs, per kernel, a
function and the buffers it takes, and whether it wants raw pointers or tensors. Buffers in
``plan.local`` are never allocated: a backend keeps them in registers/locals.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Protocol

import torch

from ..compiled import KernelCall
from ..config import Config, triton_device
from ..ir import Buffer
from ..memory import MemoryPlan
from ..scheduler import Kernel, Schedule


@dataclass(frozen=True, slots=True)
class BackendOutput:
    """A backend's result: a call per kernel, the source for humans, and where it was built."""

    calls: dict[str, KernelCall]
    source: str
    artifact: str | None


class Backend(Protocol):
    """Generates and builds the kernels of a schedule."""

    def __call__(self, sched: Schedule, plan: MemoryPlan, buffers: dict[str, Buffer], config: Config) -> BackendOutput:
        """Generate, build and load every kernel of ``sched``."""
        ...


def cpp_backend(sched: Schedule, plan: MemoryPlan, buffers: dict[str, Buffer], config: Config) -> BackendOutput:
    """The C++/OpenMP backend: one translation unit per graph, built with g++, called through ctypes."""
    from ..build import load_library
    from .cpp_kernel import generate_kernel, generate_source
    from .cpp_prelude import PRELUDE

    kernels = [generate_kernel(k, buffers, sched.accesses, config, plan.local, plan.aliased) for k in sched.kernels]
    source = generate_source(kernels)
    if not kernels:
        return BackendOutput({}, source, None)
    library, path = load_library(source, config, header=PRELUDE)
    calls: dict[str, KernelCall] = {}
    for k in kernels:
        fn = getattr(library, k.name)
        # Sizes (int64_t) go through ctypes as pointer-sized integers: ctypes converts those
        # about twice as fast as c_int64, and an LP64 ABI passes both alike (the generated
        # source asserts the sizes match).
        fn.argtypes = [ctypes.c_void_p] * (len(k.params) + len(k.sizes))
        fn.restype = None
        calls[k.name] = KernelCall(k.name, fn, k.params, True, k.sizes)
    return BackendOutput(calls, source, path)


def kernel_device(kernel: Kernel) -> torch.device:
    """The device a kernel runs on: that of the buffers it writes."""
    return kernel.nodes[0].outputs[0].layout.device


def uses_triton(kernel: Kernel, config: Config) -> bool:
    """True when ``config`` sends ``kernel`` to the Triton backend."""
    return triton_device(config, kernel_device(kernel))


def triton_backend(sched: Schedule, plan: MemoryPlan, buffers: dict[str, Buffer], config: Config) -> BackendOutput:
    """The Triton backend: one module per kernel, compiled (in parallel on a GPU) and launched with tensors."""
    from ..triton_runtime import load_launchers, triton_options
    from .triton import generate_triton_kernel

    kernels = [generate_triton_kernel(k, buffers, sched.accesses, config, plan.local) for k in sched.kernels]
    if not kernels:
        return BackendOutput({}, "", None)
    launchers = load_launchers(kernels, triton_options(config), kernel_device(sched.kernels[0]), config)
    calls = {k.name: KernelCall(k.name, launchers[k.name], k.params, False, k.sizes) for k in kernels}
    return BackendOutput(calls, "\n\n".join(k.source for k in kernels), None)


def _only(sched: Schedule, names: set[str]) -> Schedule:
    steps = tuple(s for s in sched.steps if not isinstance(s, Kernel) or s.name in names)
    return dataclasses.replace(sched, steps=steps)


def auto_backend(sched: Schedule, plan: MemoryPlan, buffers: dict[str, Buffer], config: Config) -> BackendOutput:
    """Per kernel, C++ or Triton as ``config.backend`` chooses; a graph may mix devices."""
    triton_names = {k.name for k in sched.kernels if uses_triton(k, config)}
    cpp_names = {k.name for k in sched.kernels} - triton_names
    parts = []
    if cpp_names:
        parts.append(cpp_backend(_only(sched, cpp_names), plan, buffers, config))
    if triton_names:
        parts.append(triton_backend(_only(sched, triton_names), plan, buffers, config))
    if len(parts) == 1:
        return parts[0]
    calls = {name: call for part in parts for name, call in part.calls.items()}
    return BackendOutput(calls, "\n\n".join(p.source for p in parts), next((p.artifact for p in parts if p.artifact), None))
