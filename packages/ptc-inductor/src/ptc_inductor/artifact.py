"""A compiled graph as files, and back: what a later process needs to run it without lowering,
scheduling or code generation.

An artifact directory holds ``manifest.json`` (the wrapper's source, how to rebuild each object
its namespace holds, the kernels), ``tensors.safetensors`` (the graph's constants) and one
``.cubin`` file per compiled Triton kernel variant. Nothing in it is executed on load except the
wrapper source ptc-inductor itself generated; no pickle. C++ kernels are rebuilt from their
source through the kernel cache (a hit loads the shared object; a miss builds it again), Triton
kernels load their cubins directly, so a warm process compiles nothing.

Objects a wrapper may hold that have no recipe here make the graph unsaveable:
:func:`save_artifact` raises :class:`ArtifactError` and the caller keeps the compiled graph
in memory only.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from collections.abc import Container
from typing import Any

import safetensors.torch
import sympy
import torch

from .compiled import CompiledGraph, KernelCall, compile_source
from .config import Config
from .runtime.errors import ArtifactError
from .runtime.namespace import DTYPES as _DTYPES
from .runtime.namespace import FUNCTIONS as _FUNCTIONS
from .runtime.namespace import build_namespace
from .runtime.recycle import OutputRecycler
from .size_sources import SymbolSource
from .triton_kernel import TritonKernel

FORMAT = "ptc-inductor-artifact/1"
MANIFEST = "manifest.json"
TENSORS = "tensors.safetensors"

_FUNCTION_NAMES = {id(fn): name for name, fn in _FUNCTIONS.items()}

__all__ = ["ArtifactError", "load_artifact", "save_artifact"]


def save_artifact(compiled: CompiledGraph, path: str) -> None:
    """Write ``compiled`` into the (new or empty) directory ``path``."""
    if compiled.namespace is None:
        raise ArtifactError("this compiled graph keeps no namespace (it was not compiled by ptc_inductor.compile)")
    os.makedirs(path, exist_ok=True)
    recipes, tensors = encode_namespace(compiled.namespace, compiled.kernel_calls)
    kernels = {name: _encode_kernel(call, path) for name, call in compiled.kernel_calls.items() if name in compiled.namespace}
    manifest = {
        "format": FORMAT,
        "wrapper": compiled.wrapper_source,
        "cpp_source": compiled.cpp_source,
        "namespace": recipes,
        "kernels": kernels,
        "symbols": [[s.name, s.input, s.kind, s.dim] for s in compiled.symbols],
        "fallbacks": list(compiled.fallbacks),
        "kernel_count": compiled.kernel_count,
    }
    safetensors.torch.save_file(tensors, os.path.join(path, TENSORS))
    with open(os.path.join(path, MANIFEST), "w") as f:
        json.dump(manifest, f)


def load_artifact(path: str, config: Config) -> CompiledGraph:
    """Rebuild the compiled graph saved in ``path``; C++ kernels come from ``config``'s kernel cache."""
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"cannot read {os.path.join(path, MANIFEST)}: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path} holds format {manifest.get('format')!r}; this ptc-inductor reads {FORMAT}")
    tensors = safetensors.torch.load_file(os.path.join(path, TENSORS))
    namespace = build_namespace(manifest["namespace"], tensors)
    calls = _load_kernels(manifest, path, config)
    namespace.update({name: call.fn for name, call in calls.items()})
    exec(compile_source(manifest["wrapper"]), namespace)
    if any(not call.pointers for call in calls.values()):
        from .triton_runtime import tune_after_calls

        tune_after_calls(namespace)
    symbols = tuple(SymbolSource(name, i, kind, dim) for name, i, kind, dim in manifest["symbols"])
    return CompiledGraph(
        namespace["call"], manifest["cpp_source"], manifest["wrapper"], None, None, None, tuple(manifest["fallbacks"]), symbols,
        namespace=None, kernel_calls=calls, loaded_kernel_count=manifest["kernel_count"], call_boxed=namespace.get("call_boxed"),
    )


