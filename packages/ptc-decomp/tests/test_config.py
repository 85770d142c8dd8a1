"""Config maps the environment onto its fields."""

from __future__ import annotations

from ptc_decomp import Config, config_from_env


def test_defaults() -> None:
    assert config_from_env({}) == Config(restride=True, check_boundaries=False, max_depth=64, strict=False)


def test_environment_variables() -> None:
    env = {"PTC_DECOMP_RESTRIDE": "0", "PTC_CHECK_BOUNDARIES": "1", "PTC_DECOMP_MAX_DEPTH": "8", "PTC_DECOMP_STRICT": "1"}
    assert config_from_env(env) == Config(restride=False, check_boundaries=True, max_depth=8, strict=True)
