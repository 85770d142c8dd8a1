"""The process-wide table of engines (one tree and pool per device) and its operations."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence

import torch

from ptc_cudagraphs.config import Config, config_from_env
from ptc_cudagraphs.engine import Engine, FunctionState
from ptc_cudagraphs.errors import CaptureError
from ptc_cudagraphs.recording import FlatFn, Recording
from ptc_cudagraphs.stats import CudagraphStats, merge

# The only process-wide mutable state of the package: device -> engine.
_ENGINES: dict[torch.device, Engine] = {}
_FUNCTIONS: weakref.WeakSet[FunctionState] = weakref.WeakSet()


class EagerOnlyRecorder:
    """Recorder of a device that has no CUDA graphs: every callable there runs eagerly."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def warmup(self, fn: FlatFn, args: Sequence[object]) -> tuple[list[object], str | None]:
        """Run fn as is."""
        return fn(*args), None

    def record(
        self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...], grad: bool
    ) -> Recording:
        """Refuse: there is nothing to record into."""
        raise CaptureError(f"{self.device} has no CUDA graphs")

    def reset(self) -> None:
        """Nothing to forget."""


def engine_for(device: torch.device, config: Config | None = None) -> Engine:
    """Return the engine of device, creating it (with config or the environment's) once."""
    engine = _ENGINES.get(device)
    if engine is None:
        if device.type == "cuda":
            from ptc_cudagraphs.cuda_recording import CudaRecorder

            recorder: object = CudaRecorder(device)
        else:
            recorder = EagerOnlyRecorder(device)
        engine = Engine(recorder, config or config_from_env())  # type: ignore[arg-type]
        _ENGINES[device] = engine
    return engine


def register(state: FunctionState) -> None:
    """Remember state so that reset() can clear its recorded signatures."""
    _FUNCTIONS.add(state)


def mark_step_begin() -> None:
    """Start a new generation on every device at the next call: earlier outputs may be reused."""
    for engine in _ENGINES.values():
        engine.mark_step_begin()


def reset() -> None:
    """Drop every recording, memory pool and statistic; held outputs count as overwritten."""
    for engine in _ENGINES.values():
        engine.reset()
    for state in list(_FUNCTIONS):
        state.keys.clear()
        state.eager_reason = None
    # Nodes point at parents and children, so the old trees are freed by the cycle collector.
    # Without engines there is no tree to free, and a collection walks the whole heap (0.2 to
    # 0.4 s a call in a process holding torch's OpInfo database).
    if _ENGINES:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def stats() -> CudagraphStats:
    """Return recordings, replays, fallbacks (with reasons) and pool bytes of all devices."""
    return merge([engine.stats.snapshot() for engine in _ENGINES.values()])


def dump_tree() -> str:
    """Return a readable dump of every device's tree."""
    parts = []
    for device, engine in _ENGINES.items():
        parts.append(f"[{device}] " + engine.tree.dump())
    return "\n".join(parts) if parts else "(no trees)"
