"""ptc-decomp's configuration, read from the environment in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class Config:
    """Options of ``decompose``.

    restride: when a decomposition's result has other strides than the op it replaces, copy it
    into the op's layout so later views and layouts in the graph stay exactly as recorded
    (``PTC_DECOMP_RESTRIDE``, default on).
    check_boundaries: round-trip the input graph through ``ptc_spec.roundtrip`` before
    decomposing (``PTC_CHECK_BOUNDARIES``, default off).
    max_depth: how deeply decompositions may nest before decompose reports a cycle
    (``PTC_DECOMP_MAX_DEPTH``, default 64).
    strict: raise NoDecompositionError/DecompositionError where an op set with fallbacks
    (core/2 on) would let the op run unfused as a fallback call (``PTC_DECOMP_STRICT``,
    default off); op sets without fallbacks always raise.
    """

    restride: bool = True
    check_boundaries: bool = False
    max_depth: int = 64
    strict: bool = False


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in _TRUE


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Return the Config that the environment variables describe."""
    env = os.environ if environ is None else environ
    depth = env.get("PTC_DECOMP_MAX_DEPTH", "").strip()
    return Config(
        restride=_flag(env, "PTC_DECOMP_RESTRIDE", True),
        check_boundaries=_flag(env, "PTC_CHECK_BOUNDARIES", False),
        max_depth=int(depth) if depth else 64,
        strict=_flag(env, "PTC_DECOMP_STRICT", False),
    )
