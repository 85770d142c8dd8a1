"""What a compiled kernel is tied to: the CPU model (``-march=native`` code) and the GPU architecture."""

from __future__ import annotations

import functools
import hashlib
import platform


@functools.cache
def cpu_id() -> str:
    """A short digest of this CPU's model and feature flags: C++ kernels built with
    ``-march=native`` are only valid on a CPU with the same one."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    model += line
    except OSError:
        model = platform.processor()
    return hashlib.sha256((platform.machine() + model).encode()).hexdigest()[:16]
