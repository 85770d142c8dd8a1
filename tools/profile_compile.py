"""Where one cold ptc compile spends its time: each pipeline stage's own seconds beside the nodes it handled.

    python tools/profile_compile.py gpt2-infer [--dynamic true] [--device cuda]
    python tools/profile_compile.py dynamic-gpt --dynamic true     # bench_dynamic.py's GPT-2
    python tools/profile_compile.py gpt-decode --imports           # + which stage imported what

The workload (a tools/bench.py workload, or ``dynamic-gpt``: the model tools/bench_dynamic.py
sweeps) is built, then its first call is made through ``ptc.compile`` in this fresh process with
empty compile caches, and every stage function is timed on the way. A stage's time excludes the
stages nested in it (a C++ build inside the C++ backend counts once, as the build), so the rows
add up to the first call; what no stage claims (torch's own one-time imports, the eager run of
the compiled code, Python glue) is the "other" row. The timers wrap module attributes, so the
numbers are for this tool only: nothing in the packages is changed. With ``--imports`` it also
lists the modules of torch's compiler stack (and sympy, triton) that the first call imported, by
the stage that imported them: ptc re-implements that stack, so a cold compile should not pay for
loading it.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import functools
import gc
import importlib
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), *(str(p) for p in sorted(ROOT.glob("packages/*/src")))]

# (stage name, module, attribute): what each stage runs. Attributes are patched where callers
# look them up (the module that imported the name), so every call goes through the timer.
DYNAMO_IMPORT = "torch._dynamo import (torch's)"
STAGES = [
    ("capture", "ptc_capture.capture", "capture_frame"),
    ("capture", "ptc_capture.api", "capture_frame"),  # api.py calls the name it imported
    ("boundary round-trips", "ptc.pipeline", "handoff"),
    ("aot: program cache key", "ptc_aot.program_cache", "material"),
    ("aot: program cache load", "ptc_aot.api", "read_program"),
    ("aot: trace", "ptc_aot.api", "trace_program"),
    ("aot: functionalize", "ptc_aot.api", "functionalize"),
    ("aot: partition", "ptc_aot.api", "partition"),
    ("decompose", "ptc_decomp", "decompose"),
    ("inductor: lower", "ptc_inductor.compiler", "lower_graph"),
    ("inductor: schedule", "ptc_inductor.compiler", "schedule"),
    ("inductor: plan memory", "ptc_inductor.compiler", "plan_memory"),
    ("inductor: C++ codegen", "ptc_inductor.codegen.backend", "cpp_backend"),
    ("inductor: C++ build (gcc)", "ptc_inductor.build", "_compile"),
    ("inductor: Triton codegen", "ptc_inductor.codegen.backend", "triton_backend"),
    ("inductor: Triton compile", "ptc_inductor.triton_runtime", "precompile"),
    ("inductor: Triton compile wait", "ptc_inductor.triton_runtime.TritonLauncher", "resolve"),
    ("inductor: wrapper", "ptc_inductor.compiler", "generate_wrapper"),
]


class Timers:
    """Exclusive time and call counts per stage (a nested stage's time is taken from its parent)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.nodes: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []
        self._names: list[str] = []

    def current(self) -> str:
        """The innermost stage running now ("other" outside every stage), and whether it is
        inside torch's own import of torch._dynamo."""
        stages = [n for n in self._names if n != DYNAMO_IMPORT]
        where = stages[-1] if stages else "other"
        return f"{where} via torch._dynamo" if DYNAMO_IMPORT in self._names else where

    def wrap(self, name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                # Background work (the graph cache's writer) overlaps the stages: not a stage.
                return fn(*args, **kwargs)
            self.calls[name] += 1
            graph = next((a for a in args if hasattr(a, "graph") and hasattr(a.graph, "nodes")), None)
            if graph is not None:
                self.nodes[name] += len(graph.graph.nodes)
            self._stack.append([0.0])
            self._names.append(name)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self._names.pop()
                nested = self._stack.pop()[0]
                self.seconds[name] += elapsed - nested
                if self._stack:
                    self._stack[-1][0] += elapsed

        return timed


class _GcTimer:
    """A ``gc.callbacks`` entry: how many collections of each generation ran, and their seconds."""

    def __init__(self) -> None:
        self.count: dict[int, int] = defaultdict(int)
        self.seconds: dict[int, float] = defaultdict(float)
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._began


def _time_dynamo_import(timers: Timers) -> None:
    """Time torch's own lazy import of torch._dynamo (its meta kernels' wrappers import it on
    first use; torch.compile pays it too) as a row of its own."""
    import builtins

    original = builtins.__import__
    timed_import = timers.wrap(DYNAMO_IMPORT, original)

    def importer(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torch._dynamo" and "torch._dynamo" not in sys.modules:
            builtins.__import__ = original
            return timed_import(name, *args, **kwargs)
        return original(name, *args, **kwargs)

    if "torch._dynamo" not in sys.modules:
        builtins.__import__ = importer


# Module families a cold compile should not load (torch's own compiler, which ptc replaces) or
# loads anyway (sympy, triton): --imports reports each one's new modules by importing stage.
WATCHED = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch._decomp", "torch._refs", "torch._prims",
           "torch._subclasses", "torch.fx.experimental.symbolic_shapes", "torch.fx.experimental.proxy_tensor",
           "torch.export", "torch._export", "sympy", "triton")


def _family(name: str) -> str | None:
    return next((f for f in WATCHED if name == f or name.startswith(f + ".")), None)


class _ImportWatch:
    """A meta path finder that finds nothing: it notes which stage first imports each watched module."""

    def __init__(self, timers: Timers) -> None:
        self.timers = timers
        self.loaded_before = sorted({f for m in list(sys.modules) if (f := _family(m))})
        self.imported: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        family = _family(name)
        if family is not None and name not in sys.modules:
            self.imported[family][self.timers.current()] += 1

    def report(self) -> None:
        print(f"\nwatched modules loaded before the first call (import torch, ptc): {', '.join(self.loaded_before) or 'none'}")
        if not self.imported:
            print("watched modules imported by the first call: none")
            return
        print("watched modules imported by the first call (new modules, by the stage that imported them):")
        for family, stages in sorted(self.imported.items()):
            where = ", ".join(f"{stage}: {n}" for stage, n in sorted(stages.items(), key=lambda kv: -kv[1]))
            print(f"  {family:<40} {sum(stages.values()):4d}  ({where})")


def _install(timers: Timers) -> None:
    for name, module_name, attr in STAGES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            # A class's method: module.Class.
            parent, _, cls = module_name.rpartition(".")
            try:
                module = getattr(importlib.import_module(parent), cls)
            except (ImportError, AttributeError):
                continue
        if hasattr(module, attr):
            setattr(module, attr, timers.wrap(name, getattr(module, attr)))


def _workload(name: str, device: Any) -> tuple[Any, tuple[Any, ...], bool, str]:
    import torch

    if name == "dynamic-gpt":
        import bench_dynamic

        model, logits = bench_dynamic._model(device)
        ids = torch.randint(0, 2048, (2, 17), device=device)
        return (lambda x: logits(model, x)), (ids,), False, "default"
    from bench import WORKLOADS

    spec = WORKLOADS[name]
    model, inputs = spec.build(device, device.type != "cuda")
    return model, inputs, spec.train, spec.mode


def main() -> None:
    """Print the stage table of one cold compile (or, with --warm, of a warm start)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--dynamic", choices=["none", "true", "false"], default="none")
    parser.add_argument("--device", default=None)
    parser.add_argument("--warm", action="store_true", help="profile a warm start: a first process fills the caches, this one reads them")
    parser.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N", help="also print the N functions of most cumulative time")
    parser.add_argument("--sort", choices=["cumulative", "tottime"], default="cumulative", help="--cprofile's order")
    parser.add_argument("--imports", action="store_true", help="also list the torch compiler modules (and sympy, triton) the first call imported, by stage")
    args = parser.parse_args()
    cache = args.cache_dir or tempfile.mkdtemp(prefix="ptc-profile-")
    if args.cache_dir is None:
        atexit.register(shutil.rmtree, cache, True)
    if args.warm:
        # The same command, cold, in a process of its own: it leaves every cache on disk.
        cold = [a for a in sys.argv[1:] if a != "--warm"]
        subprocess.run([sys.executable, __file__, *cold, "--cache-dir", cache], check=True, stdout=subprocess.DEVNULL)
    os.environ["PTC_CACHE_DIR"] = cache
    os.environ["PTC_INDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")

    import torch
    from bench import _step

    import ptc

    timers = Timers()
    _install(timers)
    _time_dynamo_import(timers)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    model, inputs, train, mode = _workload(args.workload, device)
    dynamic = {"none": None, "true": True, "false": False}[args.dynamic]
    compiled = ptc.compile(model, dynamic=dynamic, mode=mode)
    watch = _ImportWatch(timers) if args.imports else None
    if watch is not None:
        sys.meta_path.insert(0, watch)
    profiler = cProfile.Profile() if args.cprofile else None
    collections = _GcTimer()
    gc.callbacks.append(collections)
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    _step(compiled, inputs, train)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if profiler is not None:
        profiler.disable()
    if watch is not None:
        sys.meta_path.remove(watch)
    total = time.perf_counter() - start
    gc.callbacks.remove(collections)
    start_kind = "warm start" if args.warm else "cold"
    print(f"{args.workload} on {device.type}, mode={mode}, dynamic={args.dynamic}, train={train}, {start_kind}: first call {total:.2f} s")
    print(f"| {'stage':<28} | {'seconds':>8} | {'share':>6} | {'calls':>5} | {'nodes in':>8} |")
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 8}|{'-' * 7}|{'-' * 10}|")
    claimed = 0.0
    for name in dict.fromkeys([DYNAMO_IMPORT, *(stage for stage, _, _ in STAGES)]):
        if name not in timers.calls:
            continue
        seconds = timers.seconds[name]
        claimed += seconds
        print(f"| {name:<28} | {seconds:8.3f} | {seconds / total:6.1%} | {timers.calls[name]:5d} | {timers.nodes.get(name, 0):8d} |")
    other = total - claimed
    print(f"| {'other (imports, runs, glue)':<28} | {other:8.3f} | {other / total:6.1%} |       |          |")
    gc_line = ", ".join(f"generation {g}: {collections.count[g]} in {collections.seconds[g]:.3f} s" for g in sorted(collections.count))
    print(f"garbage collections during the first call (inside the rows above): {gc_line or 'none'}")
    if watch is not None:
        watch.report()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.cprofile)


if __name__ == "__main__":
    main()
