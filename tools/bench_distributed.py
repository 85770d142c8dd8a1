"""Distributed training benchmark: a GPT-2 (124M) or a 1.1B Llama-style decoder under DDP and FSDP2, eager vs torch.compile vs ptc.

Each implementation runs in its own pair of processes (2 ranks, spawned here, torchrun-like:
a file store, ranks 0 and 1), trains the same model on the same batches, and reports training
steps per second (median over timed steps), the first step's time (compile included), peak
memory per rank and the largest difference of its losses from eager's. One Markdown table.

    python tools/bench_distributed.py --device cuda                  # 2 GPUs, NCCL, GPT-2 124M
    python tools/bench_distributed.py --device cpu --small           # gloo, a small GPT
    python tools/bench_distributed.py --impls eager-ddp,ptc-ddp --steps 20 --json out.json
    python tools/bench_distributed.py --device cuda --model llama-1b --impls eager-fsdp2,ptc-fsdp2,torch.compile-fsdp2
    python tools/bench_distributed.py --device cuda --profile prof/   # + GPU ms per step, op tables in prof/

Implementations: eager-ddp, torch.compile-ddp, ptc-ddp (the model compiled inside DDP:
``ptc.compile(DDP(model))``), and eager-fsdp2, torch.compile-fsdp2, ptc-fsdp2 (each block
compiled, then ``fully_shard`` on every block and on the root).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The packages from this checkout (ptc.demo's GPT, ptc itself), as tools/bench.py finds them.
sys.path[:0] = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
IMPLS = ("eager-ddp", "torch.compile-ddp", "ptc-ddp", "eager-fsdp2", "torch.compile-fsdp2", "ptc-fsdp2")
WORLD = 2


def _config(small: bool, model: str = "gpt2") -> dict[str, int]:
    if model == "llama-1b":
        # A Llama-style decoder of about 1.1B parameters (TinyLlama's shape, full multi-head).
        if small:
            return {"vocab": 512, "dim": 64, "layers": 2, "heads": 4, "ffn": 172, "seq": 64, "batch": 2}
        return {"vocab": 32000, "dim": 2048, "layers": 22, "heads": 32, "ffn": 5632, "seq": 1024, "batch": 4}
    if small:
        return {"vocab": 512, "dim": 64, "layers": 2, "heads": 4, "seq": 64, "batch": 4}
    return {"vocab": 50304, "dim": 768, "layers": 12, "heads": 12, "seq": 1024, "batch": 8}


def _build(cfg: dict[str, int], model: str) -> Any:
    return _build_llama(cfg) if model == "llama-1b" else _build_gpt(cfg)


def _build_llama(cfg: dict[str, int]) -> Any:
    """transformers' LlamaForCausalLM at ``cfg``'s shape, called as (ids, targets) -> loss."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["dim"], intermediate_size=cfg["ffn"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"], max_position_embeddings=cfg["seq"],
    )  # fmt: skip

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.llama = transformers.LlamaForCausalLM(config)

        def blocks(self) -> Any:
            return self.llama.model.layers

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            logits = self.llama(idx).logits
            loss: torch.Tensor = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            return loss

    return WithLoss()


def _build_gpt(cfg: dict[str, int]) -> Any:
    """ptc.demo's GPT (GPT-2's shape at the full config) with a cross-entropy loss."""
    import torch

    from ptc.demo import GPT

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = GPT(vocab=cfg["vocab"], dim=cfg["dim"], layers=cfg["layers"], heads=cfg["heads"], seq=cfg["seq"])

        def blocks(self) -> Any:
            return self.gpt.blocks

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            logits = self.gpt(idx)
            loss: torch.Tensor = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            return loss

    return WithLoss()


