"""Where a tools/bench_triton.py workload spends its compile time and its GPU time, under ptc and torch.compile.

    python tools/profile_triton.py "layer_norm backward" [--compile] [--kernels] [--source] [--sweep]

--compile: ptc's cold compile split into phases (lower, schedule, codegen, modules and parallel
precompile, binary load, first launch) and each kernel's own serial compile time. --kernels:
per-kernel GPU time of ptc and torch.compile (torch.profiler). --sweep: every kernel timed
alone under each launch config max-autotune would try. Meant for the GPU machine; it explains a ratio
that bench_triton.py measured, it does not replace it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), *(str(p) for p in sorted(ROOT.glob("packages/*/src")))]
_TMP = tempfile.mkdtemp(prefix="profile_triton_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_TMP, "triton"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "torchinductor"))
os.environ.setdefault("PTC_INDUCTOR_CACHE_DIR", os.path.join(_TMP, "ptc"))


def _phases(wl: Any, inputs: tuple[Any, ...]) -> None:
    """Cold compile of the workload, phase by phase, then every kernel compiled alone."""
    import torch

    import ptc_spec
    from ptc_inductor.codegen.triton import generate_triton_kernel
    from ptc_inductor.config import config_from_env
    from ptc_inductor.lowering import lower_graph
    from ptc_inductor.scheduler import schedule
    from ptc_inductor.triton_runtime import (
        _compile,
        _constexprs,
        _target,
        canonical,
        load_launchers,
        signature,
        triton_options,
        warm_compile_pool,
    )
    from ptc_spec import TensorMeta

    cfg = config_from_env()
    options = triton_options(cfg)
    warm_compile_pool(options.compile_workers)
    device = inputs[0].device
    stamps = [("start", time.perf_counter())]
    gm = ptc_spec.trace(wl.fn, *[TensorMeta.from_tensor(t) for t in inputs], dialect="core/1")
    stamps.append(("trace", time.perf_counter()))
    lowered = lower_graph(gm, cfg)
    stamps.append(("lower", time.perf_counter()))
    sched = schedule(lowered.nodes, cfg, lowered.output_buffers)
    stamps.append(("schedule", time.perf_counter()))
    kernels = [generate_triton_kernel(k, lowered.buffers, sched.accesses, cfg) for k in sched.kernels]
    stamps.append(("codegen", time.perf_counter()))
    launchers = list(load_launchers(kernels, options, device, cfg).values())
    stamps.append(("modules + precompile", time.perf_counter()))
    jobs = sum(len(la.candidates()) for la in launchers)
    # The first launch of each kernel, in two parts: loading the binary, then config choice
    # (autotuning) and launch.
    env: dict[str, torch.Tensor] = {}
    all_args = []
    for la in launchers:
        args = []
        for name in la.kernel.params:
            buf = lowered.buffers.get(name)
            if name in lowered.constants:
                args.append(lowered.constants[name])
            elif name in lowered.inputs:
                args.append(inputs[lowered.inputs.index(name)])
            elif buf is not None:
                lay = buf.layout
                env.setdefault(name, torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype, device=device))
                args.append(env[name])
        all_args.append(args)
    stamps.append(("buffers", time.perf_counter()))
    for la, args in zip(launchers, all_args):
        la._set_config(la.candidates()[0])
        la._load_variant(args, tuple(a.data_ptr() % 16 == 0 for a in args))
    stamps.append(("binary load", time.perf_counter()))
    for la, args in zip(launchers, all_args):
        la.config = None
        la(*args)
    torch.cuda.synchronize()
    stamps.append(("config choice + launch", time.perf_counter()))
    print(f"ptc cold compile of {wl.name}: {len(kernels)} kernels, {jobs} (kernel, config) jobs")
    for (_, before), (name, after) in zip(stamps, stamps[1:]):
        print(f"  {name:24s} {after - before:7.3f} s")
    print(f"  {'total':24s} {stamps[-1][1] - stamps[0][1]:7.3f} s")
    target = _target(device)
    for la in launchers:
        k = la.kernel
        for c in la.candidates():
            os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="alone_", dir=_TMP)
            start = time.perf_counter()
            _compile(la.path, canonical(k).symbol, signature(k), _constexprs(k, c), tuple(True for _ in k.params),
                     c.num_warps, c.num_stages, target, la.fn)
            print(f"  alone: {k.name:10s} {k.style:10s} {c.key():22s} {time.perf_counter() - start:6.3f} s")


def _kernel_table(wl: Any, inputs: tuple[Any, ...], source: bool) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import ptc_spec
    from ptc_inductor.config import config_from_env
    from ptc_inductor.triton_graph import compile_triton_graph
    from ptc_spec import TensorMeta

    gm = ptc_spec.trace(wl.fn, *[TensorMeta.from_tensor(t) for t in inputs], dialect="core/1")
    graph = compile_triton_graph(gm, config_from_env(), inputs[0].device)
    torch._dynamo.reset()  # the peer we measure against; never imported by ptc packages
    impls = {"ptc": graph, "torch.compile": torch.compile(wl.fn)}
    for name, fn in impls.items():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(*inputs)
            torch.cuda.synchronize()
        print(f"===== {wl.name}: {name}")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60))
    for la in graph.launchers.values():
        print(f"{la.kernel.name}: {la.kernel.style} x{la.kernel.xnumel} r{la.kernel.rnumel} config {la.config.key() if la.config else None}")
    if source:
        for k in graph.kernels:
            print(k.source.split("@triton.jit\ndef kernel", 1)[-1])


def _sweep(wl: Any, inputs: tuple[Any, ...]) -> None:
    """Each kernel of the workload, timed alone under every config of the max-autotune search."""
    import torch
    from triton.testing import do_bench

    import ptc_spec
    from ptc_inductor.codegen.triton_heuristics import candidate_configs
    from ptc_inductor.config import config_from_env
    from ptc_inductor.triton_graph import compile_triton_graph
    from ptc_inductor.triton_runtime import TritonLauncher
    from ptc_spec import TensorMeta

    gm = ptc_spec.trace(wl.fn, *[TensorMeta.from_tensor(t) for t in inputs], dialect="core/1")
    graph = compile_triton_graph(gm, config_from_env(triton_autotune="none"), inputs[0].device)
    seen: dict[str, tuple[torch.Tensor, ...]] = {}
    launch = TritonLauncher.__call__

    def record(self: TritonLauncher, *args: torch.Tensor) -> None:
        seen[self.kernel.name] = args
        launch(self, *args)

    TritonLauncher.__call__ = record  # type: ignore[method-assign]
    try:
        graph(*inputs)
    finally:
        TritonLauncher.__call__ = launch  # type: ignore[method-assign]
    print(f"===== {wl.name}: whole graph {do_bench(lambda: graph(*inputs), warmup=25, rep=200) * 1000:.1f} us (heuristic configs)")
    for la in graph.launchers.values():
        k = la.kernel
        print(f"{k.name}: {k.style} x{k.xnumel} r{k.rnumel}")
        for cfg in candidate_configs(k.style, k.xnumel, k.rnumel, k.rblock, "max-autotune", k.strided, k.rows):
            la._set_config(cfg)
            try:
                us = do_bench(lambda la=la, args=seen[k.name]: la(*args), warmup=25, rep=100) * 1000
            except Exception as exc:  # a config may not fit the device
                print(f"  {cfg.key():22s} failed: {str(exc)[:80]}")
                continue
            print(f"  {cfg.key():22s} {us:8.1f} us")


def main() -> None:
    """Profile one workload of bench_triton.py, chosen by a prefix of its name."""
    import torch
    from bench_triton import WORKLOADS

    parser = argparse.ArgumentParser()
    parser.add_argument("workload", help="a prefix of a bench_triton.py workload name")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--kernels", action="store_true")
    parser.add_argument("--source", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    wl = next(w for w in WORKLOADS if w.name.startswith(args.workload))
    inputs = wl.make(False, "cuda")
    if args.compile:
        _phases(wl, inputs)
    if args.kernels:
        _kernel_table(wl, inputs, args.source)
    if args.sweep:
        _sweep(wl, inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
