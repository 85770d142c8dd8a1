"""ptc-aot's configuration, read from the environment in one place."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch.fx

PARTITIONS = ("min_cut", "save_all")


@dataclass(frozen=True, slots=True)
class JointRewrite:
    """A rewrite of the functional joint graph before it is partitioned, e.g. decomposing ops
    whose results the backward could recompute from a few saved statistics.

    ``rewrite`` returns a graph with the same placeholders and outputs, every node carrying its
    TensorMeta; ``name`` identifies what it does, for the program cache's keys.
    """

    name: str
    rewrite: Callable[[torch.fx.GraphModule], torch.fx.GraphModule]


@dataclass(frozen=True, slots=True)
class Config:
    """Options of ptc-aot.

    partition: ``"min_cut"`` (save the fewest bytes, recompute cheap ops in the backward) or
    ``"save_all"`` (save every forward value the backward reads; the baseline).
    dump_dir: directory where the joint, forward, backward and inference graphs are written.
    check_boundaries: round-trip every graph handed to a compiler through ptc-spec's format.
    joint_rewrite: applied to training programs' joint graphs before partitioning (see ``JointRewrite``).
    """

    partition: str = "min_cut"
    dump_dir: str | None = None
    check_boundaries: bool = False
    joint_rewrite: JointRewrite | None = None

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {self.partition!r}")


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Return the Config that ``PTC_AOT_PARTITION``, ``PTC_AOT_DUMP_DIR`` and ``PTC_CHECK_BOUNDARIES`` describe."""
    env = os.environ if environ is None else environ
    return Config(
        partition=env.get("PTC_AOT_PARTITION", "min_cut") or "min_cut",
        dump_dir=env.get("PTC_AOT_DUMP_DIR") or None,
        check_boundaries=_flag(env.get("PTC_CHECK_BOUNDARIES", "")),
    )
