"""Saved bytes of the min-cut partition against saving every value the backward reads.

Run: ``PYTHONPATH=packages/ptc-spec/src:packages/ptc-aot/src python packages/ptc-aot/benchmarks/bench_partition.py``
(also collected by pytest-benchmark when named explicitly; it times the partitioner itself).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ptc_aot import functionalize, partition, trace_program
from ptc_spec import TensorMeta

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from aot_models import gpt_block, gpt_block_inputs  # noqa: E402

SIZES = [(2, 8, 16), (4, 128, 256), (8, 512, 768)]


def saved_bytes(batch: int, seq: int, dim: int) -> dict[str, int]:
    """Bytes saved for the backward of one GPT block by each partition mode."""
    args = gpt_block_inputs(torch.Generator().manual_seed(0), batch, seq, dim)
    program = trace_program(gpt_block, [TensorMeta.from_tensor(a) for a in args], joint=True)
    joint = functionalize(program.gm)
    return {mode: partition(joint, len(args), mode).saved_bytes for mode in ("min_cut", "save_all")}


def test_partition_gpt_block(benchmark: Any) -> None:
    args = gpt_block_inputs(torch.Generator().manual_seed(0), 4, 128, 256)
    program = trace_program(gpt_block, [TensorMeta.from_tensor(a) for a in args], joint=True)
    joint = functionalize(program.gm)
    benchmark(partition, joint, len(args), "min_cut")


if __name__ == "__main__":
    for batch, seq, dim in SIZES:
        found = saved_bytes(batch, seq, dim)
        ratio = found["min_cut"] / found["save_all"]
        sys.stdout.write(
            f"gpt_block batch={batch} seq={seq} dim={dim}: min_cut {found['min_cut']} B, save_all {found['save_all']} B, ratio {ratio:.3f}\n"
        )
