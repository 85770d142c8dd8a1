"""Host cost of one call, in microseconds: a kernel launch and a whole compiled call, beside eager.

    python tools/bench_launch.py [--calls N]

Rows (GPU only): one ptc_inductor TritonLauncher launch of a 1024-element kernel against
Triton's own ``kernel[grid](...)`` and eager ``torch.add``; then a compiled 4-op function
(ptc.compile, torch.compile) against eager; then capture alone (backend "eager", CPU tensors)
against eager and torch.compile(backend="eager"). Calls are queued without synchronizing, so the
numbers are host time per call as long as the GPU keeps up (the kernels are tiny).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(p) for p in sorted(ROOT.glob("packages/*/src"))]


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """Median over 5 rounds of the host time of ``calls`` back-to-back calls, per call."""
    import torch

    for _ in range(20):
        fn()
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(rounds)[2]


def main() -> None:
    """Print one line per measured call kind."""
    import torch
    import triton
    import triton.language as tl

    import ptc
    import ptc_spec
    from ptc_inductor.config import config_from_env
    from ptc_inductor.triton_graph import compile_triton_graph

    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)

    @triton.jit
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]  (Triton reads the annotations)
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)

    gm = ptc_spec.trace(lambda t: torch.ops.aten.add.Tensor(t, 1.0), ptc_spec.TensorMeta.from_tensor(x), dialect="core/1")
    graph = compile_triton_graph(gm, config_from_env(), x.device)
    (launcher,) = graph.launchers.values()
    rows = {
        "launch: eager torch.add": lambda: torch.add(x, 1.0, out=out),
        "launch: triton kernel[grid]": lambda: add_one[(1,)](x, out, 1024, BLOCK=1024),
        "launch: ptc TritonLauncher": lambda: launcher(x, out),
    }

    def f(a: Any, b: Any, c: Any, d: Any) -> Any:
        return torch.relu(a * b + c) - d

    ins = [torch.randn(1024, device="cuda") for _ in range(4)]
    rows["call 4-op fn: eager"] = lambda: f(*ins)
    compiled = ptc.compile(f)
    rows["call 4-op fn: ptc.compile"] = lambda: compiled(*ins)
    tc = torch.compile(f)
    rows["call 4-op fn: torch.compile"] = lambda: tc(*ins)
    # Capture alone (backend "eager", CPU tensors): the frame hook, guards and the call of the
    # captured graph, with no kernel work to hide them. Issue target: at most 5 us over eager.
    import ptc_capture

    def g(a: Any, b: Any, c: Any, d: Any) -> Any:
        return a + b * c - d

    small = [torch.randn(4) for _ in range(4)]
    rows["capture 4-input fn: eager"] = lambda: g(*small)
    captured = ptc_capture.optimize("eager")(g)
    rows["capture 4-input fn: ptc_capture"] = lambda: captured(*small)
    tc_eager = torch.compile(g, backend="eager")
    rows["capture 4-input fn: torch.compile"] = lambda: tc_eager(*small)
    for name, fn in rows.items():
        print(f"{name:32s} {per_call_us(fn, args.calls):8.2f} us/call")


if __name__ == "__main__":
    main()
