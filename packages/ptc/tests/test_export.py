"""ptc.export, save/load and ptc.aot_compile of real model shapes (GPT, ResNet, BERT style), each
compared with eager; artifacts run by ``ptc_inductor.runtime`` in this process and in a fresh
one with the compiler packages blocked and no C++ compiler."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

import ptc
import ptc_inductor.runtime
from ptc_spec.testing import compare_with_eager


# -- models ----------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        if bias is not None:
            att = att + bias
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, layers: int = 2, block: int = 32) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(Block(dim, 4, causal=True) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class TinyResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(y)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.tok, self.pos, self.seg = nn.Embedding(vocab, dim), nn.Embedding(64, dim), nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(Block(dim, 4, causal=False) for _ in range(layers))
        self.pool = nn.Linear(dim, dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.ln(self.tok(input_ids) + self.pos(pos) + self.seg(token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return {"last_hidden_state": x, "pooler_output": torch.tanh(self.pool(x[:, 0]))}


def _gpt() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    return TinyGPT().eval(), (torch.randint(0, 64, (2, 12)),)


def _resnet() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    model = TinyResNet()
    for m in model.modules():  # non-trivial running statistics, so batch norm is really checked
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval(), (torch.randn(2, 3, 16, 16),)


def _bert() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    return TinyBert().eval(), (ids, mask, torch.zeros(2, 10, dtype=torch.long))


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {"gpt": _gpt, "resnet": _resnet, "bert": _bert}


def _no_grad(model: nn.Module) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        with torch.no_grad():
            return model(*args)

    return run


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exported_saved_loaded_and_compiled_model_matches_eager(name: str, tmp_path: Path) -> None:
    model, args = MODELS[name]()
    exported = ptc.export(model, args)
    compare_with_eager(exported, _no_grad(model), *args, rtol=1e-5, atol=1e-5)
    exported.save(tmp_path / "exported")
    assert sorted(os.listdir(tmp_path / "exported")) == ["graph.ptcg", "program.json", "weights.safetensors"]
    loaded = ptc.load_exported(tmp_path / "exported")
    for key, value in loaded.state.items():  # the state read back is the model's own, bit for bit
        torch.testing.assert_close(value, model.get_parameter(key) if key in dict(model.named_parameters()) else model.get_buffer(key),
                                   rtol=0, atol=0)
    compare_with_eager(loaded, _no_grad(model), *args, rtol=1e-5, atol=1e-5)
    path = ptc.aot_compile(loaded, tmp_path / "artifact")
    fn = ptc_inductor.runtime.load(path)
    compare_with_eager(fn, _no_grad(model), *args, rtol=1e-4, atol=1e-4)


def test_transformers_bert_exports_through_its_forward_decorators(tmp_path: Path) -> None:
    # transformers 5 wraps forward in decorators (wrapper(self, *args, **kwargs), with the real
    # forward in __wrapped__): capture binds the wrapper's own parameters, export names the real ones.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=64, max_position_embeddings=32)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 64, (2, 10))
    exported = ptc.export(model, (ids,), dynamic_shapes={"input_ids": {1: "seq"}})
    compare_with_eager(exported, _no_grad(model), ids, rtol=1e-5, atol=1e-5)
    exported.save(tmp_path / "exported")
    fn = ptc_inductor.runtime.load(ptc.aot_compile(ptc.load_exported(tmp_path / "exported"), tmp_path / "artifact"))
    for seq in (10, 7, 16):
        other = torch.randint(0, 64, (2, seq))
        got, want = fn(other), _no_grad(model)(other)
        for key in ("last_hidden_state", "pooler_output"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-4)


def test_state_is_saved_by_parameter_and_buffer_name(tmp_path: Path) -> None:
    model, args = _resnet()
    exported = ptc.export(model, args)
    names = set(exported.state)
    assert {"stem.0.weight", "stem.1.running_mean", "stem.1.running_var", "fc.weight", "fc.bias"} <= names
    exported.save(tmp_path / "e")
    weights = safetensors.torch.load_file(str(tmp_path / "e" / "weights.safetensors"))
    assert set(weights) == names
    torch.testing.assert_close(exported.state["stem.1.running_var"], model.stem[1].running_var, rtol=0, atol=0)


def test_bf16_model_artifact_matches_eager(tmp_path: Path) -> None:
    model, args = _gpt()
    model = model.to(torch.bfloat16)
    fn = ptc_inductor.runtime.load(ptc.aot_compile(ptc.export(model, args), tmp_path / "a"))
    out = compare_with_eager(fn, _no_grad(model), *args, rtol=5e-2, atol=5e-2)
    assert out.dtype == torch.bfloat16


def test_dynamic_dim_artifact_runs_at_every_admitted_size_and_refuses_others(tmp_path: Path) -> None:
    model, args = _gpt()
    exported = ptc.export(model, args, dynamic_shapes={"idx": {1: "seq"}})
    assert exported.program["symbols"] and all(s["name"] == "seq" for s in exported.program["symbols"].values())
    exported.save(tmp_path / "e")
    loaded = ptc.load_exported(tmp_path / "e")
    fn = ptc_inductor.runtime.load(ptc.aot_compile(loaded, tmp_path / "a"))
    for seq in (3, 12, 17, 32):
        idx = torch.randint(0, 64, (2, seq), generator=torch.Generator().manual_seed(seq))
        compare_with_eager(fn, _no_grad(model), idx, rtol=1e-4, atol=1e-4)
        compare_with_eager(loaded, _no_grad(model), idx, rtol=1e-5, atol=1e-5)
    with pytest.raises(ptc_inductor.runtime.InputError, match="dynamic size 'seq' is 1, outside the range"):
        fn(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ptc_inductor.runtime.InputError, match="input idx has size 3 in dim 0; the artifact was exported with static size 2"):
        fn(torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ptc_inductor.runtime.InputError, match="input idx has dtype torch.int32"):
        fn(torch.zeros(2, 5, dtype=torch.int32))


def test_dynamic_batch_and_sequence_of_bert_share_names_across_inputs(tmp_path: Path) -> None:
    model, args = _bert()
    dims = {0: "batch", 1: "seq"}
    exported = ptc.export(model, args, dynamic_shapes={"input_ids": dims, "attention_mask": dims, "token_type_ids": dims})
    fn = ptc_inductor.runtime.load(ptc.aot_compile(exported, tmp_path / "a"))
    for batch, seq in ((2, 10), (3, 7), (5, 21)):
        ids = torch.randint(0, 64, (batch, seq))
        compare_with_eager(fn, _no_grad(model), ids, torch.ones(batch, seq, dtype=torch.long), torch.zeros(batch, seq, dtype=torch.long),
                           rtol=1e-4, atol=1e-4)


class _Breaks(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 0:  # data-dependent control flow: a graph break
            return x + 1
        return x - 1


def test_graph_break_raises_one_export_error_naming_reason_and_line() -> None:
    with pytest.raises(ptc.ExportError, match=r"test_export\.py:\d+") as info:
        ptc.export(_Breaks(), (torch.randn(3),))
    assert "\n" not in str(info.value)


def test_model_mutating_a_buffer_in_training_mode_is_refused() -> None:
    model, args = _resnet()
    with pytest.raises(ptc.ExportError, match="model.eval()"):
        ptc.export(model.train(), args)


def test_exported_program_files_hold_no_pickle(tmp_path: Path) -> None:
    model, args = _gpt()
    ptc.export(model, args).save(tmp_path / "e")
    program = json.loads((tmp_path / "e" / "program.json").read_text())
    assert program["format"] == "ptc-export/1"
    for name in os.listdir(tmp_path / "e"):
        assert b"\x80\x04" not in (tmp_path / "e" / name).read_bytes()[:2]  # no pickle protocol header


_FRESH = """
import os, pkgutil, shutil, sys
import ptc_inductor
# A None entry in sys.modules makes importing that name raise ImportError: every compiler-side
# module of ptc-inductor, sympy, Triton and the other ptc packages are unreachable.
compiler = [f"ptc_inductor.{m.name}" for m in pkgutil.iter_modules(ptc_inductor.__path__) if m.name not in ("runtime", "errors")]
for name in ("sympy", "triton", "ptc", "ptc_spec", "ptc_capture", "ptc_aot", "ptc_decomp", "ptc_cudagraphs", *compiler):
    sys.modules[name] = None
