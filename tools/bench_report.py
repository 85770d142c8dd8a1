"""How long the compile report of a GPT-2 training step takes to write, and its overview to load.

    python tools/bench_report.py [--layers 12] [--out DIR] [--screenshot docs/report-overview.png]

Builds transformers' GPT2LMHeadModel (a small config with ``--layers`` blocks; a nanoGPT-style
model when transformers is missing), compiles one training step (forward, loss, backward) with
ptc's inductor backend on the CPU while the report records, in this fresh process with empty
caches. Then times ``ptc.report.write`` (the report's cost beyond the compile) and headless
Chromium loading the overview page, beside Chromium loading an empty page (its own start-up).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


def _gpt2(layers: int) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    try:
        import transformers as tf
    except ImportError:
        sys.path.insert(0, str(ROOT / "tools"))
        from bench import _gpt_mini

        model, (ids,) = _gpt_mini(torch.device("cpu"), True)
        return model, ids
    config = tf.GPT2Config(n_layer=layers, n_head=4, n_embd=128, vocab_size=2048, n_positions=128, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = tf.GPT2LMHeadModel(config).train()
    return (lambda ids: model(ids).logits), torch.randint(0, 2048, (2, 64))


def _chromium(page: str, *args: str) -> float:
    """Seconds headless Chromium takes to load ``page`` and exit (a fresh profile)."""
    exe = shutil.which("chromium")
    if exe is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="ptc-chromium-") as profile:
        start = time.perf_counter()
        subprocess.run(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page],
            capture_output=True,
            check=True,
            timeout=120,
        )
        return time.perf_counter() - start


def main() -> None:
    """Print the compile time, the report's write time and size, and the overview's load time."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--out", default=None, help="report directory (default: a temporary one)")
    parser.add_argument("--screenshot", default=None, help="also save a screenshot of the overview page here")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="ptc-bench-report-")
    os.environ["PTC_CACHE_DIR"] = cache
    os.environ["PTC_INDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    out = args.out or os.path.join(cache, "report")

    import torch

    import ptc

    step, ids = _gpt2(args.layers)
    ptc.report.start()
    compiled = ptc.compile(step)
    start = time.perf_counter()
    logits = compiled(ids)
    logits.float().pow(2).mean().backward()
    compile_s = time.perf_counter() - start
    ptc.report.stop()
    with torch.no_grad():
        expected = step(ids)
    assert torch.allclose(logits.detach(), expected, atol=1e-3, rtol=1e-3), "compiled logits differ from eager"

    start = time.perf_counter()
    index = ptc.report.write(out)
    write_s = time.perf_counter() - start
    files = [p for p in Path(out).rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    biggest = max(files, key=lambda p: p.stat().st_size)

    blank = Path(cache) / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>")
    _chromium(blank.as_uri(), "--dump-dom")  # warm the disk cache of Chromium's own files
    blank_s = min(_chromium(blank.as_uri(), "--dump-dom") for _ in range(3))
    page_s = min(_chromium(Path(index).as_uri(), "--dump-dom") for _ in range(3))
    if args.screenshot:
        _chromium(Path(index).as_uri(), f"--screenshot={os.path.abspath(args.screenshot)}", "--window-size=1200,1500")

    print(f"model: GPT-2 ({args.layers} layers), one training step on CPU, backend inductor")
    print(f"first step (capture + aot + decomp + inductor + run): {compile_s:.2f} s")
    print(
        f"report written in {write_s:.2f} s: {len(files)} files, {total / 2**20:.2f} MiB, index.html {Path(index).stat().st_size / 1024:.0f} KiB, largest {biggest.name} {biggest.stat().st_size / 1024:.0f} KiB"
    )
    print(
        f"chromium load of index.html: {page_s:.2f} s (a blank page: {blank_s:.2f} s, so the page itself {max(page_s - blank_s, 0):.2f} s)"
    )
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")
    print(f"report: {index}")
    if args.out:  # the report lives elsewhere: the caches are not needed any more
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
