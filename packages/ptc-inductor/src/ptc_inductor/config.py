"""Configuration of ptc-inductor: one frozen dataclass, filled from the environment in one place."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BACKENDS = ("auto", "cpp", "triton")
"""``auto``: C++ for kernels over CPU tensors, Triton for CUDA tensors; the others force one."""

AUTOTUNE_MODES = ("none", "default", "max-autotune")
"""How widely Triton launch configurations are searched at first call."""

LAYOUT_OPT_MODES = ("auto", "on", "off")
"""Channels-last activations in convolution graphs (``lowering/layout.py``): ``auto`` decides per
graph (CUDA graphs whose convolutions matter), ``on`` forces it wherever a graph has an eligible
convolution (CPU included), ``off`` keeps eager's strides everywhere."""


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "ptc", "inductor")


@dataclass(frozen=True, slots=True)
class Config:
    """Options of one compilation; see the README for each field."""

    cache_dir: str = dataclasses.field(default_factory=_default_cache_dir)
    cxx: str = "g++"
    # -fno-trapping-math: without it gcc will not if-convert a float compare on AVX2 (the compare
    # could raise an FP exception nobody reads), so any loop with a select, ptc_expf's range
    # checks included, stays scalar on CPUs without AVX-512 masks.
    cxx_flags: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")
    # The generated C++'s common prelude is precompiled once (gcc only): a build then takes about
    # a third of the time, as parsing the standard headers was two thirds of it.
    cxx_pch: bool = True
    output_code: bool = False
    debug_dir: str | None = None
    fuse: bool = True
    reuse_buffers: bool = True
    inline_max_ops: int = 64
    parallel_min_work: int = 32768
    check_extern_strides: bool = True
    check_input_strides: bool = True
    recycle_outputs: bool = True
    backend: str = "auto"
    triton_autotune: str = "default"
    layout_opt: str = "auto"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.triton_autotune not in AUTOTUNE_MODES:
            raise ValueError(f"triton_autotune {self.triton_autotune!r} is not one of {', '.join(AUTOTUNE_MODES)}")
        if self.layout_opt not in LAYOUT_OPT_MODES:
            raise ValueError(f"layout_opt {self.layout_opt!r} is not one of {', '.join(LAYOUT_OPT_MODES)}")

    def replace(self, **changes: object) -> Config:
        """Return a copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def triton_device(config: Config, device: torch.device) -> bool:
    """True when ``config`` sends kernels over ``device``'s tensors to the Triton backend."""
    if config.backend == "auto":
        return device.type == "cuda"
    return config.backend == "triton"


def config_from_env(env: Mapping[str, str] | None = None, **overrides: object) -> Config:
    """Return a Config from environment variables (the only place they are read), then overrides."""
    source = os.environ if env is None else env
    fields: dict[str, object] = {}
    if "PTC_INDUCTOR_CACHE_DIR" in source:
        fields["cache_dir"] = source["PTC_INDUCTOR_CACHE_DIR"]
    if "PTC_INDUCTOR_CXX" in source:
        fields["cxx"] = source["PTC_INDUCTOR_CXX"]
    channels = {c.strip() for c in source.get("PTC_LOGS", "").split(",") if c.strip()}
    if "output_code" in channels or "+output_code" in channels:
        fields["output_code"] = True
    if "PTC_INDUCTOR_DEBUG_DIR" in source:
        fields["debug_dir"] = source["PTC_INDUCTOR_DEBUG_DIR"]
    if source.get("PTC_INDUCTOR_CXX_PCH", "1") == "0":
        fields["cxx_pch"] = False
    if source.get("PTC_INDUCTOR_FUSE", "1") == "0":
        fields["fuse"] = False
    if source.get("PTC_INDUCTOR_REUSE_BUFFERS", "1") == "0":
        fields["reuse_buffers"] = False
    if source.get("PTC_INDUCTOR_RECYCLE_OUTPUTS", "1") == "0":
        fields["recycle_outputs"] = False
    if "PTC_INDUCTOR_BACKEND" in source:
        fields["backend"] = source["PTC_INDUCTOR_BACKEND"]
    if "PTC_INDUCTOR_TRITON_AUTOTUNE" in source:
        fields["triton_autotune"] = source["PTC_INDUCTOR_TRITON_AUTOTUNE"]
    if "PTC_INDUCTOR_LAYOUT_OPT" in source:
        fields["layout_opt"] = source["PTC_INDUCTOR_LAYOUT_OPT"]
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return Config(**fields)  # type: ignore[arg-type]
