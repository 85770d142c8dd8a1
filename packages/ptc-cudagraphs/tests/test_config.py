from __future__ import annotations

from ptc_cudagraphs.config import Config, config_from_env


def test_env_overrides_fields() -> None:
    cfg = config_from_env({"PTC_CUDAGRAPHS_MAX_RECORDINGS": "3",
                           "PTC_CUDAGRAPHS_AUTO_GENERATIONS": "0",
                           "PTC_CUDAGRAPHS_WARMUP_RUNS": "2"})
    assert cfg == Config(warmup_runs=2, max_recordings_per_function=3, auto_generations=False)


def test_empty_env_gives_defaults() -> None:
    assert config_from_env({}) == Config()
    assert Config().max_recordings_per_function == 8
