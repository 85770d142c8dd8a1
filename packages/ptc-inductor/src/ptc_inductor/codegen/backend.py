"""The boundary between the shared pipeline and a kernel backend (C++ here, Triton in part 2).

A backend turns scheduled kernels into callables; the wrapper only needs, per kernel, a
function and the buffers it takes, and whether it wants raw pointers or tensors. Buffers in
``plan.local`` are never allocated: a backend keeps them in registers/locals.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import Config
from ..ir import Buffer
from ..memory import MemoryPlan
from ..scheduler import Schedule


@dataclass(frozen=True, slots=True)
class KernelCall:
    """How the wrapper calls one kernel: ``fn(*args)`` over ``params`` (buffer names)."""

    name: str
    fn: Callable[..., Any]
    params: tuple[str, ...]
    pointers: bool


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
    from .cpp import generate_kernel, generate_source

    kernels = [generate_kernel(k, buffers, sched.accesses, config, plan.local) for k in sched.kernels]
    source = generate_source(kernels)
    if not kernels:
        return BackendOutput({}, source, None)
    library, path = load_library(source, config)
    calls: dict[str, KernelCall] = {}
    for k in kernels:
        fn = getattr(library, k.name)
        fn.argtypes = [ctypes.c_void_p] * len(k.params)
        fn.restype = None
        calls[k.name] = KernelCall(k.name, fn, k.params, True)
    return BackendOutput(calls, source, path)
