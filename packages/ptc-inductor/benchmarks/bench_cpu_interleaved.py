"""bench_cpu.py's workloads with eager, torch.compile and ptc called in turn, round by round.

pytest-benchmark times one implementation's rounds back to back, so on a shared machine a burst
of other load lands on one implementation and flips a ratio. Here every round calls each
implementation once, in the same process, so a burst hits all three alike. Run:

    PYTHONPATH=packages/ptc-spec/src:packages/ptc-inductor/src \\
        python packages/ptc-inductor/benchmarks/bench_cpu_interleaved.py [--rounds 60] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

IMPLS = ("eager", "torch_compile", "ptc")


def main() -> None:
    """Print one Markdown row per workload: medians (ms), ratios and cold compile seconds."""
    spec = importlib.util.spec_from_file_location("bench_cpu", Path(__file__).with_name("bench_cpu.py"))
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_cpu"] = bench
    spec.loader.exec_module(bench)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("workloads", nargs="*", default=list(bench.WORKLOADS))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    print("| workload | eager ms | torch.compile ms | ptc ms | ptc vs eager | ptc vs torch.compile | cold tc s | cold ptc s "
          "| page faults per call (tc / ptc) | preemptions per call (tc / ptc) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.workloads:
        fn, make = bench.WORKLOADS[name]
        torch.manual_seed(0)
        inputs = make()
        torch._dynamo.reset()  # the peer we measure against; never imported by ptc packages
        built = {impl: bench._build(impl, fn, inputs) for impl in IMPLS}
        for impl, (compiled, _) in built.items():
            torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-3, atol=1e-3, msg=f"{impl} differs from eager")
        times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
        # Page faults and involuntary context switches per call: a slow round caused by the
        # allocator faulting in fresh output pages, or by a preempted thread, shows here.
        faults = dict.fromkeys(IMPLS, 0)
        switches = dict.fromkeys(IMPLS, 0)
        for r in range(args.warmup + args.rounds):
            for impl, (compiled, _) in built.items():
                before = resource.getrusage(resource.RUSAGE_SELF)
                start = time.perf_counter()
                compiled(*inputs)
                elapsed = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_SELF)
                if r >= args.warmup:
                    times[impl].append(elapsed * 1e3)
                    faults[impl] += after.ru_minflt - before.ru_minflt
                    switches[impl] += after.ru_nivcsw - before.ru_nivcsw
        med = {impl: statistics.median(t) for impl, t in times.items()}
        print(
            f"| {name} | {med['eager']:.3f} | {med['torch_compile']:.3f} | {med['ptc']:.3f} | "
            f"{med['eager'] / med['ptc']:.2f}x | {med['torch_compile'] / med['ptc']:.2f}x | "
            f"{built['torch_compile'][1]:.2f} | {built['ptc'][1]:.2f} | "
            f"{faults['torch_compile'] / args.rounds:.0f} / {faults['ptc'] / args.rounds:.0f} | "
            f"{switches['torch_compile'] / args.rounds:.1f} / {switches['ptc'] / args.rounds:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
