"""Debug output: debug_dir files and the output_code log channel, with graph nodes as comments."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from conftest import trace_core

import ptc_inductor

aten = torch.ops.aten


def _fn(x: torch.Tensor) -> torch.Tensor:
    return aten.mul.Tensor(aten.sum.dim_IntList(aten.exp.default(x), [1], True), x)


def test_debug_dir_holds_ir_schedule_and_sources(tmp_path: Path) -> None:
    gm = trace_core(_fn, torch.randn(4, 5))
    ptc_inductor.compile(gm, debug_dir=str(tmp_path))
    files = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(files) == {"ir.txt", "schedule.txt", "kernels.cpp", "wrapper.py"}
    assert "reduction(sum" in files["ir.txt"] and "sum_dim_int_list" in files["ir.txt"]
    assert "kernel0 outer=[4]" in files["schedule.txt"]
    assert 'extern "C" void kernel0' in files["kernels.cpp"] and "def call(" in files["wrapper.py"]


def test_output_code_channel_logs_kernels_with_origin_nodes(caplog: pytest.LogCaptureFixture) -> None:
    gm = trace_core(_fn, torch.randn(4, 5))
    config = ptc_inductor.config_from_env({"PTC_LOGS": "output_code"})
    assert config.output_code
    with caplog.at_level(logging.INFO, logger="ptc.inductor.output_code"):
        ptc_inductor.compile(gm, config=config)
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "ptc.inductor.output_code")
    assert re.search(r"// buf\d+: sum over .* from graph node\(s\) exp_default, sum_dim_int_list", text)
    assert "def call(" in text


def test_config_reads_environment_in_one_place() -> None:
    cfg = ptc_inductor.config_from_env(
        {"PTC_INDUCTOR_CACHE_DIR": "/tmp/x", "PTC_INDUCTOR_FUSE": "0", "PTC_INDUCTOR_CXX": "clang++"}
    )
    assert (cfg.cache_dir, cfg.fuse, cfg.cxx, cfg.output_code) == ("/tmp/x", False, "clang++", False)


def test_fusion_can_be_switched_off() -> None:
    gm = trace_core(_fn, torch.randn(4, 5))
    config = ptc_inductor.config_from_env(fuse=False)
    compiled = ptc_inductor.compile(gm, config=config)
    x = torch.randn(4, 5)
    torch.testing.assert_close(compiled(x), _fn(x))
    assert compiled.kernel_count == 2
