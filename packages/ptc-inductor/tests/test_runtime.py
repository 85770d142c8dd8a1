"""Ahead-of-time artifacts: written by the compiler half, loaded and run by ``ptc_inductor.runtime``
alone (in a fresh process with the compiler half, sympy, Triton's compiler, the other ptc
packages and the C++ compiler out of reach), and refused in one sentence when damaged."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
import torch.utils._pytree as pytree
from test_triton_kernels import DEVICE  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)

import ptc_inductor
import ptc_spec
from ptc_inductor.runtime import ArtifactError, InputError, load
from ptc_inductor.runtime import artifact as layout
from ptc_inductor.runtime.triton_launch import size_function
from ptc_spec.testing import assert_same, compare_with_eager

FIXTURES = Path(__file__).parent / "fixtures"
FORWARD_FIXTURES = ("attention_block", "conv_bn_relu", "layer_norm", "layer_norm_bf16", "mlp", "softmax")


def _inputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    metas = [n.meta[ptc_spec.META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    return [m.example(seed=i) for i, m in enumerate(metas)]


def _on_cuda(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The fixture graph (traced on the CPU) retargeted to CUDA: its metas and the device its
    factory calls name, not only its constants (which ``map_location`` moves)."""
    cuda = torch.device("cuda")

    def move(meta: Any) -> Any:
        if isinstance(meta, ptc_spec.TensorMeta):
            return dataclasses.replace(meta, device=cuda)
        if isinstance(meta, (tuple, list)):
            return type(meta)(move(m) for m in meta)
        return meta

    for node in gm.graph.nodes:
        if ptc_spec.META_KEY in node.meta:
            node.meta[ptc_spec.META_KEY] = move(node.meta[ptc_spec.META_KEY])
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": cuda}
    gm.recompile()
    return gm


def _program(inputs: list[torch.Tensor], outputs: Any) -> dict[str, Any]:
    """The description ptc.export would write for a function taking ``inputs`` positionally and returning a tuple."""
    count = len(outputs) if isinstance(outputs, tuple) else 1
    return {
        "in_spec": pytree.treespec_dumps(pytree.tree_flatten((tuple(inputs), {}))[1]),
        "out_spec": pytree.treespec_dumps(pytree.tree_flatten(tuple(range(count)))[1]),
        "leaves": [
            {"kind": "tensor", "where": f"x{i}", "dtype": str(t.dtype), "device": str(t.device), "shape": list(t.shape)}
            for i, t in enumerate(inputs)
        ],
        "inputs": [["leaf", i] for i in range(len(inputs))],
        "outputs": [["graph", i] for i in range(count)],
        "symbols": {},
        "guards": "True",
    }


def _artifact(name: str, path: Path) -> tuple[torch.fx.GraphModule, list[torch.Tensor], str]:
    gm = ptc_spec.load(FIXTURES / f"{name}.ptcg")
    inputs = _inputs(gm)
    compiled = ptc_inductor.compile(gm)
    outputs = compiled(*inputs)
    written = ptc_inductor.save_aot_artifact(compiled, str(path), _program(inputs, outputs), {}, torch.device("cpu"))
    return gm, inputs, written


def _tol(inputs: list[torch.Tensor]) -> dict[str, float]:
    bf16 = any(t.dtype == torch.bfloat16 for t in inputs)
    return {"rtol": 5e-2, "atol": 5e-2} if bf16 else {"rtol": 1e-4, "atol": 1e-4}