assert not any(shutil.which(cc) for cc in ("gcc", "g++", "cc", "c++")) and "CC" not in os.environ
import safetensors.torch
import ptc_inductor.runtime
fn = ptc_inductor.runtime.load(sys.argv[1])
inputs = safetensors.torch.load_file(sys.argv[2])
out = fn(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
safetensors.torch.save_file({k: v.contiguous() for k, v in out.items()}, sys.argv[3])
"""


def test_bert_artifact_runs_in_a_fresh_process_with_compilers_blocked(tmp_path: Path) -> None:
    model, (ids, mask, types) = _bert()
    path = ptc.aot_compile(ptc.export(model, (ids, mask, types)), tmp_path / "a")
    safetensors.torch.save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, str(tmp_path / "in.st"))
    (tmp_path / "run.py").write_text(textwrap.dedent(_FRESH))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "PTC_INDUCTOR_CXX")}
    env.update(PATH=str(bin_dir), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), path, str(tmp_path / "in.st"), str(tmp_path / "out.st")],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = safetensors.torch.load_file(str(tmp_path / "out.st"))
    with torch.no_grad():
        expected = model(ids, mask, types)
    for key, value in expected.items():
        torch.testing.assert_close(out[key], value, rtol=1e-4, atol=1e-4)


def test_aot_compile_refuses_an_option_that_is_no_inductor_config_field(tmp_path: Path) -> None:
    model, args = _resnet()
    with pytest.raises(ptc.UnknownOptionError, match="fields of ptc_inductor.Config"):
        ptc.aot_compile(ptc.export(model, args), tmp_path / "a", {"no_such_option": 1})


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MODELS))
def test_cuda_artifact_ships_cubins_and_matches_eager(name: str, tmp_path: Path) -> None:
    model, args = MODELS[name]()
    model = model.cuda()
    args = tuple(a.cuda() for a in args)
    path = ptc.aot_compile(ptc.export(model, args), tmp_path / "a")
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    assert manifest["device"]["type"] == "cuda" and manifest["device"]["arch"].startswith("sm_")
    assert any(f.endswith(".cubin") for f in manifest["files"])
    fn = ptc_inductor.runtime.load(path)
    compare_with_eager(fn, _no_grad(model), *args, rtol=1e-3, atol=1e-3)
