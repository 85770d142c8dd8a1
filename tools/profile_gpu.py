"""Where a bench.py workload spends its GPU time under eager and ptc: top kernels, launches per step.

    python tools/profile_gpu.py gpt-mini-infer [--impls eager,ptc] [--rows 25]

Meant for the GPU machine (one lease, one command): it explains a ratio that tools/bench.py
measured, it does not replace it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), *(str(p) for p in sorted(ROOT.glob("packages/*/src")))]


def main() -> None:
    """Profile each implementation of one workload for a few warm steps and print its kernel table."""
    import torch
    from bench import WORKLOADS, _in_dtype, _step  # the same workloads, casts and step as the benchmark
    from torch.profiler import ProfilerActivity, profile

    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--impls", default="eager,ptc")
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--dtype", default="default", help="as tools/bench.py --dtype")
    parser.add_argument("--mode", default=None, help="compile mode (default: the workload's own, e.g. reduce-overhead for gpt-decode)")
    parser.add_argument("--sort", choices=("gpu", "cpu"), default="gpu", help="order the table by GPU time or by host (self CPU) time")
    parser.add_argument("--cprofile", action="store_true", help="also print the Python functions the ptc steps spend CPU time in")
    parser.add_argument("--host", action="store_true", help="also print a step's host time (and ptc's guard time) beside its synchronized time")
    parser.add_argument("--sources", default=None, metavar="DIR",
                        help="write the source of ptc's generated kernels listed in the table to DIR/<kernel name>.py, and print the graph nodes each computes")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = WORKLOADS[args.workload]
    for impl in args.impls.split(","):
        model, inputs = spec.build(device, False)
        if args.dtype != "default":
            inputs = _in_dtype(model, inputs, args.dtype)
        if impl == "ptc":
            import ptc

            sources = _record_kernel_sources() if args.sources else {}
            model = ptc.compile(model, mode=args.mode or spec.mode)
        elif impl == "torch.compile":
            model = torch.compile(model, mode=args.mode or spec.mode)
        for _ in range(3):
            _step(model, inputs, spec.train)
        _sync()
        # Measured before the profilers run: a torch.profiler session leaves the process's later
        # host time higher (BERT's ptc step read 6.3 ms host after it against 2.8 ms before).
        host_line = _host_split(model, inputs, spec.train, impl) if args.host else None
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                _step(model, inputs, spec.train)
            _sync()
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        launches = sum(e.count for e in kernels) / args.steps
        gpu_ms = sum(e.self_device_time_total for e in kernels) / args.steps / 1e3
        print(f"===== {args.workload} {impl}: {launches:.0f} kernels/step, {gpu_ms:.3f} ms GPU/step")
        print(events.table(sort_by="self_cuda_time_total" if device.type == "cuda" and args.sort == "gpu" else "self_cpu_time_total", row_limit=args.rows, max_name_column_width=70))
        if impl == "ptc" and args.sources:
            top = sorted(kernels, key=lambda e: -e.self_device_time_total)[: args.rows]
            _write_sources(args.sources, [(e.key, e.self_device_time_total / args.steps, e.count / args.steps) for e in top], sources)
        if args.cprofile:
            _python_hotspots(model, inputs, spec.train, args.steps * 4, args.rows)
        if host_line:
            print(host_line)


def _record_kernel_sources() -> dict[str, str]:
    """Kernel name -> generated source of every Triton kernel ptc compiles from now on (the
    names the profiler shows are the canonical ones, a hash of the source)."""
    from ptc_inductor import triton_runtime

    found: dict[str, str] = {}
    canonical = triton_runtime.canonical

    def recording(kernel: Any) -> Any:
        form = canonical(kernel)
        found.setdefault(form.symbol, kernel.source)
        return form

    triton_runtime.canonical = recording  # type: ignore[assignment]
    return found


def _write_sources(directory: str, top: list[tuple[str, float, float]], sources: dict[str, str]) -> None:
    """Write each listed kernel's source into ``directory`` and print what it computes."""
    import os

    os.makedirs(directory, exist_ok=True)
    print(f"----- ptc kernel sources (in {directory})")
    for name, us, calls in top:
        source = sources.get(name)
        if source is None:
            continue
        with open(os.path.join(directory, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(source)
        nodes = next((ln.strip() for ln in source.splitlines() if "graph node(s):" in ln), "")
        print(f"{name}  {us:9.1f} us/step  {calls:4.0f} calls/step  {nodes[:230]}")


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _python_hotspots(model: Any, inputs: tuple[Any, ...], train: bool, steps: int, rows: int) -> None:
    """cProfile over warm steps: where the host side of a step goes (launch overhead, guards)."""
    import cProfile
    import io
    import pstats

    from bench import _step

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        _step(model, inputs, train)
    _sync()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(rows)
    print(f"----- Python hotspots over {steps} steps (tottime)")
    print("\n".join(line[:180] for line in out.getvalue().splitlines()))


def _host_split(model: Any, inputs: tuple[Any, ...], train: bool, impl: str, steps: int = 30) -> str:
    """Median per step of: the synchronized step; the host time until the step returns (after a
    synchronize, so the launch queue is empty); for ptc, the time in capture's guard checks.
    A host time above the GPU time means the GPU waits for the host."""
    import statistics
    import time

    from bench import _step

    guard_time = [0.0]
    if impl == "ptc":
        import dataclasses

        from ptc_capture.cache import all_caches

        def timed(check: Any) -> Any:
            def run(*a: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return check(*a)
                finally:
                    guard_time[0] += time.perf_counter() - t0

            run.__wrapped__ = check  # type: ignore[attr-defined]
            return run

        for cache in all_caches():
            cache.entries[:] = [dataclasses.replace(e, check=timed(e.check)) for e in cache.entries]
    synced, host, guards = [], [], []
    for _ in range(steps):
        _sync()
        guard_time[0] = 0.0
        t0 = time.perf_counter()
        _step(model, inputs, train)
        t1 = time.perf_counter()
        _sync()
        synced.append(time.perf_counter() - t0)
        host.append(t1 - t0)
        guards.append(guard_time[0])
    ms = [statistics.median(x) * 1e3 for x in (synced, host, guards)]
    if impl == "ptc":
        for cache in all_caches():
            cache.entries[:] = [dataclasses.replace(e, check=e.check.__wrapped__) for e in cache.entries]
    return f"----- host split ({impl}): step {ms[0]:.3f} ms synchronized, {ms[1]:.3f} ms host until it returns, {ms[2]:.3f} ms in guards"


if __name__ == "__main__":
    main()