@pytest.mark.parametrize("name", FORWARD_FIXTURES)
def test_fixture_graph_run_from_its_artifact_matches_eager(name: str, tmp_path: Path) -> None:
    gm, inputs, path = _artifact(name, tmp_path / name)
    loaded = load(path)

    def eager(*args: torch.Tensor) -> tuple[Any, ...]:
        out = gm(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    compare_with_eager(loaded, eager, *inputs, **_tol(inputs))


def test_artifact_holds_the_built_kernels_and_no_pickle(tmp_path: Path) -> None:
    _, _, path = _artifact("mlp", tmp_path / "a")
    manifest = json.loads(Path(path, layout.MANIFEST).read_text())
    assert set(manifest["files"]) == {"wrapper.py", "kernels.so", "kernels.cpp", "constants.safetensors", "weights.safetensors"}
    assert manifest["device"]["type"] == "cpu"
    assert manifest["versions"]["torch"] == torch.__version__
    assert manifest["format"] == layout.FORMAT
    assert not any(name.endswith((".pkl", ".pt", ".pickle")) for name in os.listdir(path))


_BLOCKED_RUN = """
import importlib.abc, os, shutil, sys
BLOCKED = ("sympy", "triton", "ptc_spec", "ptc_capture", "ptc_aot", "ptc_decomp", "ptc_cudagraphs", "ptc")
ALLOWED = ("ptc_inductor", "ptc_inductor.errors", "ptc_inductor.runtime")

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        inductor_compiler = top == "ptc_inductor" and not (name in ALLOWED or name.startswith("ptc_inductor.runtime."))
        if top in BLOCKED or inductor_compiler:
            raise ImportError(f"blocked by the test: {name}")
        return None

sys.meta_path.insert(0, Refuse())
assert shutil.which("gcc") is None and shutil.which("g++") is None and shutil.which("cc") is None
import safetensors.torch, torch
import ptc_inductor.runtime
fn = ptc_inductor.runtime.load(sys.argv[1])
inputs = safetensors.torch.load_file(sys.argv[2])
outputs = fn(*[inputs[f"in{i}"] for i in range(len(inputs))])
safetensors.torch.save_file({f"out{i}": t.contiguous() for i, t in enumerate(outputs)}, sys.argv[3])
print(sorted(m for m in sys.modules if m.startswith(("ptc", "sympy", "triton"))))
"""


def runtime_environment(tmp_path: Path) -> dict[str, str]:
    """This environment with no C++ compiler on PATH (a directory holding only python) and CC/CXX unset."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python"
    if not link.exists():
        link.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "PTC_INDUCTOR_CXX")}
    env["PATH"] = str(bin_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_artifact_runs_in_a_fresh_process_without_compiler_packages_or_a_cxx(tmp_path: Path) -> None:
    gm, inputs, path = _artifact("attention_block", tmp_path / "a")
    safetensors.torch.save_file({f"in{i}": t.contiguous() for i, t in enumerate(inputs)}, str(tmp_path / "in.safetensors"))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_BLOCKED_RUN))
    result = subprocess.run(
        [sys.executable, str(script), path, str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")],
        env=runtime_environment(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded_modules = eval(result.stdout.strip().splitlines()[-1])
    assert all(m == "ptc_inductor" or m.startswith(("ptc_inductor.runtime", "ptc_inductor.errors")) for m in loaded_modules)
    out = safetensors.torch.load_file(str(tmp_path / "out.safetensors"))
    expected = gm(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for i, e in enumerate(expected):
        torch.testing.assert_close(out[f"out{i}"], e, rtol=1e-4, atol=1e-4)


# -- refusals --------------------------------------------------------------------------------------
def _rewrite_manifest(path: str, change: Any) -> None:
    """Edit the manifest and re-sign it, as a tool that knows the format would (so only the edit is wrong)."""
    where = Path(path, layout.MANIFEST)
    manifest = json.loads(where.read_text())
    change(manifest)
    manifest["checksum"] = layout._manifest_digest(manifest)
    where.write_text(json.dumps(manifest))


def _truncate(path: str) -> None:
    target = Path(path, layout.WEIGHTS if Path(path, layout.WEIGHTS).stat().st_size > 64 else layout.CONSTANTS)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def _edit_wrapper(path: str) -> None:
    target = Path(path, layout.WRAPPER)
    target.write_text(target.read_text() + "\nimport os\n")


def _edit_manifest(path: str) -> None:
    target = Path(path, layout.MANIFEST)
    manifest = json.loads(target.read_text())
    manifest["program"]["guards"] = "False"
    target.write_text(json.dumps(manifest))


def _cut_manifest(path: str) -> None:
    target = Path(path, layout.MANIFEST)
    target.write_text(target.read_text()[:100])


def _old_format(path: str) -> None:
    _rewrite_manifest(path, lambda m: m.update(format="ptc-aot-artifact/0"))


def _other_torch(path: str) -> None:
    _rewrite_manifest(path, lambda m: m["versions"].update(torch="1.13.1"))


def _other_cpu(path: str) -> None:
    _rewrite_manifest(path, lambda m: m["device"].update(cpu="0123456789abcdef"))


def _other_gpu(path: str) -> None:
    _rewrite_manifest(path, lambda m: m.update(device={"type": "cuda", "arch": "sm_00", "name": "an imaginary GPU"}))


def _missing_file(path: str) -> None:
    os.unlink(Path(path, layout.CONSTANTS))


BAD = {
    "truncated weights": (_truncate, "truncated or edited"),
    "edited wrapper": (_edit_wrapper, "truncated or edited"),
    "edited manifest": (_edit_manifest, "was edited after the artifact was written"),
    "truncated manifest": (_cut_manifest, "unreadable or truncated"),
    "older format": (_old_format, "has artifact format 'ptc-aot-artifact/0'"),
    "other torch": (_other_torch, "was compiled with torch 1.13.1"),
    "other cpu": (_other_cpu, "built for another CPU model"),
    "other gpu": (_other_gpu, "sm_00"),
    "missing file": (_missing_file, "is missing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_damaged_artifact_is_refused_in_one_sentence(case: str, tmp_path: Path) -> None:
    _, _, path = _artifact("mlp", tmp_path / "a")
    damage, message = BAD[case]
    damage(path)
    with pytest.raises(ArtifactError, match=message) as info:
        load(path)
    assert "\n" not in str(info.value)


def test_a_directory_without_manifest_is_not_an_artifact(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="is not a ptc artifact"):
        load(tmp_path)


def test_inputs_the_artifact_does_not_admit_get_one_clear_error(tmp_path: Path) -> None:
    _, inputs, path = _artifact("mlp", tmp_path / "a")
    fn = load(path)
    with pytest.raises(InputError, match="has dtype torch.float64; the artifact was exported for torch.float32"):
        fn(*[t.double() for t in inputs])
    first = inputs[0]
    wrong = torch.zeros(first.shape[0] + 1, *first.shape[1:], dtype=first.dtype)
    with pytest.raises(InputError, match=f"x0 has size {first.shape[0] + 1} in dim 0; the artifact was exported with static size"):
        fn(wrong, *inputs[1:])
    with pytest.raises(InputError, match="structure"):
        fn(*inputs[:-1])


def _eager_tuple(gm: torch.fx.GraphModule) -> Any:
    def eager(*args: torch.Tensor) -> tuple[Any, ...]:
        out = gm(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return eager


_WRONG_INPUTS = {
    "dtype": (lambda t: t.double(), "x0 has dtype torch.float64; the artifact was exported for torch.float32"),
    "shape": (lambda t: torch.zeros(t.shape[0] + 1, *t.shape[1:]), "x0 has size .* in dim 0; the artifact was exported with static size"),
    "dims": (lambda t: t.unsqueeze(0), "x0 has 3 dims; the artifact was exported for 2"),
    "not a tensor": (lambda t: t.tolist(), "x0 is a list; the artifact takes a tensor there"),
    # A meta tensor's get_device() is -1 as a CPU tensor's is; its null data pointer would crash the kernel.
    "meta device": (lambda t: t.to("meta"), "x0 is on meta; the artifact runs on cpu"),
}


@pytest.mark.parametrize("wrong", list(_WRONG_INPUTS))
def test_input_checks_refuse_a_wrong_input_after_calls_they_admitted(wrong: str, tmp_path: Path) -> None:
    gm, inputs, path = _artifact("mlp", tmp_path / "a")
    fn = load(path)
    for _ in range(3):
        compare_with_eager(fn, _eager_tuple(gm), *inputs, **_tol(inputs))
    change, message = _WRONG_INPUTS[wrong]
    with pytest.raises(InputError, match=message):
        fn(change(inputs[0]), *inputs[1:])
    compare_with_eager(fn, _eager_tuple(gm), *inputs, **_tol(inputs))


def test_a_call_with_grad_off_runs_without_switching_grad_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gm, inputs, path = _artifact("mlp", tmp_path / "a")
    fn = load(path)

    def refuse() -> None:
        raise AssertionError("grad is already off: the call must not enter torch.no_grad")

    monkeypatch.setattr(torch, "no_grad", refuse)
    with torch.inference_mode():
        compare_with_eager(fn, _eager_tuple(gm), *inputs, **_tol(inputs))
    torch.set_grad_enabled(False)
    try:
        compare_with_eager(fn, _eager_tuple(gm), *inputs, **_tol(inputs))
    finally:
        torch.set_grad_enabled(True)


def test_a_call_with_grad_on_returns_outputs_without_autograd_history(tmp_path: Path) -> None:
    gm, inputs, path = _artifact("mlp", tmp_path / "a")
    fn = load(path)
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    with torch.no_grad():
        want = _eager_tuple(gm)(*inputs)
    got = fn(*leaves)
    assert torch.is_grad_enabled()
    assert not any(g.requires_grad for g in got)
    assert_same(got, want, what="output", **_tol(inputs))


def test_grid_size_function_reads_the_kernel_size_arguments() -> None:
    fn = size_function(("s0", "s1"), "4*s0*max(s1, 1)")
    assert fn(3, 5) == 60
    assert fn(3, 0) == 12


def test_triton_kernels_run_by_the_interpreter_cannot_become_an_artifact(tmp_path: Path) -> None:
    gm = ptc_spec.load(FIXTURES / "softmax.ptcg")
    inputs = _inputs(gm)
    compiled = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env().replace(backend="triton"))
    outputs = compiled(*inputs)
    with pytest.raises(ArtifactError, match="runs in Triton's interpreter here: an artifact ships GPU binaries"):
        ptc_inductor.save_aot_artifact(compiled, str(tmp_path / "a"), _program(inputs, outputs), {}, torch.device("cpu"))


@pytest.mark.gpu
def test_triton_artifact_runs_from_cubins_on_the_gpu(tmp_path: Path) -> None:
    gm = _on_cuda(ptc_spec.load(FIXTURES / "attention_block.ptcg", map_location="cuda"))
    inputs = _inputs(gm)
    compiled = ptc_inductor.compile(gm, config=ptc_inductor.config_from_env().replace(backend="triton"))
    outputs = compiled(*inputs)
    program = _program(inputs, outputs)
    path = ptc_inductor.save_aot_artifact(compiled, str(tmp_path / "a"), program, {}, inputs[0].device)
    manifest = json.loads(Path(path, layout.MANIFEST).read_text())
    assert manifest["device"]["arch"].startswith("sm_")
    assert any(name.startswith("triton/") and name.endswith(".cubin") for name in manifest["files"])
    loaded = load(path)
    expected = outputs if isinstance(outputs, tuple) else (outputs,)
    for a, e in zip(loaded(*inputs), expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
