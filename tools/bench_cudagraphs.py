"""Replay latency of ptc_cudagraphs beside eager and torch.compile(mode="reduce-overhead").

Each (implementation, model) pair runs in its own process (caches and pools stay apart);
the parent prints one Markdown table. Usage: python tools/bench_cudagraphs.py [--steps N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

# raw_cudagraph: one torch.cuda.CUDAGraph of the same eager function, replayed with an input
# copy and nothing else. It is the floor for replaying eager's kernels, so ptc_cudagraphs
# against it measures our replay overhead, while against reduce-overhead (which also fuses
# kernels) it measures overhead plus fusion.
IMPLS = ("eager", "raw_cudagraph", "ptc_cudagraphs", "compile_reduce_overhead")
MODELS = ("gpt4_decode_b1_s32", "mlp_b1", "gpt4_train_b8_s32")


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, c))
        return out


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    def __init__(self, vocab: int = 8192, dim: int = 512, heads: int = 8, layers: int = 4, seq: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) / math.sqrt(dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln(x))
        return logits


def _build(model: str) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    if model.startswith("gpt4"):
        batch = 8 if "train" in model else 1
        return GPT().cuda(), lambda: torch.randint(0, 8192, (batch, 32), device="cuda")
    net = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 512))
    return net.cuda(), lambda: torch.randn(1, 512, device="cuda")


def _wrap(impl: str, fn: Callable[..., torch.Tensor], example: torch.Tensor) -> Callable[..., torch.Tensor]:
    if impl == "ptc_cudagraphs":
        import ptc_cudagraphs

        return ptc_cudagraphs.cudagraphify(fn, [example])  # type: ignore[return-value]
    if impl == "compile_reduce_overhead":
        return torch.compile(fn, mode="reduce-overhead")
    if impl == "raw_cudagraph":
        return _raw_graph(fn, example)
    return fn


def _raw_graph(fn: Callable[..., torch.Tensor], example: torch.Tensor) -> Callable[..., torch.Tensor]:
    static_input = example.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(static_input)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = fn(static_input)

    def replay(x: torch.Tensor) -> torch.Tensor:
        static_input.copy_(x)
        graph.replay()
        return static_output

    return replay


def _time_steps(step: Callable[[int], object], steps: int) -> tuple[float, float]:
    """Median per-step time (CUDA events, ms) and median host wall time (ms), GPU idle at each start."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu, host = [], []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        step(i)
        end.record()
        end.synchronize()
        host.append((time.perf_counter() - t0) * 1e3)
        gpu.append(start.elapsed_time(end))
    return statistics.median(gpu), statistics.median(host)


