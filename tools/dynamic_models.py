"""Real models over changing sizes: graphs compiled and correctness under each dynamic policy.

Each model of ptc's real-model matrix (packages/ptc/tests/test_real_models_gpu.py: transformers
and timm models, those that import here) is compiled by ptc and called at several sizes of its
varying dim (the sequence length for token models, the batch for image models), inference and
one training step per size, under ``dynamic=None`` and ``dynamic=True``. Each call is compared
with eager (float32: max relative error) and the graphs the pipeline compiled are counted.
One JSON line per (model, policy, mode), then a Markdown table.

    python tools/dynamic_models.py [--device cuda] [--models gpt2,bert] [--modes infer,train]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEQUENCES = [17, 32, 45, 9, 60]
BATCHES = [2, 3, 5, 4]


def _vary(name: str, inputs: tuple[Any, ...], size: int) -> tuple[Any, ...]:
    import torch

    out = []
    for x in inputs:
        if x.dtype == torch.long:  # tokens: (batch, length)
            out.append(torch.randint(0, 512, (x.shape[0], size)))
        else:  # images: (batch, channels, h, w)
            out.append(torch.randn(size, *x.shape[1:]))
    return tuple(out)


def run(name: str, policy: bool | None, mode: str, device: str) -> dict[str, Any]:
    """One model under one policy: every size, compiled beside eager."""
    import torch

    sys.path.insert(0, str(ROOT / "packages" / "ptc" / "tests"))
    import test_real_models_gpu as matrix

    import ptc
    from ptc.pipeline import STATS

    torch.manual_seed(0)
    model, inputs, pick = matrix.MODELS[name]()
    images = inputs[0].dtype != torch.long
    sizes = BATCHES if images else SEQUENCES
    model = model.to(device)
    model.train(mode == "train")
    twin = copy.deepcopy(model)
    compiled = ptc.compile(twin, dynamic=policy)
    STATS.reset()
    worst, worst_grad, start = 0.0, 0.0, time.perf_counter()
    for size in sizes:
        args = tuple(a.to(device) for a in _vary(name, inputs, size))
        if mode == "infer":
            with torch.no_grad():
                got, expected = pick(compiled(*args)), pick(model(*args))
        else:
            got, expected = pick(compiled(*args)), pick(model(*args))
            # A fixed random projection: a norm's output squared sums to a constant, whose
            # gradients would be rounding noise.
            probe = torch.randn(expected.shape, generator=torch.Generator().manual_seed(size)).to(device)
            (got.float() * probe).mean().backward()
            (expected.float() * probe).mean().backward()
            pairs = [(p, q) for p, q in zip(model.parameters(), twin.parameters()) if p.grad is not None and q.grad is not None]
            # A gradient that is zero in exact arithmetic (BERT's key bias: softmax ignores a
            # shift of every score) is rounding noise in both: judge it on the model's scale.
            floor = 1e-3 * max((float(p.grad.abs().max()) for p, _ in pairs), default=1.0)
            for p, q in pairs:
                scale = max(float(p.grad.abs().max()), floor) or 1.0
                worst_grad = max(worst_grad, float((q.grad - p.grad).abs().max()) / scale)
            for p, q in zip(model.parameters(), twin.parameters()):
                p.grad, q.grad = None, None
        worst = max(worst, float((got.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12)))
    return {"model": name, "policy": "default" if policy is None else str(policy).lower(), "mode": mode, "sizes": sizes,
            "graphs": STATS.graphs, "max_rel_err": worst, "max_rel_grad_err": worst_grad,
            "seconds": round(time.perf_counter() - start, 1), "fallbacks": sorted(STATS.fallbacks)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run every (model, policy, mode) in its own process; print JSON lines and a table."""
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="gpt2,bert,llama,t5,nanogpt_sdpa,resnet50,convnext_tiny,vit_base_patch16_224")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--policies", default="default,true")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    policies = {"default": None, "true": True, "false": False}
    if args.cell:
        name, policy, mode = args.cell.split(":")
        print(json.dumps(run(name, policies[policy], mode, args.device)))
        return 0
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            for policy in args.policies.split(","):
                cmd = [sys.executable, __file__, "--cell", f"{name}:{policy}:{mode}", "--device", args.device]
                try:
                    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout)
                    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                    row = json.loads(lines[-1]) if lines else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:240]}
                except subprocess.TimeoutExpired:
                    row = {"error": f"over {args.timeout} s"}
                row = {"model": name, "policy": policy, "mode": mode, **row}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("| model | mode | dynamic | graphs | max rel err | max rel grad err | s | note |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = r.get("error", ", ".join(r.get("fallbacks", [])))
        print(f"| {r['model']} | {r['mode']} | {r['policy']} | {r.get('graphs', '')} | {r.get('max_rel_err', '')} "
              f"| {r.get('max_rel_grad_err', '')} | {r.get('seconds', '')} | {note} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