# -- namespace objects ---------------------------------------------------------------------------
def encode_namespace(namespace: dict[str, Any], kernels: Container[str]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A recipe per object of a wrapper's namespace (kernels left out: each format writes its own)
    and the constant tensors, as CPU copies by name."""
    tensors: dict[str, torch.Tensor] = {}
    recipes: dict[str, Any] = {}
    for name, value in namespace.items():
        if name == "__builtins__" or name in kernels:
            continue
        if name.endswith("_ptr") and isinstance(namespace.get(name[:-4]), torch.Tensor):
            recipes[name] = {"kind": "data_ptr", "of": name[:-4]}
        elif isinstance(value, torch.Tensor):
            tensors[name] = value.detach().contiguous().cpu()
            recipes[name] = {"kind": "tensor", "device": str(value.device), "size": list(value.shape), "stride": list(value.stride())}
        else:
            recipes[name] = _encode(value, name)
    return recipes, tensors


def _encode(value: Any, name: str) -> dict[str, Any]:
    if value is torch:
        return {"kind": "module"}
    if isinstance(value, torch.dtype):
        return {"kind": "dtype", "name": str(value)}
    if isinstance(value, torch.device):
        return {"kind": "device", "name": str(value)}
    if isinstance(value, torch._ops.OpOverload):
        return {"kind": "op", "namespace": value.namespace, "name": value._opname, "overload": value._overloadname}
    if isinstance(value, float) and not math.isfinite(value):
        return {"kind": "float", "repr": repr(value)}
    if isinstance(value, OutputRecycler):
        size, stride, dtype, nbytes = value.layout()
        # A recycler over symbolic sizes is only asked for tensors of the call's own sizes
        # (``take_sized``): its fixed layout is never read, so none is kept.
        fixed = all(isinstance(v, int) for v in (*size, *stride))
        return {"kind": "recycler", "size": list(size) if fixed else None, "stride": list(stride) if fixed else None,
                "dtype": str(dtype), "nbytes": int(nbytes)}
    if id(value) in _FUNCTION_NAMES:
        return {"kind": "function", "name": _FUNCTION_NAMES[id(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"kind": "value", "value": value}
    raise ArtifactError(f"the wrapper's {name} is a {type(value).__name__}, which an artifact cannot hold")


# -- kernels -------------------------------------------------------------------------------------
def _encode_kernel(call: KernelCall, path: str) -> dict[str, Any]:
    base = {"params": list(call.params), "sizes": list(call.sizes)}
    if call.pointers:
        return {"backend": "cpp", **base}
    from .triton_runtime import TritonLauncher

    launcher = call.fn
    if not isinstance(launcher, TritonLauncher):
        raise ArtifactError(f"kernel {call.name} is a {type(launcher).__name__}, which an artifact cannot hold")
    from .triton_runtime import canonical

    binaries = []
    for (config_key, aligned), binary in sorted(launcher.resolve().items()):
        # Named by the canonical kernel: the copies of a repeated kernel share one file.
        file = f"{canonical(launcher.kernel).symbol}.{config_key}.{''.join('1' if a else '0' for a in aligned)}.cubin"
        if not os.path.exists(os.path.join(path, file)):
            with open(os.path.join(path, file), "wb") as f:
                f.write(binary.cubin)
        binaries.append({"config": config_key, "aligned": list(aligned), "file": file, "name": binary.name,
                         "shared": binary.shared, "num_warps": binary.num_warps, "plain": binary.plain})
    return {"backend": "triton", **base, "kernel": _encode_triton_kernel(launcher.kernel), "binaries": binaries}


def _encode_triton_kernel(k: TritonKernel) -> dict[str, Any]:
    return {
        "name": k.name, "source": k.source, "params": list(k.params), "param_dtypes": [str(d) for d in k.param_dtypes],
        "style": k.style, "xnumel": _size(k.xnumel), "rnumel": _size(k.rnumel), "rblock": k.rblock,
        "index_dtype": k.index_dtype, "strided": k.strided, "origins": list(k.origins), "sizes": list(k.sizes),
        "xnumel_source": k.xnumel_source, "xnumel_hint": k.xnumel_hint, "rnumel_hint": k.rnumel_hint, "rows": k.rows,
    }


def _size(value: Any) -> int | str:
    return int(value) if isinstance(value, int) or (isinstance(value, sympy.Integer)) else str(value)


def _decode_triton_kernel(data: dict[str, Any]) -> TritonKernel:
    fields = dict(data)
    fields["params"] = tuple(data["params"])
    fields["param_dtypes"] = tuple(_DTYPES[d] for d in data["param_dtypes"])
    fields["origins"] = tuple(data["origins"])
    fields["sizes"] = tuple(data["sizes"])
    for key in ("xnumel", "rnumel"):
        if isinstance(data[key], str):
            fields[key] = sympy.sympify(data[key])
    return TritonKernel(**fields)


def _load_kernels(manifest: dict[str, Any], path: str, config: Config) -> dict[str, KernelCall]:
    calls: dict[str, KernelCall] = {}
    cpp = {name: k for name, k in manifest["kernels"].items() if k["backend"] == "cpp"}
    if cpp:
        from .build import load_library

        # No precompiled prelude here: that would import code generation into every warm start,
        # for the rare entry whose library the kernel cache lost (rebuilt at the full cost).
        library, _ = load_library(manifest["cpp_source"], config)
        for name, k in cpp.items():
            fn = getattr(library, name)
            fn.argtypes = [ctypes.c_void_p] * (len(k["params"]) + len(k["sizes"]))
            fn.restype = None
            calls[name] = KernelCall(name, fn, tuple(k["params"]), True, tuple(k["sizes"]))
    triton = {name: k for name, k in manifest["kernels"].items() if k["backend"] == "triton"}
    if triton:
        from .runtime.cuda import KernelBinary
        from .triton_runtime import TritonLauncher, triton_options, write_module

        options = triton_options(config)
        launch = _cuda_launch(config)
        # One object per file: the launchers of a repeated kernel load its binary once.
        read: dict[str, KernelBinary] = {}
        for name, k in triton.items():
            kernel = _decode_triton_kernel(k["kernel"])
            launcher = TritonLauncher(kernel, options, None, write_module(kernel, options.cache_dir), launch)
            for b in k["binaries"]:
                if b["file"] not in read:
                    with open(os.path.join(path, b["file"]), "rb") as f:
                        read[b["file"]] = KernelBinary(b["name"], f.read(), b["shared"], b["num_warps"], b["plain"])
                launcher.binaries[(b["config"], tuple(b["aligned"]))] = read[b["file"]]
            calls[name] = KernelCall(name, launcher, tuple(k["params"]), False, tuple(k["sizes"]))
    return calls


def _cuda_launch(config: Config) -> Any:
    """ptc's CUDA launcher where kernels run on a GPU, else None (Triton's launcher, or the interpreter)."""
    from .triton_interpret import interpreting

    if interpreting() or not torch.cuda.is_available():
        return None
    from .cuda_launch import launcher_module

    module = launcher_module(config)
    return module.launch if module is not None else None
