"""Where a compiled step's peak GPU memory goes: the tensors alive at the peak, by the line that
allocated them, for ptc and torch.compile side by side (one process each).

    python tools/profile_memory.py resnet50-infer [--impls ptc,torch.compile] [--dtype bfloat16]

Each implementation warms up (compile and three steps), then one step runs under CUDA's
allocator history. The events are replayed to find the moment of the highest allocated total;
the blocks alive then are grouped by the innermost frame that is not torch's own code (for ptc,
the generated wrapper's line; for torch.compile, its output code), largest first. Blocks that
were alive before the step began (weights, inputs, outputs the harness holds) form one row.
"""

from __future__ import annotations

import argparse
import json
import linecache
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402

SKIP = ("/torch/", "/site-packages/", "profile_memory.py", "bench.py", "<frozen", "/lib/python3")


def _site(frames: list[dict[str, Any]]) -> str:
    # The innermost two frames of compiled code (ptc's wrapper and runtime, torch.compile's output
    # code) or of the user's model, so a buffer reads as "this wrapper line, called from there".
    found = []
    for frame in frames:
        name = frame.get("filename", "")
        ours = "torchinductor" in name or "ptc_inductor wrapper" in name or "/ptc" in name
        if not ours and (any(s in name for s in SKIP) or not (name.endswith(".py") or name.startswith("<"))):
            continue
        line = linecache.getline(name, frame.get("line", 0)).strip()
        found.append(f"{Path(name).name}:{frame.get('line')} {frame.get('name')}: {line[:100]}")
        if len(found) == 2:
            break
    return " <- ".join(found) or "(no frame outside torch)"


def worker(workload: str, impl: str, dtype: str) -> dict[str, Any]:
    """Measure one implementation: live blocks at the step's peak, grouped by allocation site."""
    import torch

    device = torch.device("cuda")
    spec, _model, inputs, _reference, compiled = bench.prepare(workload, impl, device, False, dtype)
    for _ in range(4):
        out = bench._step(compiled, inputs, spec.train)
    del out
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    torch.cuda.reset_peak_memory_stats()
    out = bench._step(compiled, inputs, spec.train)  # held through the snapshot, as a caller holds it
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del out
    events = [e for trace in snapshot["device_traces"] for e in trace if e["action"] in ("alloc", "free_requested")]
    live: dict[int, dict[str, Any]] = {}
    total, best, best_live = 0, 0, {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
        elif e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
        if total > best:
            best, best_live = total, dict(live)
    sites: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in best_live.values():
        row = sites[_site(e.get("frames", []))]
        row[0] += e["size"]
        row[1] += 1
    return {
        "workload": workload,
        "impl": impl,
        "held_before_mb": before / 2**20,
        "step_peak_mb": peak / 2**20,
        "step_extra_mb": best / 2**20,
        "sites": sorted(([s, b / 2**20, n] for s, (b, n) in sites.items()), key=lambda r: -r[1])[:25],
    }


def main() -> int:
    """Command-line entry point: one worker process per implementation, then the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("--impls", default="ptc,torch.compile")
    parser.add_argument("--dtype", default="default")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.workload, args.worker, args.dtype)))
        return 0
    for impl in args.impls.split(","):
        proc = subprocess.run([sys.executable, __file__, args.workload, "--worker", impl, "--dtype", args.dtype],
                              capture_output=True, text=True, timeout=600)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if not lines:
            print(f"--- {impl} failed:", *proc.stderr.splitlines()[-12:], sep="\n")
            continue
        r = json.loads(lines[-1])
        print(f"\n## {args.workload} {impl}: held before the step {r['held_before_mb']:.0f} MB, "
              f"step peak {r['step_peak_mb']:.0f} MB, allocated in the step at its peak {r['step_extra_mb']:.0f} MB")
        for site, mb, count in r["sites"]:
            print(f"{mb:9.1f} MB {count:4d}  {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