def child(impl: str, model: str, steps: int) -> dict[str, object]:
    torch.manual_seed(0)
    net, make_input = _build(model)
    inputs = [make_input() for _ in range(8)]
    t_setup = time.perf_counter()
    if "train" in model:
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        fn = _wrap(impl, net, inputs[0])

        def step(i: int) -> object:
            opt.zero_grad(set_to_none=True)
            idx = inputs[i % len(inputs)]
            loss = F.cross_entropy(fn(idx).flatten(0, 1), idx.flatten())
            loss.backward()
            opt.step()
            return loss

        for i in range(5):
            step(i)
        torch.cuda.synchronize()
        setup_s = time.perf_counter() - t_setup
        # The whole run's peak includes the recording step, where the warm-up's eager
        # activations and the pool coexist once; the steady peak is that of replayed steps.
        whole_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        median, host = _time_steps(step, max(steps // 10, 20))
        check = float("nan")
        phases, idle_pool = _phase_memory(opt, fn, inputs)
    else:
        net.eval()
        fn = _wrap(impl, lambda idx: net(idx), inputs[0])
        with torch.no_grad():
            for i in range(30):
                fn(inputs[i % len(inputs)])
            torch.cuda.synchronize()
            setup_s = time.perf_counter() - t_setup
            check = (fn(inputs[1]) - net(inputs[1])).abs().max().item()
            whole_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            median, host = _time_steps(lambda i: fn(inputs[i % len(inputs)]), steps)
        phases, idle_pool = {}, 0.0
    graphs = "-"
    input_buffers = 0.0
    if impl == "ptc_cudagraphs":
        import ptc_cudagraphs

        snap = ptc_cudagraphs.stats()
        graphs = (f"{snap.recordings} rec, {snap.replays} replays, eager {snap.eager_calls} {snap.fallbacks}, "
                  f"pool {snap.pool_bytes / 2**20:.1f} MiB, pinned outputs {snap.pinned_output_bytes / 2**20:.1f} MiB, "
                  f"input buffers {snap.input_buffer_bytes / 2**20:.1f} MiB")
        input_buffers = snap.input_buffer_bytes / 2**20
    return {
        "graphs": graphs,
        "impl": impl,
        "model": model,
        "median_ms": median,
        "host_ms": host,
        "peak_mib": max(whole_peak, torch.cuda.max_memory_allocated()) / 2**20,
        "steady_peak_mib": torch.cuda.max_memory_allocated() / 2**20,
        "max_abs_err": check,
        "setup_s": setup_s,
        "phases": phases,
        "reserved_mib": torch.cuda.memory_reserved() / 2**20,
        "private_pools_mib": _private_pools(),
        "input_buffer_mib": input_buffers,
        "idle_pool_mib": idle_pool,
    }


def _phase_memory(
    opt: torch.optim.Optimizer, fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]
) -> tuple[dict[str, list[float]], float]:
    """One more training step, phase by phase: (peak allocated, allocated after, peak reserved) in
    MiB, to place the step's peak; and the private-pool MiB that no tensor the user can reach
    (the parameters' .grad) occupies when the optimizer starts."""
    out: dict[str, list[float]] = {}
    idle_pool = 0.0
    held: dict[str, torch.Tensor] = {}
    idx = inputs[0]

    def forward() -> None:
        held["loss"] = F.cross_entropy(fn(idx).flatten(0, 1), idx.flatten())

    actions: list[tuple[str, Callable[[], object]]] = [("zero_grad", lambda: opt.zero_grad(set_to_none=True)), ("forward", forward),
               ("backward", lambda: held.pop("loss").backward()), ("optimizer", opt.step)]
    for name, action in actions:
        if name == "optimizer":
            grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
            idle_pool = _idle_pool_mib(grads)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        action()
        torch.cuda.synchronize()
        out[name] = [torch.cuda.max_memory_allocated() / 2**20, torch.cuda.memory_allocated() / 2**20,
                     torch.cuda.max_memory_reserved() / 2**20]
    return out, idle_pool


def _private_segments() -> list[dict[str, Any]]:
    return [s for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]


def _private_pools() -> tuple[float, float]:
    """MiB reserved and allocated in private (graph) pools, from the allocator's snapshot."""
    segments = _private_segments()
    return sum(s["total_size"] for s in segments) / 2**20, sum(s["allocated_size"] for s in segments) / 2**20


def _idle_pool_mib(held: list[torch.Tensor]) -> float:
    """MiB of private-pool memory that none of ``held`` occupies."""
    segments = _private_segments()
    spans = [(s["address"], s["address"] + s["total_size"]) for s in segments]
    in_pool = sum(t.untyped_storage().nbytes() for t in held if any(a <= t.data_ptr() < b for a, b in spans))
    return float(sum(s["total_size"] for s in segments) - in_pool) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "MODEL"))
    parser.add_argument("--skip", default="", help="comma-separated impl:model pairs to leave out")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models to run")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.steps)))
        return
    skip = set(filter(None, args.skip.split(",")))
    rows: list[dict[str, object]] = []
    for model in args.models.split(","):
        for impl in IMPLS:
            # A bare graph capture of a training step would need its own backward handling.
            if f"{impl}:{model}" in skip or (impl == "raw_cudagraph" and "train" in model):
                continue
            cmd = [sys.executable, __file__, "--child", impl, model, "--steps", str(args.steps)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(f"{impl} {model} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(lines[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, steps {args.steps}")
    print()
    print("| model | impl | median step (ms) | host step (ms) | vs reduce-overhead | peak MiB (run / steady) | max abs err | setup s | ptc graphs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        ref = next((r for r in rows if r["model"] == row["model"] and r["impl"] == "compile_reduce_overhead"), None)
        ratio = f"{row['median_ms'] / ref['median_ms']:.2f}x" if ref else "-"  # type: ignore[operator]
        print(
            f"| {row['model']} | {row['impl']} | {row['median_ms']:.4f} | {row['host_ms']:.4f} | {ratio} "
            f"| {row['peak_mib']:.1f} / {row['steady_peak_mib']:.1f} | {row['max_abs_err']:.2e} | {row['setup_s']:.1f} | {row['graphs']} |"
        )
    phased = [r for r in rows if r.get("phases")]
    if phased:
        print()
        print("Memory of one training step by phase, MiB: peak allocated within the phase / allocated after it "
              "/ peak reserved within it. Idle pool: private-pool memory no .grad occupies as the optimizer starts; "
              "input buffers: ptc's buffers for copied inputs (outside the pool). "
              "Private pools: reserved / allocated at the end. Over eager: peak reserved minus eager's.")
        print()
        names = list(cast(dict[str, list[float]], phased[0]["phases"]))
        print("| model | impl | " + " | ".join(names) + " | idle pool + input buffers | private pools | over eager |")
        print("| --- | --- | " + " | ".join("---" for _ in names) + " | --- | --- | --- |")
        for row in phased:
            phases = cast(dict[str, list[float]], row["phases"])
            cells = " | ".join(f"{p:.1f} / {a:.1f} / {r:.1f}" for p, a, r in (phases[n] for n in names))
            pools = cast(list[float], row["private_pools_mib"])
            eager = next((r for r in phased if r["model"] == row["model"] and r["impl"] == "eager"), None)
            over = "-" if eager is None else f"{_peak_reserved(row) - _peak_reserved(eager):+.1f}"
            print(f"| {row['model']} | {row['impl']} | {cells} | {row['idle_pool_mib']:.1f} + {row['input_buffer_mib']:.1f} "
                  f"| {pools[0]:.1f} / {pools[1]:.1f} | {over} |")


def _peak_reserved(row: dict[str, object]) -> float:
    return max(v[2] for v in cast(dict[str, list[float]], row["phases"]).values())


if __name__ == "__main__":
    main()
