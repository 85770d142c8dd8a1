"""Writing a compiled graph as an ahead-of-time artifact (the format ``runtime/artifact.py`` reads).

Unlike the graph cache's artifacts (``artifact.py``), which rebuild kernels through the kernel
cache, an ahead-of-time artifact ships the built kernels themselves: the C++ shared object,
each Triton kernel's binaries for its chosen launch config, and ptc's CUDA launcher, so loading
needs no compiler.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

import safetensors.torch
import torch

from .artifact import encode_namespace
from .compiled import CompiledGraph
from .config import Config
from .runtime import artifact as layout
from .runtime.cuda import MAX_POINTERS
from .runtime.errors import ArtifactError
from .triton_interpret import interpreting

__all__ = ["save_aot_artifact"]


def save_aot_artifact(
    compiled: CompiledGraph, path: str, program: Mapping[str, Any], state: Mapping[str, torch.Tensor], device: torch.device,
    config: Config | None = None,
) -> str:  # fmt: skip
    """Write ``compiled`` (already run once, so every launch config is chosen), the program
    description and the named ``state`` into the new directory ``path``; returns ``path``."""
    if compiled.namespace is None:
        raise ArtifactError("this compiled graph keeps no namespace (it was not compiled by ptc_inductor.compile)")
    if os.path.exists(path) and os.listdir(path):
        raise ArtifactError(f"{path} exists and is not empty; ptc.aot_compile writes a new directory")
    os.makedirs(path, exist_ok=True)
    calls = compiled.kernel_calls
    recipes, tensors = encode_namespace(compiled.namespace, calls)
    kernels: dict[str, Any] = {}
    for name, call in calls.items():
        base = {"params": list(call.params), "sizes": list(call.sizes)}
        kernels[name] = {"backend": "cpp", **base} if call.pointers else {"backend": "triton", **base, **_triton(call.fn, path)}
    graph: dict[str, Any] = {"namespace": recipes, "kernels": kernels, "fallbacks": list(compiled.fallbacks),
                             "kernel_count": compiled.kernel_count}
    if any(k["backend"] == "cpp" for k in kernels.values()):
        if compiled.library_path is None:
            raise ArtifactError("the compiled graph's C++ kernels have no shared object to ship")
        shutil.copyfile(compiled.library_path, os.path.join(path, layout.LIBRARY))
        with open(os.path.join(path, "kernels.cpp"), "w", encoding="utf-8") as f:
            f.write(compiled.cpp_source)  # for humans: never compiled or read at load
    if any(k["backend"] == "triton" for k in kernels.values()):
        graph["launcher"] = _ship_launcher(path, config if config is not None else Config())
    with open(os.path.join(path, layout.WRAPPER), "w", encoding="utf-8") as f:
        f.write(compiled.wrapper_source)
    safetensors.torch.save_file(tensors, os.path.join(path, layout.CONSTANTS))
    weights = {name: t.detach().contiguous().cpu() for name, t in state.items()}
    safetensors.torch.save_file(weights, os.path.join(path, layout.WEIGHTS))
    manifest = {"versions": layout.versions(), "device": layout.device_record(device), "graph": graph, "program": dict(program)}
    layout.finish(path, manifest)
    return path


def _triton(launcher: Any, path: str) -> dict[str, Any]:
    """The launch facts and binaries of one Triton kernel: its chosen config, aligned and unaligned."""
    from .triton_runtime import (
        TritonLauncher,
        _binary_of,
        _compile,
        _constexprs,
        _target,
        canonical,
        default_launch_config,
        signature,
    )

    if not isinstance(launcher, TritonLauncher):
        raise ArtifactError(f"a kernel is a {type(launcher).__name__}, which an artifact cannot hold")
    if interpreting() or not torch.cuda.is_available():
        raise ArtifactError(
            f"Triton kernel {launcher.kernel.name} runs in Triton's interpreter here: an artifact ships GPU binaries, "
            "so compile it on the GPU (or with ptc-inductor's C++ backend for the CPU)"
        )
    kernel = launcher.kernel
    if launcher.config is None:
        launcher._set_config(default_launch_config(kernel))
    cfg = launcher.config
    assert cfg is not None
    resolved = launcher.resolve()
    os.makedirs(os.path.join(path, "triton"), exist_ok=True)
    binaries = []
    for aligned in (tuple(True for _ in kernel.params), tuple(False for _ in kernel.params)):
        binary = resolved.get((cfg.key(), aligned))
        if binary is None:
            target = _target(torch.device("cuda", torch.cuda.current_device()))
            binary = _binary_of(_compile(launcher.path, canonical(kernel).symbol, signature(kernel), _constexprs(kernel, cfg),
                                         aligned, cfg.num_warps, cfg.num_stages, target, launcher.fn))
        if binary is None:
            raise ArtifactError(f"Triton kernel {kernel.name} has no CUDA binary (artifacts need kernels compiled for a GPU)")
        if not binary.plain or len(kernel.params) + len(kernel.sizes) > MAX_POINTERS:
            raise ArtifactError(f"Triton kernel {kernel.name} needs Triton's own launcher, which an artifact cannot hold")
        file = f"triton/{canonical(kernel).symbol}.{cfg.key()}.{''.join('1' if a else '0' for a in aligned)}.cubin"
        if not os.path.exists(os.path.join(path, file)):
            with open(os.path.join(path, file), "wb") as f:
                f.write(binary.cubin)
        binaries.append({"aligned": list(aligned), "file": file, "name": binary.name, "shared": binary.shared,
                         "num_warps": binary.num_warps})
    xnumel = None if kernel.xnumel_source else int(kernel.xnumel)
    return {"binaries": binaries, "xblock": cfg.xblock, "xnumel": xnumel, "xnumel_source": kernel.xnumel_source or None}


def _ship_launcher(path: str, config: Config) -> dict[str, str] | None:
    """Copy ptc's CUDA launcher extension (built for this Python) into the artifact."""
    from .cuda_launch import launcher_module

    module = launcher_module(config)
    if module is None or not getattr(module, "__file__", None):
        return None  # the loader launches through ctypes
    tag = sys.implementation.cache_tag or "python"
    file = f"ptc_cuda_launch.{tag}.so"
    shutil.copyfile(str(module.__file__), os.path.join(path, file))
    return {"file": file, "python_tag": tag}
