"""The package's one configuration object and its environment mapping."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Config:
    """Options of cudagraphify; every field is documented in the README."""

    # Eager runs (on a side stream) before a path is recorded; the last one's call also records.
    warmup_runs: int = 1
    # Distinct input signatures (shapes, dtypes, static addresses) recorded per callable
    # before further new signatures run eagerly.
    max_recordings_per_function: int = 8
    # Start a new generation automatically when a callable already on the current path is
    # called again or a backward finished; False leaves that to mark_step_begin() alone.
    auto_generations: bool = True
    # Compare non-static inputs' version counters across warm-up to detect mutation.
    check_input_mutation: bool = True
    # Once the steps that recorded are over, give the device's unused cached memory back: the
    # warm-ups ran on the side stream, and blocks cached for that stream serve nothing else.
    release_warmup_memory: bool = True


_ENV_FIELDS: dict[str, tuple[str, type]] = {
    "PTC_CUDAGRAPHS_WARMUP_RUNS": ("warmup_runs", int),
    "PTC_CUDAGRAPHS_MAX_RECORDINGS": ("max_recordings_per_function", int),
    "PTC_CUDAGRAPHS_AUTO_GENERATIONS": ("auto_generations", bool),
    "PTC_CUDAGRAPHS_CHECK_MUTATION": ("check_input_mutation", bool),
    "PTC_CUDAGRAPHS_RELEASE_WARMUP_MEMORY": ("release_warmup_memory", bool),
}


def _parse(raw: str, kind: type) -> object:
    if kind is bool:
        return raw.strip().lower() not in ("0", "false", "no", "off", "")
    return kind(raw)


def config_from_env(env: Mapping[str, str] | None = None, base: Config | None = None) -> Config:
    """Return base (default Config()) with fields overridden by PTC_CUDAGRAPHS_* variables."""
    source = os.environ if env is None else env
    changes: dict[str, object] = {}
    for var, (field, kind) in _ENV_FIELDS.items():
        if var in source:
            changes[field] = _parse(source[var], kind)
    return replace(base or Config(), **changes)  # type: ignore[arg-type]
