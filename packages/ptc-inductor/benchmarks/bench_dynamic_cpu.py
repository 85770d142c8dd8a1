"""Symbolic sizes on the CPU: the dynamic kernel against the static one, at the same size.

Each workload is compiled twice: traced at static sizes, and traced once with every dim
symbolic (``dynamic_meta``, the same example sizes as hints). Both are timed at the example
size, round by round in turn (a burst of load on this shared machine hits both alike), beside
eager. The target: the dynamic kernel within 10% of the static one (ratio <= 1.10). The tiny
workload measures per-call overhead, where the dynamic wrapper also reads its sizes. Run:

    PYTHONPATH=packages/ptc-spec/src:packages/ptc-inductor/src \\
        python packages/ptc-inductor/benchmarks/bench_dynamic_cpu.py [--rounds 200] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

import ptc_inductor
import ptc_spec
from ptc_spec import SymbolEnv, TensorMeta, dynamic_meta

aten = torch.ops.aten


def pointwise_chain(x: Any, w: Any, b: Any) -> Any:
    h = aten.add.Tensor(aten.mul.Tensor(x, w), b)
    inner = aten.mul.Tensor(aten.add.Tensor(h, aten.mul.Tensor(aten.pow.Tensor_Scalar(h, 3), 0.044715)), math.sqrt(2 / math.pi))
    g = aten.mul.Tensor(aten.mul.Tensor(h, 0.5), aten.add.Tensor(aten.tanh.default(inner), 1.0))
    return aten.add.Tensor(aten.mul.Tensor(g, aten.sigmoid.default(x)), b)


def row_sum(x: Any) -> Any:
    return aten.sum.dim_IntList(aten.mul.Tensor(x, x), [-1], True)


def softmax(x: Any) -> Any:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))


Workload = tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]
WORKLOADS: dict[str, Workload] = {
    "pointwise_chain_2048x2048": (pointwise_chain, ((2048, 2048), (2048,), (2048, 1))),
    "row_sum_4096x1024": (row_sum, ((4096, 1024),)),
    "softmax_2048x2048": (softmax, ((2048, 2048),)),
    "tiny_pointwise_8x8 (per-call overhead)": (pointwise_chain, ((8, 8), (8,), (8, 1))),
}


def build(fn: Callable[..., Any], shapes: tuple[tuple[int, ...], ...], dynamic: bool) -> ptc_inductor.CompiledGraph:
    """Compile ``fn`` over inputs of ``shapes``: static, or with every dim symbolic."""
    env = SymbolEnv() if dynamic else None
    metas = [TensorMeta.of(s) for s in shapes]
    if env is not None:
        metas = [dynamic_meta(m, range(len(m.shape)), env) for m in metas]
    gm = ptc_spec.trace(fn, *metas, shape_env=env, dialect="core/1")
    config = ptc_inductor.config_from_env(cache_dir=tempfile.mkdtemp(prefix="bench_dynamic_"))
    return ptc_inductor.compile(gm, config=config)


def main() -> None:
    """Print one Markdown row per workload: medians and the dynamic/static ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    print("| workload | eager | static ptc | dynamic ptc | dynamic / static |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.workloads:
        fn, shapes = WORKLOADS[name]
        gen = torch.Generator().manual_seed(0)
        inputs = tuple(torch.randn(*s, generator=gen) for s in shapes)
        impls: dict[str, Callable[..., Any]] = {"eager": fn, "static": build(fn, shapes, False), "dynamic": build(fn, shapes, True)}
        for impl, call in impls.items():
            torch.testing.assert_close(call(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4, msg=f"{impl} differs from eager")
        times: dict[str, list[float]] = {impl: [] for impl in impls}
        for r in range(args.warmup + args.rounds):
            for impl, call in impls.items():
                start = time.perf_counter()
                call(*inputs)
                elapsed = time.perf_counter() - start
                if r >= args.warmup:
                    times[impl].append(elapsed)
        med = {impl: statistics.median(t) for impl, t in times.items()}
        unit, scale = ("us", 1e6) if med["static"] < 1e-3 else ("ms", 1e3)
        print(
            f"| {name} | {med['eager'] * scale:.3f} {unit} | {med['static'] * scale:.3f} {unit} | "
            f"{med['dynamic'] * scale:.3f} {unit} | {med['dynamic'] / med['static']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
