"""Real models on the GPU in float32, bf16 and under autocast, inference and one training step.

Each case runs the model three ways on the same inputs: compiled by ptc, eagerly in the
precision under test, and eagerly in float64 as the reference. In float32 the compiled
result must equal eager's within float32 tolerances. In reduced precision two runs of a
whole model differ by rounding alone, so ptc must be as close to the float64 reference as
eager is: its RMS error at most ``MULTIPLIER`` times eager's (plus a floor for outputs that
eager gets exact). Gradients are checked the same way, per parameter.

``PTC_REAL_MODELS_TABLE=path`` appends one JSON line per case (errors, fallbacks, time);
``PTC_REAL_MODELS_DEVICE=cpu`` runs the cases on the CPU (autocast then uses CPU autocast).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ptc
from ptc.pipeline import STATS
from ptc_spec.testing import assert_as_accurate_as_eager

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("PTC_REAL_MODELS_DEVICE", "cuda")

MULTIPLIER = 3.0

Built = tuple[torch.nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # installed but broken, or absent
        pytest.skip(f"{name} cannot be imported: {type(exc).__name__}")


def _tokens(batch: int, seq: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def _gpt2() -> Built:
    tf = _import("transformers")
    config = tf.GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=512, n_positions=128, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    return tf.GPT2LMHeadModel(config), (_tokens(4, 64, 512),), lambda out: out.logits


def _bert() -> Built:
    tf = _import("transformers")
    config = tf.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                           vocab_size=512, max_position_embeddings=128, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)  # fmt: skip
    return tf.BertModel(config), (_tokens(4, 64, 512),), lambda out: out.last_hidden_state


def _llama() -> Built:
    tf = _import("transformers")
    config = tf.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=512, max_position_embeddings=128)  # fmt: skip
    return tf.LlamaForCausalLM(config), (_tokens(4, 64, 512),), lambda out: out.logits


def _t5() -> Built:
    tf = _import("transformers")
    config = tf.T5Config(d_model=128, d_ff=256, d_kv=32, num_layers=2, num_decoder_layers=2, num_heads=4,
                         vocab_size=512, dropout_rate=0.0, decoder_start_token_id=0)  # fmt: skip

    class T5(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = tf.T5ForConditionalGeneration(config)

        def forward(self, ids: torch.Tensor, decoder_ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, decoder_input_ids=decoder_ids).logits  # type: ignore[no-any-return]

    return T5(), (_tokens(4, 48, 512), _tokens(4, 32, 512)), lambda out: out


class _Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class NanoGPT(torch.nn.Module):
    """nanoGPT's shape: token and position embeddings, SDPA blocks, a tied head."""

    def __init__(self, vocab: int = 512, dim: int = 256, heads: int = 4, layers: int = 4, block: int = 128) -> None:
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(block, dim)
        self.blocks = torch.nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln(x), self.wte.weight)


def _nanogpt() -> Built:
    return NanoGPT(), (_tokens(4, 128, 512),), lambda out: out


def _timm(name: str) -> Callable[[], Built]:
    def build() -> Built:
        timm = _import("timm")
        model = timm.create_model(name, pretrained=False, num_classes=100, drop_rate=0.0, drop_path_rate=0.0)
        return model, (torch.randn(2, 3, 224, 224),), lambda out: out

    return build


MODELS: dict[str, Callable[[], Built]] = {
    "gpt2": _gpt2, "bert": _bert, "llama": _llama, "t5": _t5, "nanogpt_sdpa": _nanogpt,
    "resnet50": _timm("resnet50"), "vit_base_patch16_224": _timm("vit_base_patch16_224"),
    "convnext_tiny": _timm("convnext_tiny"), "efficientnet_b0": _timm("efficientnet_b0"),
}  # fmt: skip
PRECISIONS = ["float32", "bfloat16", "autocast"]


def _judge(label: str, got: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> dict[str, float]:
    # The floor of the lowest precision in play: bf16 outputs under float32 autocast included.
    precision = torch.bfloat16 if torch.bfloat16 in (dtype, got.dtype) else torch.float32
    return assert_as_accurate_as_eager(got, eager, ref, precision=precision, multiplier=MULTIPLIER, what=label)


def _run(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], pick: Callable[[Any], torch.Tensor], train: bool,
         autocast: bool, weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    region: AbstractContextManager[Any] = torch.autocast(DEVICE, dtype=torch.bfloat16) if autocast else nullcontext()
    with torch.set_grad_enabled(train), region:
        out = pick(model(*inputs))
    if not train:
        return out.detach(), None
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)) if weight is None else weight
    (out.double() * w.to(out.device, torch.float64)).sum().backward()
    return out.detach(), w


def _record(row: dict[str, Any]) -> None:
    path = os.environ.get("PTC_REAL_MODELS_TABLE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


@pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["inference", "train"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_on_the_gpu_is_as_accurate_as_eager(name: str, precision: str, mode: str) -> None:
    row: dict[str, Any] = {"model": name, "precision": precision, "mode": mode}
    try:
        _check(name, precision, mode, row)
        row["result"] = "ok"
    except pytest.skip.Exception:
        raise
    except AssertionError as exc:
        row["result"] = f"wrong: {exc}"
        raise
    except Exception as exc:
        row["result"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        raise
    finally:
        row["fallbacks"] = sorted(STATS.fallbacks)
        _record(row)


def _check(name: str, precision: str, mode: str, row: dict[str, Any]) -> None:
    torch.manual_seed(0)
    STATS.reset()
    base, cpu_inputs, pick = MODELS[name]()
    train = mode == "train"
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    inputs = tuple(x.to(DEVICE) if not x.is_floating_point() else x.to(DEVICE, dtype) for x in cpu_inputs)
    ref_inputs = tuple(x.to(DEVICE) if not x.is_floating_point() else x.to(DEVICE, torch.float64) for x in cpu_inputs)
    eager = base.to(DEVICE).to(dtype).train(train)
    model, reference = copy.deepcopy(eager), copy.deepcopy(base).double().train(train)
    compiled = ptc.compile(model)
    autocast = precision == "autocast"
    start = time.perf_counter()
    got, weight = _run(compiled, inputs, pick, train, autocast, None)
    row["first_call_s"] = round(time.perf_counter() - start, 2)
    row["graphs"] = STATS.graphs
    expected, _ = _run(eager, inputs, pick, train, autocast, weight)
    ref, _ = _run(reference, ref_inputs, pick, train, False, weight)
    row["output"] = _judge("output", got, expected, ref, dtype)
    if not train:
        return
    worst = 0.0
    params = zip(model.named_parameters(), eager.parameters(), reference.parameters(), strict=True)
    for (pname, p), pe, pr in params:
        if pr.grad is None:
            assert p.grad is None and pe.grad is None, f"grad of {pname}: eager and ptc disagree on None"
            continue
        assert p.grad is not None, f"grad of {pname}: ptc gave None"
        assert pe.grad is not None
        worst = max(worst, _judge(f"grad of {pname}", p.grad, pe.grad, pr.grad, dtype)["err_ptc"])
    row["worst_grad_err"] = worst
