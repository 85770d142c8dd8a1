"""Configuration from the environment."""

from __future__ import annotations

import pytest

from ptc_aot import Config, config_from_env


def test_environment_maps_onto_config() -> None:
    config = config_from_env({"PTC_AOT_PARTITION": "save_all", "PTC_AOT_DUMP_DIR": "/tmp/x", "PTC_CHECK_BOUNDARIES": "1"})
    assert config == Config(partition="save_all", dump_dir="/tmp/x", check_boundaries=True)
    assert config_from_env({}) == Config()


def test_unknown_partition_is_refused() -> None:
    with pytest.raises(ValueError, match="partition must be one of"):
        Config(partition="greedy")
