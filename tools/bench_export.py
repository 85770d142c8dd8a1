"""Ahead-of-time artifacts: load + first call and steady-state time of a ptc artifact, beside the
live ``ptc.compile``d model, torch's AOTInductor package and eager, one fresh process per cell.

    python tools/bench_export.py --workloads gpt-mini-infer,layernorm-residual --small   # this CPU
    python tools/bench_export.py --workloads gpt-mini-infer --device cuda

The parent builds each workload (``tools/bench.py``'s), writes the ptc artifact
(``ptc.export`` + ``ptc.aot_compile``) and the AOTInductor package
(``torch.export`` + ``torch._inductor.aoti_compile_and_package``; torch internals are used here
only, as the peer measured against), timing both compiles. Each cell is then a new process that
rebuilds the inputs, and times, after ``import torch``: importing the loader ("import"), then
loading and the first call ("load+first"); then the median of ``--steps`` calls ("steady"). The live cells
(``ptc``, ``eager``) time their first call too (for ``ptc`` that is the whole compile).

A process's steady time on a small CPU varies by up to ~1.5x from one process to the next
(where its buffers land, which core its OpenMP threads share): each cell runs in ``--repeats``
processes, taken in turns across cells, and every number is the median over them. "steady /
live ptc" is a time ratio: below 1.00x the cell is faster than the live ``ptc.compile``d model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), *(str(p) for p in sorted(ROOT.glob("packages/*/src")))]
CELLS = ("ptc-artifact", "aoti", "ptc", "eager")


def _build(workload: str, device: str, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import bench
    import torch

    model, inputs = bench.WORKLOADS[workload].build(torch.device(device), small)
    if isinstance(model, torch.nn.Module):
        model.eval()
    return model, inputs


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def child(cell: str, workload: str, device: str, small: bool, steps: int, path: str) -> dict[str, Any]:
    """One cell, in its own process: load + first call, then the steady state."""
    import torch

    model, inputs = _build(workload, device, small)
    with torch.no_grad():
        expected = model(*inputs)
    start = time.perf_counter()
    if cell == "ptc-artifact":
        import ptc_inductor.runtime

        loaded = time.perf_counter()
        fn: Any = ptc_inductor.runtime.load(path)
    elif cell == "aoti":
        import torch._inductor

        loaded = time.perf_counter()
        fn = torch._inductor.aoti_load_package(path)
    elif cell == "ptc":
        import ptc

        loaded = time.perf_counter()
        fn = ptc.compile(model)
    else:
        loaded = time.perf_counter()
        fn = model
    imported = loaded - start
    start = loaded
    with torch.no_grad():
        out = fn(*inputs)
        _sync(device)
        first = time.perf_counter() - start
        for _ in range(3):
            fn(*inputs)
        times = []
        for _ in range(steps):
            _sync(device)
            t0 = time.perf_counter()
            fn(*inputs)
            _sync(device)
            times.append(time.perf_counter() - t0)
    got = out[0] if isinstance(out, (tuple, list)) else out
    want = expected[0] if isinstance(expected, (tuple, list)) else expected
    error = float(((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12)).item())
    return {"cell": cell, "import_s": imported, "first_s": first, "steady_us": statistics.median(times) * 1e6, "max_rel_error": error}


class _AsModule:
    """A function as the nn.Module torch.export requires (built lazily: torch is imported late)."""

    def __new__(cls, fn: Any) -> Any:
        import torch

        class Wrapped(torch.nn.Module):
            def forward(self, *args: Any) -> Any:
                return fn(*args)

        return Wrapped()


def _compile_artifacts(workload: str, device: str, small: bool, directory: str) -> dict[str, Any]:
    import torch

    import ptc

    model, inputs = _build(workload, device, small)
    found: dict[str, Any] = {}
    start = time.perf_counter()
    found["ptc-artifact"] = ptc.aot_compile(ptc.export(model, inputs), os.path.join(directory, "ptc"))
    found["ptc-artifact_compile_s"] = time.perf_counter() - start
    start = time.perf_counter()
    try:
        import torch._inductor

        program = torch.export.export(model if isinstance(model, torch.nn.Module) else _AsModule(model), inputs)
        found["aoti"] = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(directory, "model.pt2"))
    except Exception as exc:  # AOTInductor unavailable or failing on this model: report, keep the rest
        found["aoti_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    found["aoti_compile_s"] = time.perf_counter() - start
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="gpt-mini-infer")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per cell; numbers are medians over them")
    parser.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for every cell (0: leave as is)")
    parser.add_argument("--child", nargs=2, metavar=("CELL", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.child[0], args.workloads, args.device, args.small, args.steps, args.child[1])
        print(json.dumps(result))
        return 0
    rows = ["| workload | cell | compile s | import s | load+first call s | steady us | steady / live ptc | max rel error |",
            "|---|---|---|---|---|---|---|---|"]
    # Each workload's rows are printed when it is done (a run cut short by a time limit keeps
    # them); the whole table follows at the end.
    print("\n".join(rows), flush=True)
    for workload in args.workloads.split(","):
        with tempfile.TemporaryDirectory(prefix="ptc_bench_export_") as directory:
            env = dict(os.environ, PTC_CACHE_DIR=os.path.join(directory, "cache"), TORCHINDUCTOR_CACHE_DIR=os.path.join(directory, "ti"))
            if args.threads:
                # Every cell gets the same thread count: on few cores, OpenMP pools that spin
                # between parallel regions (ATen's and the kernels') otherwise take turns.
                env["OMP_NUM_THREADS"] = str(args.threads)
            os.environ.update(env)
            built = _compile_artifacts(workload, args.device, args.small, directory)
            runs: dict[str, list[dict[str, Any]]] = {cell: [] for cell in CELLS}
            results: dict[str, dict[str, Any]] = {}
            for _ in range(max(args.repeats, 1)):
                for cell in CELLS:
                    if cell in results:
                        continue
                    if cell == "aoti" and "aoti" not in built:
                        results[cell] = {"error": built.get("aoti_error", "not built")}
                        continue
                    cmd = [sys.executable, __file__, "--workloads", workload, "--device", args.device, "--steps", str(args.steps),
                           "--child", cell, str(built.get(cell, "-"))] + (["--small"] if args.small else [])
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if proc.returncode != 0:
                        # The last line that is not a warning says why (a signal leaves none).
                        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith(" ")]
                        results[cell] = {"error": f"exit {proc.returncode}: {lines[-1][:200] if lines else 'no message'}"}
                        continue
                    runs[cell].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            for cell, found in runs.items():
                if cell not in results:
                    results[cell] = {key: statistics.median(r[key] for r in found) for key in found[0] if key != "cell"}
            live = results.get("ptc", {}).get("steady_us")
            for cell in CELLS:
                r = results[cell]
                if "error" in r:
                    rows.append(f"| {workload} | {cell} | - | - | - | - | - | {r['error']} |")
                    continue
                compiled = built.get(f"{cell}_compile_s")
                ratio = f"{r['steady_us'] / live:.2f}x" if live else "-"
                rows.append(f"| {workload} | {cell} | {'-' if compiled is None else f'{compiled:.2f}'} | {r['import_s']:.3f} | {r['first_s']:.3f} "
                            f"| {r['steady_us']:.1f} | {ratio} | {r['max_rel_error']:.1e} |")
            print("\n".join(rows[-len(CELLS):]), flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
