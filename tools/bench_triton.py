"""Benchmark ptc-inductor's Triton backend beside eager and torch.compile, in one run.

For each workload: steady-state median time (CUDA events via triton.testing.do_bench, after
warm-up), achieved GB/s (bytes of inputs + outputs / time) against the measured copy
bandwidth, and cold compile time (first call, empty caches). Prints a Markdown table; writes
JSON to $OUT/bench_triton.json when $OUT is set.

    python tools/bench_triton.py            # on the H100
    TRITON_INTERPRET=1 python tools/bench_triton.py --smoke   # tiny sizes, correctness only, CPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Cold compile times need empty caches: every compiler gets a fresh directory for this run.
_TMP = tempfile.mkdtemp(prefix="bench_triton_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_TMP, "triton"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "torchinductor"))
os.environ.setdefault("PTC_INDUCTOR_CACHE_DIR", os.path.join(_TMP, "ptc"))

import torch  # noqa: E402

import ptc_spec  # noqa: E402
from ptc_inductor.config import config_from_env  # noqa: E402
from ptc_inductor.triton_graph import compile_triton_graph  # noqa: E402
from ptc_inductor.triton_runtime import triton_options, warm_compile_pool  # noqa: E402
from ptc_spec import TensorMeta  # noqa: E402
from ptc_spec.testing import compare_with_eager  # noqa: E402

aten = torch.ops.aten


@dataclass
class Workload:
    """A function written with core ops, its inputs, and the target it is measured against."""

    name: str
    fn: Callable[..., Any]
    make: Callable[[bool, str], tuple[torch.Tensor, ...]]
    target: str


def _gelu(y: torch.Tensor) -> Any:
    return aten.mul.Tensor(aten.mul.Tensor(y, 0.5), aten.add.Tensor(aten.erf.default(aten.mul.Tensor(y, 0.7071067811865476)), 1.0))


def pointwise_chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
    """gelu(x*w+b)*sigmoid(x)+tanh(b)."""
    g = _gelu(aten.add.Tensor(aten.mul.Tensor(x, w), b))
    return aten.add.Tensor(aten.mul.Tensor(g, aten.sigmoid.default(x)), aten.tanh.default(b))


def softmax(x: torch.Tensor) -> Any:
    """Row softmax."""
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True))


def add_layer_norm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """h = x + r; layer_norm(h) * w + b, statistics in float32, results in x's dtype."""
    h = aten.add.Tensor(x, r)
    hf = aten._to_copy.default(h, dtype=torch.float32)
    n = x.shape[-1]
    mean = aten.mul.Tensor(aten.sum.dim_IntList(hf, [1], True), 1.0 / n)
    d = aten.sub.Tensor(hf, mean)
    var = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(d, d), [1], True), 1.0 / n)
    y = aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(d, aten.rsqrt.default(aten.add.Tensor(var, 1e-5))), w), b)
    return h, aten._to_copy.default(y, dtype=x.dtype)


def layer_norm_backward(g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Gradients of layer_norm w.r.t. input, weight and bias (statistics given, as saved by forward)."""
    n = x.shape[-1]
    xhat = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
    gw = aten.mul.Tensor(g, w)
    c1 = aten.mul.Tensor(aten.sum.dim_IntList(gw, [1], True), 1.0 / n)
    c2 = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(gw, xhat), [1], True), 1.0 / n)
    dx = aten.mul.Tensor(aten.sub.Tensor(aten.sub.Tensor(gw, c1), aten.mul.Tensor(xhat, c2)), rstd)
    return dx, aten.sum.dim_IntList(aten.mul.Tensor(g, xhat), [0]), aten.sum.dim_IntList(g, [0])


def softmax_backward(gy: torch.Tensor, y: torch.Tensor) -> Any:
    """Gradient of softmax given its output y."""
    s = aten.sum.dim_IntList(aten.mul.Tensor(gy, y), [1], True)
    return aten.mul.Tensor(y, aten.sub.Tensor(gy, s))


def twenty_kernels(x: torch.Tensor) -> torch.Tensor:
    """Alternating row and column reductions: each feeds the next across the other axis."""
    for i in range(10):
        col = aten.amax.default(x, [0], True)
        x = aten.sub.Tensor(x, aten.mul.Tensor(col, 0.01 * (i + 1)))
        row = aten.sum.dim_IntList(aten.tanh.default(x), [1], True)
        x = aten.add.Tensor(x, aten.mul.Tensor(row, 0.001))
    return x


def _r(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype).to(device)


def _ln_bwd_inputs(smoke: bool, dev: str) -> tuple[torch.Tensor, ...]:
    m, n = (8, 96) if smoke else (16384, 4096)
    x = _r((m, n), torch.float32, dev, 1)
    mean = x.mean(1, keepdim=True)
    rstd = torch.rsqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5)
    return _r((m, n), torch.float32, dev, 2), x, mean, rstd, _r((n,), torch.float32, dev, 3)


WORKLOADS = [
    Workload("pointwise chain 2^26 fp32", pointwise_chain,
             lambda s, d: tuple(_r(((1 << 10) + 3 if s else 1 << 26,), torch.float32, d, i) for i in range(3)), ">= 2.7 TB/s"),
    Workload("softmax 8192x8192 fp32", softmax, lambda s, d: (_r((9, 300) if s else (8192, 8192), torch.float32, d, 0),), ">= torch.compile"),
    Workload("add + layer_norm 16384x4096 bf16", add_layer_norm,
             lambda s, d: (_r((8, 96) if s else (16384, 4096), torch.bfloat16, d, 0), _r((8, 96) if s else (16384, 4096), torch.bfloat16, d, 1),
                           _r((96,) if s else (4096,), torch.float32, d, 2), _r((96,) if s else (4096,), torch.float32, d, 3)), ">= torch.compile"),
    Workload("layer_norm backward 16384x4096 fp32", layer_norm_backward, _ln_bwd_inputs, ">= torch.compile"),
    Workload("softmax backward 8192x8192 fp32", softmax_backward,
             lambda s, d: (_r((9, 300) if s else (8192, 8192), torch.float32, d, 0), torch.softmax(_r((9, 300) if s else (8192, 8192), torch.float32, d, 1), 1)),
             ">= torch.compile"),
    Workload("20-kernel graph 1024x1024 fp32 (compile)", twenty_kernels, lambda s, d: (_r((16, 24) if s else (1024, 1024), torch.float32, d, 0),),
             "compile <= 0.5x torch.compile"),
]


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def _bench(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` (CUDA events, after warm-up)."""
    from triton.testing import do_bench

    bench: Any = do_bench  # untyped
    return float(bench(fn, warmup=25, rep=100, return_mode="median"))


def _timed_first_call(make: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any], float]:
    """Build a callable and run it once; return it and the seconds both took (the cold compile)."""
    start = time.perf_counter()
    call = make()
    call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return call, time.perf_counter() - start


