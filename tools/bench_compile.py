"""Cold and warm first-call time of ptc and torch.compile, side by side, one process per cell.

    python tools/bench_compile.py --workloads gpt2-infer,gpt2-train,bert-infer --device cuda
    python tools/bench_compile.py --workloads gpt-mini-infer --small          # this CPU

For each (workload, compiler) a fresh cache directory is made. The cold cell is a new process
over that empty directory: its first call (capture, every compile stage, kernel builds, the
run itself) is timed. The warm cell is another new process over the directory the cold one
filled: what a user's second run of the same program pays. torch.compile keeps its FX graph
and AOTAutograd caches on (``TORCHINDUCTOR_FX_GRAPH_CACHE=1``, ``TORCHINDUCTOR_AUTOGRAD_CACHE=1``)
and its Triton cache in the same directory; ptc keeps every cache under ``PTC_CACHE_DIR``.
Process start-up and model building are not timed; the first call's result is checked
against eager's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("torch.compile", "ptc")


def _environment(impl: str, cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    if impl == "ptc":
        env["PTC_CACHE_DIR"] = cache
        env.pop("PTC_INDUCTOR_CACHE_DIR", None)
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
        env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
        env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    return env


def run_worker(workload: str, impl: str, device_name: str, small: bool, dtype: str) -> dict[str, Any]:
    """Time one first call in this process (the parent set up its caches)."""
    sys.path[:0] = [str(ROOT / "tools")]
    import torch
    from bench import _max_rel_error, _step, _sync, prepare

    device = torch.device(device_name)
    torch.manual_seed(0)
    spec, _, inputs, reference, compiled = prepare(workload, impl, device, small, dtype)
    _sync(device)
    start = time.perf_counter()
    first = _step(compiled, inputs, spec.train)
    _sync(device)
    seconds = time.perf_counter() - start
    return {"workload": workload, "impl": impl, "first_call_s": seconds, "max_rel_error": _max_rel_error(first, reference)}


def _cell(workload: str, impl: str, cache: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", workload, impl, "--device", args.device, "--dtype", args.dtype]
    if args.small:
        cmd.append("--small")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=_environment(impl, cache))
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    tail = proc.stderr.strip().splitlines()[-15:]
    print(f"--- {workload} {impl} failed; stderr tail:", *tail, sep="\n", file=sys.stderr)
    return {"error": (tail or ["no output"])[-1][:200]}


def _seconds(cells: dict[str, Any], start: str) -> str:
    return f"{cells[start]['first_call_s']:.2f}" if "first_call_s" in cells.get(start, {}) else "—"


def _ratio(ptc: dict[str, Any], tc: dict[str, Any], start: str) -> str:
    try:
        return f"{ptc[start]['first_call_s'] / tc[start]['first_call_s']:.2f}x"
    except (KeyError, ZeroDivisionError):
        return "—"


def markdown(rows: list[dict[str, Any]]) -> str:
    """One line per workload: cold and warm first calls of both compilers and ptc's ratios."""
    lines = [
        "| workload | tc cold s | ptc cold s | ptc/tc cold | tc warm s | ptc warm s | ptc/tc warm | ptc max rel err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        tc, ptc = row.get("torch.compile", {}), row.get("ptc", {})
        err = ptc.get("cold", {}).get("max_rel_error")
        lines.append(f"| {row['workload']} | {_seconds(tc, 'cold')} | {_seconds(ptc, 'cold')} | {_ratio(ptc, tc, 'cold')} | "
                     f"{_seconds(tc, 'warm')} | {_seconds(ptc, 'warm')} | {_ratio(ptc, tc, 'warm')} | {'—' if err is None else f'{err:.1e}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    sys.path[:0] = [str(ROOT / "tools")]
    from bench import parse_common, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args = parse_common(parser, argv, "gpt2-infer,gpt2-train", IMPLS)
    if args.worker:
        print(json.dumps(run_worker(args.worker[0], args.worker[1], args.device, args.small, args.dtype)))
        return 0
    rows = []
    for workload in args.workloads.split(","):
        row: dict[str, Any] = {"workload": workload}
        for impl in args.impls.split(","):
            cache = tempfile.mkdtemp(prefix="ptc-bench-compile-")
            try:
                row[impl] = {"cold": _cell(workload, impl, cache, args), "warm": _cell(workload, impl, cache, args)}
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            print(json.dumps({"workload": workload, "impl": impl, **row[impl]}), file=sys.stderr, flush=True)
        rows.append(row)
    write_results(args, markdown(rows), rows, "bench_compile.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
