"""Real models from pip packages, random init: forward and one training step equal eager's.

transformers' GPT-2 and BERT and timm's resnet18 and vit_tiny, small configurations, through
every backend with every handoff round-tripped (conftest). A machine without the package, or
whose package cannot be imported, skips with the reason.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import ptc
from ptc_spec.testing import assert_same

BACKENDS = ["eager", "aot_eager", "inductor"]
# Whole models reduce over thousands of terms in a different order than eager's kernels.
RTOL, ATOL = 1e-4, 1e-5


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # installed but broken (timm over a torchvision built for another torch)
        pytest.skip(f"{name} cannot be imported: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _gpt2() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]:
    transformers = _import("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    return transformers.GPT2LMHeadModel(config), (torch.randint(0, 128, (2, 16)),), lambda out: out.logits


def _bert() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]:
    transformers = _import("transformers")
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=128,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return transformers.BertModel(config), (torch.randint(0, 128, (2, 16)),), lambda out: out.last_hidden_state


def _timm(name: str) -> Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]]:
    def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]:
        timm = _import("timm")
        model = timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0)
        return model, (torch.randn(1, 3, 224, 224),), lambda out: out

    return build


MODELS = {"gpt2": _gpt2, "bert": _bert, "resnet18": _timm("resnet18"), "vit_tiny": _timm("vit_tiny_patch16_224")}


def _setup(
    name: str, backend: str, train: bool
) -> tuple[torch.nn.Module, torch.nn.Module, Any, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]:
    """The eager model, its copy, the copy compiled with ``backend``, the inputs, the output picker."""
    torch.manual_seed(0)
    eager, inputs, pick = MODELS[name]()
    model = copy.deepcopy(eager)
    eager.train(train)
    model.train(train)
    return eager, model, ptc.compile(model, backend=backend), inputs, pick


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_forward_matches_eager(name: str, backend: str) -> None:
    eager, _, compiled, inputs, pick = _setup(name, backend, train=False)
    with torch.no_grad():
        assert_same(pick(compiled(*inputs)), pick(eager(*inputs)), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_training_step_matches_eager(name: str, backend: str) -> None:
    eager, model, compiled, inputs, pick = _setup(name, backend, train=True)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_e = pick(eager(*inputs)).float().pow(2).mean()
    loss_c = pick(compiled(*inputs)).float().pow(2).mean()
    assert_same(loss_c, loss_e, rtol=RTOL, atol=ATOL, what="loss")
    loss_e.backward()
    loss_c.backward()
    for (param, pe), pc in zip(eager.named_parameters(), model.parameters(), strict=True):
        assert_same(pc.grad, pe.grad, rtol=1e-3, atol=1e-5, what=f"grad of {param}")
    opt_e.step()
    opt_c.step()
    for (param, pe), pc in zip(eager.named_parameters(), model.parameters(), strict=True):
        assert_same(pc, pe, rtol=RTOL, atol=ATOL, what=f"{param} after the optimizer step")