def _measure(wl: Workload, smoke: bool, dev: str, copy_gbs: float) -> dict[str, Any]:
    """One row of the table: ptc (and, unless smoke, eager and torch.compile) on ``wl``."""
    inputs = wl.make(smoke, dev)
    metas = [TensorMeta.from_tensor(t) for t in inputs]
    gm = ptc_spec.trace(wl.fn, *metas, dialect="core/1")
    holder: dict[str, Any] = {}

    def build_ptc() -> Callable[[], Any]:
        holder["g"] = compile_triton_graph(gm, config_from_env(), torch.device(dev))
        return lambda: holder["g"](*inputs)

    ptc_call, ptc_compile = _timed_first_call(build_ptc)
    compare_with_eager(holder["g"], wl.fn, *inputs, rtol=2e-2, atol=2e-2)
    row: dict[str, Any] = {"workload": wl.name, "target": wl.target, "kernels": holder["g"].kernel_count, "ptc_compile_s": ptc_compile}
    if smoke:
        return row
    eager_ms = _bench(lambda: wl.fn(*inputs))
    torch._dynamo.reset()  # the peer we measure against; never imported by ptc packages
    tc = torch.compile(wl.fn)
    tc_call, tc_compile = _timed_first_call(lambda: (lambda: tc(*inputs)))
    moved = sum(_nbytes(t) for t in inputs) + _nbytes(wl.fn(*inputs))
    ptc_ms, tc_ms = _bench(ptc_call), _bench(tc_call)
    row.update(eager_ms=eager_ms, torch_compile_ms=tc_ms, ptc_ms=ptc_ms, torch_compile_compile_s=tc_compile,
               ptc_gbs=moved / ptc_ms / 1e6, torch_compile_gbs=moved / tc_ms / 1e6, copy_gbs=copy_gbs)
    return row


def run(smoke: bool) -> list[dict[str, Any]]:
    """Measure every workload; under --smoke only check correctness on tiny inputs."""
    dev = "cpu" if smoke else "cuda"
    if not smoke:
        # Both compilers get warm worker pools: torch.compile starts its own at import.
        warm_compile_pool(triton_options(config_from_env()).compile_workers)
    rows: list[dict[str, Any]] = []
    copy_gbs = 0.0
    if not smoke:
        src = torch.empty(1 << 28, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        copy_gbs = 2 * src.numel() * 4 / _bench(lambda: dst.copy_(src)) / 1e6
    for wl in WORKLOADS:
        rows.append(_measure(wl, smoke, dev, copy_gbs))
        print(f"done: {wl.name}", file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]], smoke: bool) -> str:
    """The Markdown table of ``rows``."""
    if smoke:
        lines = ["| workload | kernels | ptc compile s | matches eager |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['workload']} | {r['kernels']} | {r['ptc_compile_s']:.2f} | yes |" for r in rows]
        return "\n".join(lines)
    lines = [
        "| workload | kernels | eager ms | torch.compile ms | ptc ms | ptc GB/s (% copy) | speed vs torch.compile | "
        "compile s ptc / torch.compile | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['kernels']} | {r['eager_ms']:.3f} | {r['torch_compile_ms']:.3f} | {r['ptc_ms']:.3f} | "
            f"{r['ptc_gbs']:.0f} ({100 * r['ptc_gbs'] / r['copy_gbs']:.0f}%) | {r['torch_compile_ms'] / r['ptc_ms']:.2f}x | "
            f"{r['ptc_compile_s']:.2f} / {r['torch_compile_compile_s']:.2f} ({r['ptc_compile_s'] / r['torch_compile_compile_s']:.2f}x) | {r['target']} |"
        )
    lines.append(f"\ncopy bandwidth: {rows[0]['copy_gbs']:.0f} GB/s; device: {torch.cuda.get_device_name()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU under TRITON_INTERPRET=1, correctness only")
    args = parser.parse_args(argv)
    if args.smoke and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("--smoke runs Triton's interpreter: set TRITON_INTERPRET=1")
    rows = run(args.smoke)
    sys.stdout.write(table(rows, args.smoke) + "\n")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_triton.json"), "w") as f:
            json.dump({"rows": rows, "smoke": args.smoke}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())



