"""Building the one launcher for every generated Triton kernel (its source lives in ``runtime/cuda.py``).

Triton builds a C launcher per kernel signature with the system compiler the first time a
kernel loads, serially in the process that launches it. Our kernels all take only pointers
(their block sizes are compile-time constants), so a single launcher serves them all: built
once per machine into the kernel cache, it makes a cold compile load binaries only. The driver
library is opened at run time, so nothing here links against CUDA.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

from .config import Config
from .runtime.cuda import LAUNCHER_NAME, LAUNCHER_SOURCE, MAX_POINTERS

__all__ = ["MAX_POINTERS", "launcher_module"]

log = logging.getLogger("ptc.inductor.triton")

@functools.cache
def launcher_module(config: Config) -> ModuleType | None:
    """The launcher extension (built on first use, then cached on disk), or None where it
    cannot be built or loaded; callers then launch through Triton's own launcher."""
    from .build import load_extension
    from .errors import BuildError

    try:
        return load_extension(LAUNCHER_SOURCE, LAUNCHER_NAME, config)
    except (BuildError, ImportError, OSError) as exc:
        log.warning("ptc-inductor: launching Triton kernels through Triton's launcher: ours did not build (%s)", exc)
        return None