def _wrap(impl: str, model: Any, device: Any) -> Any:
    """``model`` wrapped and compiled the way ``impl`` says."""
    import torch

    kind, parallel = impl.rsplit("-", 1)
    compiler: Any = None
    if kind == "torch.compile":
        compiler = torch.compile
    elif kind == "ptc":
        import ptc

        compiler = ptc.compile
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        return compiler(ddp) if compiler else ddp
    from torch.distributed.fsdp import fully_shard

    blocks = model.blocks()
    for i, block in enumerate(blocks):
        if compiler is not None:
            # The common recipe: each transformer block compiled, then sharded.
            block = compiler(block)
            blocks[i] = block
        fully_shard(block)
    fully_shard(model)
    return model


def _graphs_compiled(impl: str) -> int | None:
    """How many aten graphs the compiler made in this process (forward and backward count apart):
    a row whose model silently ran eagerly shows 0."""
    if impl.startswith("ptc-"):
        from ptc.pipeline import STATS

        return STATS.graphs
    if impl.startswith("torch.compile-"):
        from torch._dynamo.utils import counters

        # Its AOT counter counts forward and backward as one graph (a compiled block reused counts once).
        return int(counters["aot_autograd"]["total"])
    return None


def _profile_steps(wrapped: Any, optimizer: Any, batches: list[Any], rank: int, impl: str, directory: str) -> dict[str, float]:
    """Two more steps, under the profiler on rank 0: GPU milliseconds per step (all device work, and
    NCCL's kernels in it) and device events per step; rank 0's table of ops goes to ``directory``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    steps = 2
    prof: Any = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if rank == 0 else None
    with prof if prof is not None else contextlib.nullcontext():
        for idx, targets in batches[:steps]:
            wrapped(idx, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    if prof is None:
        return {}
    events = prof.events()
    # Device work is summed through the host ops that launched it (the profiler table's "Self CUDA
    # time total"): the device-side events also hold annotations (DDP.forward's whole range).
    total = sum(e.self_device_time_total for e in events if e.device_type == torch.profiler.DeviceType.CPU)
    kernels = [e for e in events if e.device_type == torch.profiler.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    nccl = sum(e.device_time for e in kernels if e.name.startswith("ncclDevKernel"))
    Path(directory).mkdir(parents=True, exist_ok=True)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=40)
    (Path(directory) / f"{impl}.txt").write_text(table)
    return {"gpu_ms": total / 1e3 / steps, "gpu_nccl_ms": nccl / 1e3 / steps, "gpu_kernels_per_step": len(kernels) / steps}


def _worker(rank: int, impl: str, store: str, args: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist

    # A rank stuck past the row's time prints where it is before the parent kills it.
    faulthandler.dump_traceback_later(max(1.0, args.impl_timeout - 10), exit=True)
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        # Two ranks share the machine's cores: each takes its half, as torchrun's OMP_NUM_THREADS does.
        torch.set_num_threads(max(1, (os.cpu_count() or WORLD) // WORLD))
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        cfg = _config(args.small, args.model)
        torch.manual_seed(0)
        model = _build(cfg, args.model).to(device)
        if args.dtype == "bfloat16":
            model = model.to(torch.bfloat16)
        wrapped = _wrap(impl, model, device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        gen = torch.Generator().manual_seed(1000 + rank)
        shape = (cfg["batch"], cfg["seq"])
        batches = [(torch.randint(cfg["vocab"], shape, generator=gen).to(device), torch.randint(cfg["vocab"], shape, generator=gen).to(device))
                   for _ in range(4)]  # fmt: skip
        losses, times = [], []
        for step in range(args.warmup + args.steps):
            idx, targets = batches[step % len(batches)]
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = wrapped(idx, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())  # .item() waits for the step on the GPU
            times.append(time.perf_counter() - start)
        timed = times[args.warmup :]
        profile = _profile_steps(wrapped, optimizer, batches, rank, impl, args.profile) if args.profile and cuda else {}
        peak = torch.cuda.max_memory_allocated(device) if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if rank == 0:
            result = {"impl": impl, "steps_per_s": 1.0 / statistics.median(timed), "first_step_s": times[0], "peak_bytes": peak, "losses": losses,
                      "graphs": _graphs_compiled(impl), **profile}  # fmt: skip
            Path(out).write_text(json.dumps(result))
        dist.barrier()  # no rank tears its connections down while the other still uses them
    finally:
        dist.destroy_process_group()


def _run(impl: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from torch.multiprocessing.spawn import spawn

    store, out = workdir / f"{impl}.store", workdir / f"{impl}.json"
    try:
        context = spawn(_worker, args=(impl, str(store), args, str(out)), nprocs=WORLD, join=False)
        deadline = time.monotonic() + args.impl_timeout
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                # A hung collective would stop every later row: this one is reported and killed.
                for process in context.processes:
                    process.kill()
                return {"impl": impl, "error": f"no result within {args.impl_timeout:.0f} s"}
    except Exception as exc:  # one implementation failing is a row of the table, not the end of the run
        return {"impl": impl, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:160]}"}
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _table(results: list[dict[str, Any]]) -> str:
    eager = {r["impl"].rsplit("-", 1)[1]: r for r in results if r["impl"].startswith("eager-") and "error" not in r}
    lines = ["| impl | steps/s | vs eager | first step (s) | peak MiB/rank | max loss diff vs eager | graphs |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['impl']} | failed: {r['error']} | | | | | |")
            continue
        base = eager.get(r["impl"].rsplit("-", 1)[1])
        ratio = f"{r['steps_per_s'] / base['steps_per_s']:.2f}x" if base else "-"
        diff = f"{max(abs(a - b) for a, b in zip(r['losses'], base['losses'])):.2e}" if base else "-"
        lines.append(f"| {r['impl']} | {r['steps_per_s']:.2f} | {ratio} | {r['first_step_s']:.1f} | {r['peak_bytes'] / 2**20:.0f} | {diff} | {r.get('graphs') if r.get('graphs') is not None else '-'} |")
    profiled = [r for r in results if "gpu_ms" in r]
    if profiled:
        lines += ["", "| impl | GPU ms/step | of it NCCL | device events/step |", "|---|---|---|---|"]
        lines += [f"| {r['impl']} | {r['gpu_ms']:.1f} | {r['gpu_nccl_ms']:.1f} | {r['gpu_kernels_per_step']:.0f} |" for r in profiled]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", choices=("gpt2", "llama-1b"), default="gpt2", help="GPT-2 124M (ptc.demo's), or a 1.1B Llama-style decoder (transformers')")
    parser.add_argument("--small", action="store_true", help="a small GPT (the default on the CPU is GPT-2 124M too: slow)")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--profile", help="profile two more steps per implementation on rank 0 (CUDA): kernel tables here")
    parser.add_argument("--impl-timeout", type=float, default=600, help="seconds an implementation may take before its row says so")
    args = parser.parse_args(argv)
    impls = [i for i in args.impls.split(",") if i]
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown:
        parser.error(f"unknown implementation(s) {', '.join(unknown)}: valid ones are {', '.join(IMPLS)}")
    import torch

    if args.device == "cuda" and torch.cuda.device_count() < WORLD:
        parser.error(f"--device cuda needs {WORLD} GPUs, this machine has {torch.cuda.device_count()}")
    os.environ.setdefault("PYTHONPATH", os.pathsep.join(str(p) for p in sorted((ROOT / "packages").glob("*/src"))))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for impl in impls:
            results.append(_run(impl, args, Path(tmp)))
            # Each row as it is done (a run cut short keeps the rows it has).
            print(_table(results).splitlines()[-1], flush=True)
    table = _table(results)
    name = {"gpt2": "GPT-2 124M", "llama-1b": "Llama-style 1.1B"}[args.model]
    sys.stdout.write(f"{'small ' if args.small else ''}{name}, {args.device}, {args.dtype}, {WORLD} ranks\n{table}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
