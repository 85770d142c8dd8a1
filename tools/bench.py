"""Benchmark harness: workloads under eager, torch.compile and ptc, side by side in one run.

Each (workload, implementation) runs in its own process, so that compile caches and memory
of one never help or hurt another. Reports median step time, speedups, cold compile time
(first call), peak memory and the max relative error against eager; writes JSON and a
Markdown table.

    python tools/bench.py                       # every workload that fits this machine
    python tools/bench.py --workloads pointwise,gpt-mini-infer --impls eager,ptc
    python tools/bench.py --json out.json --markdown out.md
    python tools/bench.py --workloads bert-infer --dtype bfloat16   # the model cast to bf16

Workloads that need a package this machine lacks (transformers, timm) are reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("eager", "torch.compile", "ptc")


@dataclass(frozen=True)
class Workload:
    """A model or function, its inputs, and whether a step is inference or a training step."""

    name: str
    build: Callable[[Any, bool], tuple[Any, tuple[Any, ...]]]
    train: bool = False
    needs: str | None = None
    mode: str = "default"  # the compile mode both compilers get (reduce-overhead for decode)


def _pointwise(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    n = 2**16 if small else (2**26 if device.type == "cuda" else 2**22)
    x, w, b = (torch.randn(n, device=device) for _ in range(3))

    def fn(x: Any, w: Any, b: Any) -> Any:
        return torch.nn.functional.gelu(x * w + b) * torch.sigmoid(x) + torch.tanh(b)

    return fn, (x, w, b)


def _softmax(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    n = 256 if small else (8192 if device.type == "cuda" else 2048)
    return (lambda x: torch.softmax(x, dim=-1)), (torch.randn(n, n, device=device),)


def _layernorm(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    rows, cols = (256, 256) if small else ((16384, 4096) if device.type == "cuda" else (4096, 1024))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x, r = (torch.randn(rows, cols, device=device, dtype=dtype) for _ in range(2))
    w, b = torch.ones(cols, device=device, dtype=dtype), torch.zeros(cols, device=device, dtype=dtype)
    return (lambda x, r, w, b: torch.nn.functional.layer_norm(x + r, (cols,), w, b)), (x, r, w, b)


def _gpt_mini(device: Any, small: bool, sizes: tuple[int, int, int, int, int] = (512, 6, 8, 256, 8)) -> tuple[Any, tuple[Any, ...]]:
    import torch

    torch.manual_seed(0)
    dim, layers, heads, seq, batch = (64, 2, 4, 32, 2) if small else sizes

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = torch.nn.Embedding(1000, dim), torch.nn.Embedding(seq, dim)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.head = torch.nn.Linear(dim, 1000)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return GPT().to(device), (torch.randint(0, 1000, (batch, seq), device=device),)


def _gpt_decode(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
    # Issue 19's latency case: a 4-layer GPT at batch 1 over a 32-token window, host-bound.
    return _gpt_mini(device, small, (512, 4, 8, 32, 1))


def _gpt2_with_loss(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
    # tools/bench_distributed.py's model on one GPU: ptc.demo's GPT at GPT-2's shape (vocabulary
    # padded to 50304) with its cross-entropy inside the compiled forward, so the loss's kernels
    # (row max and sum, the logits' gradient, the head's bias gradient) are timed too.
    import torch

    sys.path[:0] = [str(p) for p in sorted(ROOT.glob("packages/ptc/src"))]
    from ptc.demo import GPT

    torch.manual_seed(0)
    vocab, dim, layers, heads, seq, batch = (512, 64, 2, 4, 32, 2) if small else (50304, 768, 12, 12, 1024, 8)

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = GPT(vocab=vocab, dim=dim, layers=layers, heads=heads, seq=seq)

        def forward(self, idx: Any, targets: Any) -> Any:
            logits = self.gpt(idx)
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    ids, targets = (torch.randint(0, vocab, (batch, seq), device=device) for _ in range(2))
    return WithLoss().to(device), (ids, targets)


# A Llama-style decoder of 8 layers (the default LlamaConfig is a 7B model).
LLAMA_8_LAYERS = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 16,
                  "num_key_value_heads": 16, "vocab_size": 32000, "max_position_embeddings": 2048}


def _hf(config_name: str, model_name: str, gpu_seq: int = 256, **overrides: Any) -> Callable[[Any, bool], tuple[Any, tuple[Any, ...]]]:
    def build(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
        import torch
        import transformers

        torch.manual_seed(0)
        # No dropout: random masks would make every implementation's output differ from the
        # reference (and training steps too); the work per step is the same without them.
        dropouts = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop")
        config = getattr(transformers, config_name)(**dict.fromkeys(dropouts, 0.0), **overrides)
        if small:
            config.num_hidden_layers, config.n_layer = 2, 2
        model = getattr(transformers, model_name)(config).to(device)
        # A CPU step at the GPU's size takes seconds on a small machine; one sequence keeps a
        # whole table within minutes there.
        seq, batch = (32, 1) if small else (gpu_seq, 8) if device.type == "cuda" else (128, 1)
        ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        if config.is_encoder_decoder:  # T5: the decoder reads the same number of tokens
            def step(i: Any) -> Any:
                return model(input_ids=i, decoder_input_ids=i).logits
        else:
            def step(i: Any) -> Any:
                out = model(i)
                return out.logits if hasattr(out, "logits") else out.last_hidden_state

        return step, (ids,)

    return build


def _timm(name: str, gpu_batch: int = 64, train: bool = False) -> Callable[[Any, bool], tuple[Any, tuple[Any, ...]]]:
    def build(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
        import timm
        import torch

        torch.manual_seed(0)
        # drop_rate and drop_path_rate stay at timm's defaults of 0: training steps are deterministic.
        model = timm.create_model(name, pretrained=False).to(device).train(train)
        batch = 1 if small else (gpu_batch if device.type == "cuda" else 4)
        return model, (torch.randn(batch, 3, 224, 224, device=device),)

    return build


def _hide_broken_torchvision() -> None:
    # A torchvision wheel built for another torch (on the CPU machine: one linked against CUDA
    # libraries) fails on import with a RuntimeError that transformers does not catch. Hidden,
    # it is simply absent, and transformers' vision models do not need it.
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules["torchvision"] = None  # type: ignore[assignment]


def _hf_vision(config_name: str, model_name: str) -> Callable[[Any, bool], tuple[Any, tuple[Any, ...]]]:
    # transformers' own ResNet-50 and ViT-B/16 (their configs' defaults): image models for
    # machines where timm cannot be imported (it needs a torchvision built for the local torch).
    def build(device: Any, small: bool) -> tuple[Any, tuple[Any, ...]]:
        _hide_broken_torchvision()
        import torch
        import transformers

        torch.manual_seed(0)
        config = getattr(transformers, config_name)(num_labels=1000)  # ImageNet's head, as timm's
        model = getattr(transformers, model_name)(config).to(device).eval()
        batch = 1 if small else (32 if device.type == "cuda" else 4)
        pixels = torch.randn(batch, 3, 224, 224, device=device)
        return (lambda x: model(x).logits), (pixels,)

    return build


WORKLOADS = {
    w.name: w
    for w in [
        Workload("pointwise", _pointwise),
        Workload("softmax", _softmax),
        Workload("layernorm-residual", _layernorm),
        Workload("gpt-mini-infer", _gpt_mini),
        Workload("gpt-mini-train", _gpt_mini, train=True),
        Workload("gpt-decode", _gpt_decode, mode="reduce-overhead"),
        # Issue 19's sizes on the GPU: GPT-2 b8x1024, BERT and Llama b8x512, ResNet-50 b64
        # (training b32), ViT-B/16 and ConvNeXt-tiny b64.
        Workload("gpt2-infer", _hf("GPT2Config", "GPT2LMHeadModel", gpu_seq=1024), needs="transformers"),
        Workload("gpt2-train", _hf("GPT2Config", "GPT2LMHeadModel", gpu_seq=1024), train=True, needs="transformers"),
        Workload("gpt2-loss-train", _gpt2_with_loss, train=True),
        Workload("bert-infer", _hf("BertConfig", "BertModel", gpu_seq=512), needs="transformers"),
        Workload("llama-infer", _hf("LlamaConfig", "LlamaForCausalLM", gpu_seq=512, **LLAMA_8_LAYERS), needs="transformers"),
        Workload("t5-infer", _hf("T5Config", "T5ForConditionalGeneration", gpu_seq=512, dropout_rate=0.0), needs="transformers"),
        Workload("resnet50-infer", _timm("resnet50"), needs="timm"),
        Workload("resnet50-train", _timm("resnet50", gpu_batch=32, train=True), train=True, needs="timm"),
        Workload("vit-infer", _timm("vit_base_patch16_224"), needs="timm"),
        Workload("convnext-infer", _timm("convnext_tiny"), needs="timm"),
        Workload("hf-resnet50-infer", _hf_vision("ResNetConfig", "ResNetForImageClassification"), needs="transformers"),
        Workload("hf-vit-infer", _hf_vision("ViTConfig", "ViTForImageClassification"), needs="transformers"),
    ]
}


# -- one (workload, implementation), in a worker process ----------------------------------------
def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _step(model: Any, inputs: tuple[Any, ...], train: bool) -> Any:
    import torch

    if not train:
        with torch.no_grad():
            return model(*inputs)
    out = model(*inputs)
    # A model that returns its own loss (a scalar) is trained on it as it stands.
    loss = out if out.dim() == 0 else out.float().pow(2).mean()
    loss.backward()
    return out.detach()


def _max_rel_error(actual: Any, expected: Any) -> float:

    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    return float((a - e).norm() / e.norm().clamp_min(1e-12))


def _in_dtype(model: Any, inputs: tuple[Any, ...], dtype_name: str) -> tuple[Any, ...]:
    """Cast the model (a module, or a step function closing over one) and its floating inputs to
    ``dtype_name``, as a user runs a model in bf16 (``model.to(torch.bfloat16)``)."""
    import torch

    dtype = getattr(torch, dtype_name)
    cells = [c.cell_contents for c in (getattr(model, "__closure__", None) or ())]
    for owner in [model, *cells]:
        if isinstance(owner, torch.nn.Module):
            owner.to(dtype)
    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)


def prepare(workload: str, impl: str, device: Any, small: bool, dtype: str) -> tuple[Workload, Any, tuple[Any, ...], Any, Any]:
    """Build ``workload`` (cast to ``dtype``), take eager's reference step, and wrap the model for
    ``impl`` (not compiled yet: that happens in the first call). Returns spec, model, inputs,
    reference and the callable to time."""
    import torch

    spec = WORKLOADS[workload]
    model, inputs = spec.build(device, small)
    if dtype != "default":
        inputs = _in_dtype(model, inputs, dtype)
    reference = _step(model, inputs, spec.train)
    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)
    if impl == "torch.compile":
        return spec, model, inputs, reference, torch.compile(model, mode=spec.mode)
    if impl == "ptc":
        sys.path[:0] = [str(p) for p in sorted(ROOT.glob("packages/*/src"))]
        import ptc

        return spec, model, inputs, reference, ptc.compile(model, mode=spec.mode)
    return spec, model, inputs, reference, model


def run_worker(workload: str, impl: str, device_name: str, steps: int, small: bool, dtype: str = "default") -> dict[str, Any]:
    """Measure one implementation of one workload; return its numbers."""
    import torch

    device = torch.device(device_name)
    spec, model, inputs, reference, compiled = prepare(workload, impl, device, small, dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _sync(device)
    start = time.perf_counter()
    first = _step(compiled, inputs, spec.train)
    _sync(device)
    cold = time.perf_counter() - start
    # Whether the output has eager's layout (a compiler may hand back a view of a padded buffer).
    same_stride = tuple(first.stride()) == tuple(reference.stride())
    # CUDA-graph modes return outputs that the next replay overwrites.
    first = first.clone()
    for _ in range(3):
        _step(compiled, inputs, spec.train)
    # The peak of the steps alone (the first call's includes compiling: autotuning buffers).
    if device.type == "cuda":
        torch.cuda.synchronize()
        compile_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        _sync(device)
        t0 = time.perf_counter()
        _step(compiled, inputs, spec.train)
        _sync(device)
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        steady_peak = torch.cuda.max_memory_allocated()
        peak = max(compile_peak, steady_peak)
    else:
        peak = steady_peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024
    return {
        "workload": workload,
        "impl": impl,
        "device": device_name,
        "median_ms": statistics.median(times) * 1e3,
        "cold_s": cold,
        "peak_mb": peak / 2**20,
        "steady_peak_mb": steady_peak / 2**20,
        "max_rel_error": _max_rel_error(first, reference),
        "stride_as_eager": same_stride,
    }


# -- the parent: one process per (workload, implementation) -------------------------------------
def _unavailable(workload: Workload) -> str | None:
    """Why this machine cannot run the workload, or None when it can."""
    import importlib

    if workload.needs is None:
        return None
    try:
        importlib.import_module(workload.needs)
    except Exception as exc:  # an installed package can fail to import too (timm without a working torchvision)
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"skipped: {workload.needs} cannot be imported ({type(exc).__name__}: {first})"
    return None


def _run_one(workload: str, impl: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", workload, impl, "--device", args.device, "--steps", str(args.steps), "--dtype", args.dtype]
    if args.small:
        cmd.append("--small")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    lines = proc.stderr.strip().splitlines() or ["no output"]
    # The exception line, not CUDA's trailing advice ("Compile with TORCH_USE_CUDA_DSA ...").
    errors = [line for line in lines if not line.startswith(" ") and ("Error" in line or "Exception" in line)]
    reason = (errors or lines)[-1][:400]
    print(f"--- {workload} {impl} failed; stderr tail:", *lines[-15:], sep="\n", file=sys.stderr)
    return {"workload": workload, "impl": impl, "error": reason}


def _fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def markdown(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per workload, ratios against eager and torch.compile."""
    by = {(r["workload"], r["impl"]): r for r in results}
    rows = [
        "| workload | eager ms | torch.compile ms | ptc ms | ptc vs eager | ptc vs torch.compile | cold tc s | cold ptc s"
        " | ptc peak MB | peak vs tc | steady peak vs tc | ptc max rel err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["workload"] for r in results):
        e, t, p = (by.get((name, i), {}) for i in IMPLS)
        ratio_e = e["median_ms"] / p["median_ms"] if "median_ms" in e and "median_ms" in p else None
        ratio_t = t["median_ms"] / p["median_ms"] if "median_ms" in t and "median_ms" in p else None
        peak_t = p["peak_mb"] / t["peak_mb"] if t.get("peak_mb") and "peak_mb" in p else None
        steady_t = p["steady_peak_mb"] / t["steady_peak_mb"] if t.get("steady_peak_mb") and "steady_peak_mb" in p else None
        cells = [
            name,
            _fmt(e.get("median_ms"), "{:.3f}"),
            _fmt(t.get("median_ms"), "{:.3f}"),
            _fmt(p.get("median_ms"), "{:.3f}") if "error" not in p else f"error: {p['error'][:60]}",
            _fmt(ratio_e, "{:.2f}x"),
            _fmt(ratio_t, "{:.2f}x"),
            _fmt(t.get("cold_s"), "{:.2f}"),
            _fmt(p.get("cold_s"), "{:.2f}"),
            _fmt(p.get("peak_mb"), "{:.0f}"),
            _fmt(peak_t, "{:.2f}x"),
            _fmt(steady_t, "{:.2f}x"),
            _fmt(p.get("max_rel_error"), "{:.1e}"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def parse_common(parser: argparse.ArgumentParser, argv: list[str] | None, workloads: str, impls: Sequence[str]) -> argparse.Namespace:
    """Add the options every benchmark script of this folder shares, parse, and pick the device."""
    parser.add_argument("--workloads", default=workloads)
    parser.add_argument("--impls", default=",".join(impls))
    parser.add_argument("--device", default=None)
    parser.add_argument("--small", action="store_true", help="tiny sizes, for a quick check")
    parser.add_argument("--dtype", default="default", choices=["default", "float32", "bfloat16", "float16"],
                        help="cast each model and its floating inputs to this dtype (default: as the workload builds them)")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--markdown", type=Path)
    args = parse_common(parser, argv, ",".join(WORKLOADS), IMPLS)
    if args.worker:
        print(json.dumps(run_worker(args.worker[0], args.worker[1], args.device, args.steps, args.small, args.dtype)))
        return 0
    results = []
    for name in args.workloads.split(","):
        reason = _unavailable(WORKLOADS[name])
        if reason is not None:
            results.append({"workload": name, "impl": "ptc", "error": reason})
            continue
        for impl in args.impls.split(","):
            result = _run_one(name, impl, args)
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    table = markdown(results)
    write_results(args, table, results, "bench.json")
    if args.markdown:
        args.markdown.write_text(table)
    return 0


def write_results(args: argparse.Namespace, table: str, results: Any, out_name: str) -> None:
    """Print the table; write the results to ``--json`` and, on the device machine, to $OUT."""
    print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    out = os.environ.get("OUT")
    if out:
        Path(out, out_name).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
