"""Dynamic shapes: compile count and compile time over a sweep of sequence lengths, ptc beside torch.compile.

A GPT-2-style model (transformers' GPT2LMHeadModel when installed, else a nanoGPT-style model)
is called at 16 sequence lengths, once each, under a compiler and a dynamic policy. Reported
per cell: graphs compiled, total compile time (time of every call minus the steady time of a
call at that length, i.e. what the first call at a new size costs), the max relative error
against eager over all lengths, and, with --kernels, the steady time per call at a few lengths
for the dynamic compile against a static compile at the same length (on CUDA also the GPU time
of the kernels per call, from the profiler: a small model's call time is mostly host time).

    python tools/bench_dynamic.py                            # CPU, both compilers, both policies
    python tools/bench_dynamic.py --device cuda --kernels    # on the GPU machine
    python tools/bench_dynamic.py --impls ptc --policies true

Each (compiler, policy) cell runs in its own process with fresh, empty compile caches on disk
(TorchInductor's, Triton's and ptc-inductor's), so compile times are cold for both compilers
and no cell or earlier run helps another.
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
LENGTHS = [17, 24, 31, 40, 47, 56, 63, 72, 81, 90, 97, 104, 113, 120, 127, 64]
POLICIES = {"default": None, "true": True}


def _model(device: Any) -> Any:
    import torch

    try:
        import transformers as tf

        config = tf.GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=2048, n_positions=256, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
        model = tf.GPT2LMHeadModel(config)

        def logits(m: Any, ids: Any) -> Any:
            return m(ids).logits
    except ImportError:
        from torch import nn

        class Block(nn.Module):
            def __init__(self, dim: int = 256, heads: int = 4) -> None:
                super().__init__()
                self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(dim), nn.LayerNorm(dim)
                self.qkv, self.proj, self.fc, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

            def forward(self, x: Any) -> Any:
                b, t, c = x.shape
                q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, 2))
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
                return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

        class GPT(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.wte, self.wpe = nn.Embedding(2048, 256), nn.Embedding(256, 256)
                self.blocks = nn.ModuleList(Block() for _ in range(4))

            def forward(self, idx: Any) -> Any:
                x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
                for block in self.blocks:
                    x = block(x)
                return x @ self.wte.weight.t()

        model = GPT()

        def logits(m: Any, ids: Any) -> Any:
            return m(ids)

    return model.to(device).eval(), logits


def _compiler(impl: str, policy: bool | None) -> tuple[Any, Any]:
    """(compile function, graph counter) for one implementation."""
    if impl == "ptc":
        import ptc
        from ptc.pipeline import STATS

        STATS.reset()
        return (lambda m: ptc.compile(m, dynamic=policy)), (lambda: STATS.graphs)
    import torch
    import torch._dynamo

    counts = torch._dynamo.utils.counters
    counts.clear()
    return (lambda m: torch.compile(m, dynamic=policy)), (lambda: counts["stats"]["unique_graphs"])


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _steady(fn: Any, device: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _device_ms(fn: Any, repeats: int = 20) -> float:
    """GPU time of the kernels one call launches (summed from the profiler, in ms): the kernels'
    own cost, which host overhead of a small model would otherwise hide."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / repeats / 1e3


def run_cell(impl: str, policy_name: str, device_name: str, kernels: bool) -> dict[str, Any]:
    """One (compiler, policy) cell, in this process."""
    import torch

    torch.manual_seed(0)
    device = torch.device(device_name)
    model, logits = _model(device)
    compile_fn, graphs = _compiler(impl, POLICIES[policy_name])
    compiled = compile_fn(model)
    compile_seconds, worst = 0.0, 0.0
    per_length: list[float] = []
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.randint(0, 2048, (2, length), device=device)
            _sync(device)
            start = time.perf_counter()
            out = logits(compiled, ids)
            _sync(device)
            first = time.perf_counter() - start
            steady = _steady(lambda ids=ids: logits(compiled, ids), device)
            compile_seconds += max(first - steady, 0.0)
            per_length.append(round(max(first - steady, 0.0), 2))
            expected = logits(model, ids)
            worst = max(worst, float((out - expected).abs().max() / expected.abs().max().clamp_min(1e-12)))
        row: dict[str, Any] = {"impl": impl, "policy": policy_name, "device": device_name, "lengths": len(LENGTHS),
                               "graphs": graphs(), "compile_s": round(compile_seconds, 2), "max_rel_err": worst,
                               "first_call_s": per_length}  # fmt: skip
        if kernels:
            static_fn, _ = _compiler(impl, False)
            for length in (31, 64, 127):
                ids = torch.randint(0, 2048, (2, length), device=device)
                static = static_fn(model)
                logits(static, ids)
                row[f"dyn_ms@{length}"] = round(_steady(lambda ids=ids: logits(compiled, ids), device, 20) * 1e3, 3)
                row[f"static_ms@{length}"] = round(_steady(lambda s=static, ids=ids: logits(s, ids), device, 20) * 1e3, 3)
                if device.type == "cuda":
                    row[f"dyn_gpu_ms@{length}"] = round(_device_ms(lambda ids=ids: logits(compiled, ids)), 4)
                    row[f"static_gpu_ms@{length}"] = round(_device_ms(lambda s=static, ids=ids: logits(s, ids)), 4)
    return row


def main(argv: list[str] | None = None) -> int:
    """Run every cell in its own process and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--impls", default="ptc,torch.compile")
    parser.add_argument("--policies", default="default,true")
    parser.add_argument("--kernels", action="store_true", help="also time dynamic against static kernels at 3 lengths")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cell:
        impl, policy = args.cell.split(":")
        print(json.dumps(run_cell(impl, policy, args.device, args.kernels)))
        return 0
    rows = []
    for impl in args.impls.split(","):
        for policy in args.policies.split(","):
            cmd = [sys.executable, __file__, "--cell", f"{impl}:{policy}", "--device", args.device] + (["--kernels"] if args.kernels else [])
            with tempfile.TemporaryDirectory(prefix="bench_dynamic_") as tmp:
                caches = {name: os.path.join(tmp, name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PTC_INDUCTOR_CACHE_DIR")}
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **caches})
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode != 0 or not lines:
                rows.append({"impl": impl, "policy": policy, "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]})
            else:
                rows.append(json.loads(lines[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    keys = sorted({k for r in rows for k in r} - {"impl", "policy"}, key=lambda k: (k != "graphs", k != "compile_s", k))
    print("| impl | dynamic | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for r in rows:
        print(f"| {r['impl']} | {r['policy']} | " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
