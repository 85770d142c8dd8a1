"""Launching an artifact's Triton kernels from their saved binaries, with the launch config fixed.

A live compile's launcher (``ptc_inductor.triton_runtime.TritonLauncher``) may still choose a
config or compile a variant on first use; an artifact's may not (there is no compiler at load),
so each kernel carries the binaries of its chosen config: one for 16-byte aligned pointers and
one that makes no alignment assumption, which serves any other call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .cuda import KernelBinary, LoadedKernel, load_binary, raw_stream


class BinaryLauncher:
    """Runs one kernel: ``launcher(*tensors, *sizes)``, like the compiled graph's own launchers."""

    __slots__ = ("name", "_binaries", "_loaded", "_tensors", "_xblock", "_static_xnumel", "_xnumel", "_launch", "_unaligned")

    def __init__(
        self, name: str, binaries: Mapping[tuple[bool, ...], KernelBinary], tensors: int, xblock: int,
        xnumel: int | Callable[..., int], launch: Callable[..., Any],
    ) -> None:  # fmt: skip
        self.name = name
        self._binaries = dict(binaries)
        self._loaded: dict[tuple[bool, ...], LoadedKernel] = {}
        self._tensors = tensors
        self._xblock = xblock
        self._static_xnumel = xnumel if isinstance(xnumel, int) else 0
        self._xnumel = None if isinstance(xnumel, int) else xnumel
        self._launch = launch
        self._unaligned = tuple(False for _ in range(tensors))

    def __call__(self, *args: Any) -> None:
        xnumel = self._static_xnumel if self._xnumel is None else self._xnumel(*args[self._tensors :])
        if xnumel <= 0:
            return  # CUDA refuses an empty grid; the kernel writes nothing
        tensors = args[: self._tensors]
        ptrs = [t.data_ptr() for t in tensors]
        aligned = tuple(p % 16 == 0 for p in ptrs)
        kernel = self._loaded.get(aligned)
        if kernel is None:
            kernel = self._load(aligned, tensors[0].device)
        stream = raw_stream(tensors[0].get_device())
        self._launch(kernel.function, -(-xnumel // self._xblock), kernel.threads, kernel.shared, stream, *ptrs, *args[self._tensors :])

    def _load(self, aligned: tuple[bool, ...], device: torch.device) -> LoadedKernel:
        # The binary compiled for exactly this alignment, else the one assuming none (valid for all).
        binary = self._binaries.get(aligned) or self._binaries[self._unaligned]
        kernel = load_binary(binary, device)
        self._loaded[aligned] = kernel
        return kernel


def size_function(sizes: tuple[str, ...], source: str) -> Callable[..., int]:
    """The grid's point count as a function of the kernel's size arguments (``source``: a Python
    expression over them that ptc-inductor generated)."""
    fn: Callable[..., int] = eval(f"lambda {', '.join(sizes)}: {source}", {"max": max, "min": min, "__builtins__": {}})
    return fn
