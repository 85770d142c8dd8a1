"""Sweep real model code through ptc-capture beside torch.compile: graphs, breaks and eager's results.

    python tools/capture_sweep.py --source transformers --limit 20 --out sweep.json
    python tools/capture_sweep.py --source timm --filter '^resnet' --device cuda --jobs 8
    python tools/capture_sweep.py --source all --device cuda --jobs 16 --train --out sweep.json --check
    python tools/capture_sweep.py --source all --device cuda --jobs 16 --write-baseline

Models: every name in timm's registry (``timm.list_models()``, ``pretrained=False``, input of
the model's default config size) and every class in transformers' ``*Model``, ``*ForCausalLM``,
``*ForSequenceClassification`` and ``*ForImageClassification`` auto mappings, built from its
default config with fewer layers (``num_hidden_layers=2`` and the like) and random weights.
Nothing is downloaded (HF_HUB_OFFLINE=1). Batch 2. Models whose parameters and buffers need more
than --max-gb, that fail to build, or whose eager forward fails on the sweep's inputs are
skipped, with the reason.

Per model: the eval-mode forward under ``ptc.explain`` (ptc-capture with the eager backend)
and under ``torch._dynamo.explain`` (torch.compile's count, as the peer we measure against);
ptc's outputs are compared with eager's (max relative error, a wrong result is a hard failure).
A model whose own code computes something else when compiled (transformers takes other paths
under ``torch.compiler.is_compiling()``, e.g. UMT5's decoder materializes its causal mask) is
``model_diverges`` when torch.compile's result (eager backend) equals ptc's.
With --train, the train-mode forward (dropout off) is explained too and its gradients compared.
With --backend (e.g. inductor), the model also runs through ``ptc.compile`` and is compared.

Each model runs in its own process, forked from a server that imported torch, the model libraries
and ptc once (--timeout each), so a crash or a hang ends only that
model. Results go to --out (JSON) and a markdown table beside it (same name, ``.md``).

A run longer than one call allows is split with --shard K/N (and --deadline, which stops
starting models in time to write the results); ``--resume`` skips the models earlier files
have results for, and ``--load`` merges the files.

``--check`` exits non-zero when a model gives a wrong result, when ptc raises where eager runs,
or when a model not listed in tools/capture_sweep_baseline.json has more graph breaks than
torch.compile: that list may only shrink. ``--write-baseline`` rewrites the list from this
run (only for a full sweep: --limit and --filter leave the other entries as they were).
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BASELINE = Path(__file__).resolve().parent / "capture_sweep_baseline.json"
BATCH = 2
SEQUENCE = 16

# transformers' auto mappings the sweep builds, and the config fields it shrinks (where the
# config has them) so that every model builds in seconds: the layer counts.
MAPPINGS = (
    "MODEL_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
)
LAYER_FIELDS = (
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_encoder_layers", "num_decoder_layers",
    "encoder_layers", "decoder_layers", "depth",
)  # fmt: skip
# When layers alone leave a model over --max-gb: first fewer experts, a smaller vocabulary and
# narrower feed-forward layers (which no other size depends on), then narrower attention too.
SHRINK_STAGES: tuple[dict[str, int], ...] = (
    {},
    {"vocab_size": 1024, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
     "intermediate_size": 256, "moe_intermediate_size": 256, "d_ff": 256, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256},
    {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "d_model": 64,
     "n_embd": 64, "n_head": 4, "encoder_attention_heads": 4, "decoder_attention_heads": 4},
)  # fmt: skip


# -- the model list ---------------------------------------------------------------------------


def _timm_entries() -> list[dict[str, Any]]:
    import timm

    return [{"id": f"timm/{name}", "source": "timm", "name": name} for name in timm.list_models()]


def _transformers_entries() -> list[dict[str, Any]]:
    from transformers.models.auto import modeling_auto

    seen: dict[str, dict[str, Any]] = {}
    for mapping in MAPPINGS:
        for model_type, names in getattr(modeling_auto, mapping).items():
            for name in names if isinstance(names, (tuple, list)) else (names,):
                seen.setdefault(name, {"id": f"transformers/{name}", "source": "transformers", "name": name,
                                       "model_type": model_type})
    return sorted(seen.values(), key=lambda e: e["id"])


def list_entries(source: str, pattern: str | None, limit: int | None) -> list[dict[str, Any]]:
    """The models to sweep, in a stable order."""
    entries: list[dict[str, Any]] = []
    if source in ("timm", "all"):
        entries += _timm_entries()
    if source in ("transformers", "all"):
        entries += _transformers_entries()
    if pattern:
        entries = [e for e in entries if re.search(pattern, e["id"])]
    return entries[:limit] if limit else entries


# -- one model (runs in its own subprocess) -----------------------------------------------------


class Skip(Exception):
    """The model cannot be swept here (it fails to build or to run eagerly, or is too large)."""


def _bytes_of(build: Callable[[], Any]) -> int | None:
    """Parameter and buffer bytes of the model ``build`` makes, measured on the meta device."""
    import torch

    try:
        with torch.device("meta"):
            model = build()
    except Exception:
        return None  # some models cannot build on meta; the real build then decides
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _build_timm(entry: dict[str, Any], device: str, max_bytes: int) -> tuple[Any, dict[str, Any]]:
    import timm
    import torch

    def build() -> Any:
        torch.manual_seed(0)
        return timm.create_model(entry["name"], pretrained=False)

    size = _bytes_of(build)
    if size is not None and size > max_bytes:
        raise Skip(f"needs {size / 2**30:.1f} GB")
    model = build()
    shape = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224)
    # Passed by keyword (as transformers' inputs are), under the forward's own name for it.
    first = next(iter(inspect.signature(model.forward).parameters))
    return model, {first: torch.randn(BATCH, *shape, device=device)}


def _sub_configs(config: Any) -> Iterator[Any]:
    """``config`` and the configs nested in it (a vision-text model's text_config and vision_config)."""
    from transformers import PretrainedConfig

    yield config
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            yield from _sub_configs(value)


def _shrunk_config(entry: dict[str, Any], stage: int, train: bool) -> Any:
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[entry["model_type"]]()
    for part in _sub_configs(config):
        for field in LAYER_FIELDS:
            value = getattr(part, field, None)
            if type(value) is int and value > 2:
                setattr(part, field, 2)
        for shrink in SHRINK_STAGES[: stage + 1]:
            for field, value in shrink.items():
                current = getattr(part, field, None)
                if type(current) is int and current > value:
                    setattr(part, field, value)
        if train:
            # Dropout would make the train-mode outputs random: turned off to compare them.
            for field, value in vars(part).items():
                if "dropout" in field and type(value) is float:
                    setattr(part, field, 0.0)
        if getattr(part, "pad_token_id", 0) is None:
            part.pad_token_id = 0  # sequence classification needs one for batches over 1
    return config


def _transformers_inputs(model: Any, config: Any, device: str) -> dict[str, Any]:
    import torch

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vision = getattr(config, "vision_config", None) or config
    vocab = min(int(getattr(text, "vocab_size", None) or 1000), 1000)
    name = getattr(model, "main_input_name", "input_ids")
    if name == "input_ids":
        inputs = {"input_ids": torch.randint(0, vocab, (BATCH, SEQUENCE), device=device)}
    elif name == "pixel_values":
        channels, size = getattr(vision, "num_channels", 3), getattr(vision, "image_size", 224)
        size = size if isinstance(size, int) else size[0]
        inputs = {"pixel_values": torch.randn(BATCH, channels, size, size, device=device)}
    elif name == "input_values":
        inputs = {"input_values": torch.randn(BATCH, 4000, device=device)}
    else:
        raise Skip(f"main input {name!r} is not generated by the sweep")
    if getattr(config, "is_encoder_decoder", False) and name == "input_ids":
        inputs["decoder_input_ids"] = torch.randint(0, vocab, (BATCH, SEQUENCE // 2), device=device)
    return inputs


def _build_transformers(entry: dict[str, Any], device: str, train: bool, max_bytes: int) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers

    cls = getattr(transformers, entry["name"], None)
    if cls is None:
        raise Skip(f"transformers has no class {entry['name']}")
    for stage in range(len(SHRINK_STAGES)):
        config = _shrunk_config(entry, stage, train)

        def build(config: Any = config) -> Any:
            torch.manual_seed(0)
            return cls(config)

        size = _bytes_of(build)
        if size is None or size <= max_bytes:
            break
    else:
        raise Skip(f"needs {size / 2**30:.1f} GB even shrunk")
    model = build()
    return model, _transformers_inputs(model, config, device)


def _leaves(value: Any, depth: int = 0) -> Iterator[Any]:
    """The tensors in a model output (tuples, dicts, ModelOutputs, caches), in a stable order."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth > 6 or value is None or isinstance(value, (str, int, float, bool)):
        return
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item, depth + 1)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from _leaves(item, depth + 1)


def max_relative_error(actual: Any, expected: Any) -> float:
    """The largest difference between matching tensors, relative to the largest magnitude of
    the expected one (inf when the structure, a shape or an integer value differs)."""
    import torch

    got, want = list(_leaves(actual)), list(_leaves(expected))
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b):
                return float("inf")
            continue
        a, b = a.detach().double(), b.detach().double()
        both_nan = torch.isnan(a) & torch.isnan(b)
        a, b = a.masked_fill(both_nan, 0), b.masked_fill(both_nan, 0)
        scale = max(b.abs().max().item() if b.numel() else 0.0, 1e-6)
        diff = (a - b).abs().max().item() if b.numel() else 0.0
        worst = max(worst, diff / scale if diff == diff else float("inf"))
    return worst


def _reasons(records: Any, count: int = 3) -> list[str]:
    found = []
    for record in list(records)[:count]:
        found.append(" ".join(str(getattr(record, "reason", record)).split())[:240])
    return found


def _ptc_failed(result: dict[str, Any], stage: str, exc: Exception) -> None:
    result["status"] = "ptc_error"
    result["detail"] = f"{stage}: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"


def _seed() -> None:
    """The same random streams for every run of a model: models that draw random numbers in their
    forward (ViTMAE's masking, VITS's noise) give eager's result only from the same state."""
    import random

    import torch

    torch.manual_seed(0)
    random.seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)


def _explain_both(model: Any, inputs: dict[str, Any], result: dict[str, Any], prefix: str) -> Any:
    """Explain one forward with ptc and with torch.compile and record both counts; return ptc's
    output, or None when ptc raised (the result then says so)."""
    import torch._dynamo

    import ptc

    ptc.reset()
    try:
        _seed()
        explained = ptc.explain(model)(**inputs)
    except Exception as exc:
        _ptc_failed(result, f"{prefix}capture", exc)
        return None
    result[f"{prefix}ptc_graphs"] = explained.graph_count
    result[f"{prefix}ptc_breaks"] = explained.graph_break_count
    result[f"{prefix}ptc_reasons"] = _reasons(explained.break_reasons)
    torch._dynamo.reset()
    try:
        _seed()
        peer = torch._dynamo.explain(model)(**inputs)
        result[f"{prefix}tc_graphs"] = peer.graph_count
        result[f"{prefix}tc_breaks"] = peer.graph_break_count
        result[f"{prefix}tc_reasons"] = _reasons(peer.break_reasons)
    except Exception as exc:
        result[f"{prefix}tc_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return explained.out


def _backward(model: Any, out: Any) -> list[Any]:
    model.zero_grad(set_to_none=True)
    floats = [t for t in _leaves(out) if t.is_floating_point() and t.requires_grad]
    if floats:
        sum(t.float().mean() for t in floats).backward()
    return [p.grad.clone() if p.grad is not None else None for p in model.parameters()]


def _train_step(model: Any, inputs: dict[str, Any], result: dict[str, Any]) -> None:
    """Explain the train-mode forward (dropout off) and compare the gradients of a backward through it."""
    import torch

    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    try:
        _seed()
        want = _backward(model, model(**inputs))
    except Exception as exc:
        result["train_detail"] = f"eager training step failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return
    _seed()
    out = _explain_both(model, inputs, result, "train_")
    if out is None:
        return
    try:
        got = _backward(model, out)
    except Exception as exc:
        _ptc_failed(result, "backward through the captured forward", exc)
        return
    pairs = [(a, b) for a, b in zip(got, want, strict=True) if b is not None]
    result["train_grad_rel_err"] = max([max_relative_error(a, b) for a, b in pairs] or [0.0])


def _peer_error(model: Any, inputs: dict[str, Any], ours: Any, train: bool) -> float | None:
    """How far ptc's eval output (or, with ``train``, its train-mode gradients) is from
    torch.compile's with the eager backend; None when torch.compile fails."""
    import torch
    import torch._dynamo

    import ptc

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    try:
        if not train:
            model.eval()
            with torch.no_grad():
                return max_relative_error(ours, compiled(**inputs))
        _seed()
        theirs = _backward(model, compiled(**inputs))
        ptc.reset()
        _seed()
        mine = _backward(model, ptc.compile(model, backend="eager")(**inputs))
    except Exception:
        return None
    pairs = [(a, b) for a, b in zip(mine, theirs, strict=True) if b is not None]
    return max([max_relative_error(a, b) for a, b in pairs] or [0.0])


def run_one(entry: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Sweep one model; the result's ``status`` is ok, wrong, ptc_error or skip."""
    import torch

    import ptc

    device, train, tolerance = options["device"], options["train"], options["rtol"]
    result: dict[str, Any] = {"id": entry["id"], "status": "skip"}
    start = time.perf_counter()
    torch.manual_seed(0)
    max_bytes = int(options["max_gb"] * 2**30)
    try:
        if entry["source"] == "timm":
            model, inputs = _build_timm(entry, device, max_bytes)
        else:
            model, inputs = _build_transformers(entry, device, train, max_bytes)
        model = model.to(device).eval()
        with torch.no_grad():
            _seed()
            expected = model(**inputs)
    except Skip as exc:
        result["detail"] = str(exc)
        return result
    except Exception as exc:
        result["detail"] = f"build or eager forward failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        return result
    result["status"] = "ok"
    with torch.no_grad():
        actual = _explain_both(model, inputs, result, "")
    if actual is not None:
        result["max_rel_err"] = max_relative_error(actual, expected)
    if actual is not None and options["backend"] != "eager":
        ptc.reset()
        try:
            with torch.no_grad():
                result["compiled_rel_err"] = max_relative_error(ptc.compile(model, backend=options["backend"])(**inputs), expected)
        except Exception as exc:
            _ptc_failed(result, f"ptc.compile(backend={options['backend']!r})", exc)
    if actual is not None and train and result["status"] == "ok":
        _train_step(model, inputs, result)
    errors = [result.get(k, 0.0) for k in ("max_rel_err", "compiled_rel_err", "train_grad_rel_err")]
    if result["status"] == "ok" and max(errors) > tolerance:
        result["status"] = "wrong"
        result["detail"] = f"max relative error {max(errors):.3g} over {tolerance}"
        peer = _peer_error(model, inputs, actual, train and result.get("train_grad_rel_err", 0.0) > tolerance)
        if peer is not None and peer <= tolerance:
            # The model itself computes something else when compiled (transformers' code takes
            # its compile path under torch.compiler.is_compiling()): torch.compile's result is ptc's.
            result["status"] = "model_diverges"
            result["detail"] += f"; torch.compile gives ptc's result (relative difference {peer:.3g})"
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


# -- the sweep ---------------------------------------------------------------------------------


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _forked_child(entry: dict[str, Any], options: dict[str, Any], log_path: str, conn: Any) -> None:
    # The model's warnings and a crash's last words go to a file the parent reads on a crash.
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        result = run_one(entry, options)
    except Exception as exc:
        lines = traceback.format_exception(exc)
        result = {"id": entry["id"], "status": "sweep_error", "detail": " ".join("".join(lines[-3:]).split())[:500]}
    conn.send(result)
    conn.close()


_FORKSERVER: Any = None


def _forkserver() -> Any:
    """A fork server that has imported torch, the model libraries and ptc once (without touching
    the GPU), so each model's fresh process starts in milliseconds instead of seconds."""
    global _FORKSERVER
    if _FORKSERVER is None:
        os.environ.update(OFFLINE)
        context = multiprocessing.get_context("forkserver")
        preload = ["__main__", "torch", "ptc", "transformers.models.auto.modeling_auto"]
        try:
            import timm  # noqa: F401  (only where timm is installed)

            preload.append("timm")
        except Exception:
            pass
        context.set_forkserver_preload(preload)
        _FORKSERVER = context
    return _FORKSERVER


def _run_forked(entry: dict[str, Any], options: dict[str, Any], timeout: float, deadline: float) -> dict[str, Any]:
    if deadline and time.monotonic() > deadline:
        return {"id": entry["id"], "status": "not_run", "detail": "the sweep reached --deadline"}
    context = _forkserver()
    start = time.perf_counter()
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_forked_child, args=(entry, options, log.name, send))
        process.start()
        send.close()
        answered = False
        try:
            # poll() is also true when the child died without sending: recv() then raises EOFError.
            answered = receive.poll(timeout)
            if answered:
                found: dict[str, Any] = receive.recv()
                return found
        except EOFError:
            pass
        finally:
            if process.is_alive():
                process.kill()
            process.join()
        if not answered:
            return {"id": entry["id"], "status": "timeout", "detail": f"over {timeout:.0f} s", "seconds": round(timeout, 1)}
        tail = " ".join(Path(log.name).read_text(errors="replace").strip().splitlines()[-3:])[:400]
        return {"id": entry["id"], "status": "crash", "detail": f"exit {process.exitcode}: {tail}",
                "seconds": round(time.perf_counter() - start, 1)}


def more_breaks(result: dict[str, Any]) -> bool:
    """Whether ptc broke the graph more often than torch.compile on this model (either mode)."""
    for prefix in ("", "train_"):
        ours, theirs = result.get(f"{prefix}ptc_breaks"), result.get(f"{prefix}tc_breaks")
        if ours is not None and theirs is not None and ours > theirs:
            return True
    return False


FAILURES = ("wrong", "ptc_error")
"""Statuses --check always fails on: ptc gave a result other than eager's (and torch.compile's:
``model_diverges`` is a model whose compiled path computes something else under any compiler),
or raised where eager ran."""


def _markdown(results: list[dict[str, Any]], summary: list[str]) -> str:
    lines = ["# Capture sweep", "", *[f"- {s}" for s in summary], "",
             "| model | status | ptc graphs | ptc breaks | torch.compile graphs | torch.compile breaks | max rel err | ptc break reasons |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        reasons = "; ".join(r.get("ptc_reasons", [])) or r.get("detail", "")
        err = r.get("max_rel_err")
        cells = [r["id"], r["status"] + (" (more breaks)" if more_breaks(r) else ""), r.get("ptc_graphs", ""),
                 r.get("ptc_breaks", ""), r.get("tc_graphs", ""), r.get("tc_breaks", ""),
                 "" if err is None else f"{err:.2g}", reasons.replace("|", "\\|")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _summary(results: list[dict[str, Any]]) -> list[str]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    compared = [r for r in results if r["status"] in ("ok", "wrong", "model_diverges") and "tc_breaks" in r]
    within = [r for r in compared if not more_breaks(r)]
    share = 100.0 * len(within) / len(compared) if compared else 100.0
    return [
        "models: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" ({len(results)} in all)",
        f"ptc has no more graph breaks than torch.compile on {len(within)} of {len(compared)} compared models ({share:.1f}%)",
        f"one graph under ptc: {sum(1 for r in compared if r.get('ptc_breaks') == 0)}; "
        f"under torch.compile: {sum(1 for r in compared if r.get('tc_breaks') == 0)}",
    ]


def _read_baseline() -> set[str]:
    if not BASELINE.exists():
        return set()
    return set(json.loads(BASELINE.read_text())["more_breaks_than_torch_compile"])


def _write_baseline(results: list[dict[str, Any]], partial: bool) -> None:
    listed = _read_baseline() if partial else set()
    ran = {r["id"] for r in results}
    listed = {name for name in listed if name not in ran} | {r["id"] for r in results if more_breaks(r)}
    text = {
        "about": "Models on which ptc-capture breaks the graph more often than torch.compile (tools/capture_sweep.py "
                 "--check fails on any other). This list may only shrink; regenerate with --write-baseline.",
        "more_breaks_than_torch_compile": sorted(listed),
    }
    BASELINE.write_text(json.dumps(text, indent=1) + "\n")


def _check(results: list[dict[str, Any]]) -> list[str]:
    baseline = _read_baseline()
    problems = [f"{r['id']}: {r['status']}: {r.get('detail', '')}" for r in results if r["status"] in FAILURES]
    for r in results:
        if more_breaks(r) and r["id"] not in baseline:
            counts = []
            for prefix, mode in (("", "eval"), ("train_", "train")):
                if f"{prefix}ptc_breaks" in r:
                    counts.append(f"{mode} {r[f'{prefix}ptc_breaks']} breaks against torch.compile's {r.get(f'{prefix}tc_breaks')}")
            reasons = r.get("ptc_reasons") or r.get("train_ptc_reasons", [])
            problems.append(f"{r['id']}: {', '.join(counts)}, and not in {BASELINE.name}: {'; '.join(reasons)}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="all", choices=["timm", "transformers", "all"])
    parser.add_argument("--filter", help="regular expression over model ids (timm/<name>, transformers/<Class>)")
    parser.add_argument("--limit", type=int, help="at most this many models, in list order")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--jobs", type=int, default=1, help="models run in parallel, one subprocess each (default 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per model (default 600)")
    parser.add_argument("--max-gb", type=float, default=2.0, help="skip models whose weights need more (default 2)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="largest relative error that is not wrong (default 1e-3)")
    parser.add_argument("--train", action="store_true", help="also explain a train-mode forward and compare gradients")
    parser.add_argument("--backend", default="eager", help="also run ptc.compile with this backend and compare (default: only capture)")
    parser.add_argument("--out", help="write the results to this JSON file, and a markdown table beside it")
    parser.add_argument("--check", action="store_true", help=f"exit 1 on a wrong result or a break count not allowed by {BASELINE.name}")
    parser.add_argument("--write-baseline", action="store_true", help=f"rewrite {BASELINE.name} from this run")
    parser.add_argument("--shard", help="K/N: run the K-th of N interleaved parts of the model list (K from 0), for runs split over calls")
    parser.add_argument("--deadline", type=float, default=0,
                        help="seconds after which no further model starts; the rest are recorded as not_run (default: none)")
    parser.add_argument("--load", nargs="+",
                        help="take the results of earlier --out files (e.g. shards) instead of running, for --check, --write-baseline, --out")
    parser.add_argument("--resume", nargs="+", default=[],
                        help="skip the models these earlier --out files have a result for (not_run ones run again)")
    args = parser.parse_args()
    if args.load:
        files = [json.loads(Path(name).read_text()) for name in args.load]
        # A model in several files (a rerun after a fix) takes its result from the last one.
        merged = {r["id"]: r for loaded in files for r in loaded["results"]}
        results = sorted(merged.values(), key=lambda r: r["id"])
        summary = _summary(results)
        sys.stdout.write("\n".join(summary) + "\n")
        if args.out:
            _write_out(args.out, summary, files[0].get("options", {}), results, any(f.get("partial", True) for f in files))
        return _finish(args, results, partial=any(f.get("partial", True) for f in files))

    entries = list_entries(args.source, args.filter, args.limit)
    if args.shard:
        index, count = (int(part) for part in args.shard.split("/"))
        entries = entries[index::count]
    done = {r["id"] for name in args.resume for r in json.loads(Path(name).read_text())["results"] if r["status"] != "not_run"}
    entries = [e for e in entries if e["id"] not in done]
    deadline = time.monotonic() + args.deadline if args.deadline else 0.0
    options = {"device": args.device, "train": args.train, "rtol": args.rtol, "backend": args.backend, "max_gb": args.max_gb}
    start = time.perf_counter()
    results = []
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(_run_forked, e, options, args.timeout, deadline) for e in entries]
        for future in futures:
            r = future.result()
            results.append(r)
            counts = f"ptc {r.get('ptc_graphs', '-')}/{r.get('ptc_breaks', '-')} tc {r.get('tc_graphs', '-')}/{r.get('tc_breaks', '-')}"
            if "train_ptc_breaks" in r:
                counts += f" train ptc {r['train_ptc_graphs']}/{r['train_ptc_breaks']} tc {r.get('train_tc_graphs', '-')}/{r.get('train_tc_breaks', '-')}"
            note = r.get("detail") or "; ".join(r.get("ptc_reasons", []))
            sys.stdout.write(f"{r['id']:60s} {r['status']:10s} {counts:22s} {note[:140]}\n")
            sys.stdout.flush()
    summary = _summary(results) + [f"{time.perf_counter() - start:.0f} s, {args.jobs} jobs, device {args.device}"]
    sys.stdout.write("\n".join(summary) + "\n")
    partial = bool(args.filter or args.limit or args.shard or args.resume or any(r["status"] == "not_run" for r in results))
    if args.out:
        _write_out(args.out, summary, options, results, partial)
    return _finish(args, results, partial)


def _write_out(path: str, summary: list[str], options: dict[str, Any], results: list[dict[str, Any]], partial: bool) -> None:
    record = {"summary": summary, "options": options, "partial": partial, "results": results}
    Path(path).write_text(json.dumps(record, indent=1) + "\n")
    Path(path).with_suffix(".md").write_text(_markdown(results, summary))


def _finish(args: argparse.Namespace, results: list[dict[str, Any]], partial: bool) -> int:
    if args.write_baseline:
        _write_baseline(results, partial)
    if args.check:
        problems = _check(results)
        for line in problems:
            sys.stdout.write(f"CHECK FAILED {line}\n")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
