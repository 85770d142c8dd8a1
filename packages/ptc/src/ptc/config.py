"""The options of ptc.compile, validated in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import UnknownOptionError

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""Valid values of ``mode`` (None means "default")."""

OPTIONS = ("check_boundaries", "ddp_split", "debug_dir", "partition")
"""Valid keys of ``options``."""


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """What one ptc.compile call asked for.

    mode: one of MODES. check_boundaries: round-trip every graph handed between stages through
    ptc-spec serialization (``PTC_CHECK_BOUNDARIES=1``). debug_dir: where ptc-aot and
    ptc-inductor write graphs and generated code. partition: ptc-aot's partitioner
    (``min_cut`` or ``save_all``). ddp_split: under DistributedDataParallel, compile each
    bucket of parameters as its own graph so gradient all-reduces overlap the backward
    (``PTC_DDP_SPLIT=0`` turns it off; see ptc.distributed).
    """

    mode: str = "default"
    check_boundaries: bool = False
    debug_dir: str | None = None
    partition: str = "min_cut"
    ddp_split: bool = True

    @property
    def cudagraphs(self) -> bool:
        """True when compiled graphs are replayed through CUDA graph trees."""
        return self.mode in ("reduce-overhead", "max-autotune")

    @property
    def autotune(self) -> bool:
        """True when kernels are autotuned over a wide search."""
        return self.mode.startswith("max-autotune")


def make_options(mode: str | None, options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> CompileOptions:
    """Validate ``mode`` and ``options`` and merge them with the environment."""
    env = os.environ if environ is None else environ
    chosen = "default" if mode is None else mode
    if chosen not in MODES:
        raise UnknownOptionError(f"unknown mode {mode!r}: valid modes are {', '.join(MODES)}")
    given = dict(options or {})
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise UnknownOptionError(f"unknown option {', '.join(map(repr, unknown))}: valid options are {', '.join(OPTIONS)}")
    env_check = env.get("PTC_CHECK_BOUNDARIES", "").strip().lower() in ("1", "true", "yes", "on")
    partition = given.get("partition", "min_cut")
    if partition not in ("min_cut", "save_all"):
        raise UnknownOptionError(f"unknown partition {partition!r}: valid partitions are min_cut, save_all")
    return CompileOptions(
        mode=chosen,
        check_boundaries=bool(given.get("check_boundaries", env_check)),
        debug_dir=given.get("debug_dir"),
        partition=partition,
        ddp_split=bool(given.get("ddp_split", env.get("PTC_DDP_SPLIT", "1").strip().lower() not in ("0", "false", "no", "off"))),
    )
