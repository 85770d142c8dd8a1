"""ptc-spec's configuration, read from the environment in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    """Options of ptc-spec.

    check_boundaries: every stage round-trips the graphs it receives through the serialized
    form and checks that nothing changed (``PTC_CHECK_BOUNDARIES=1``).
    """

    check_boundaries: bool = False


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Return the Config that the environment variables describe."""
    env = os.environ if environ is None else environ
    flag = env.get("PTC_CHECK_BOUNDARIES", "").strip().lower()
    return Config(check_boundaries=flag in ("1", "true", "yes", "on"))
