"""Ahead-of-time artifacts: a directory a production process loads and runs with this subpackage only.

Layout (``docs/deployment.md`` has the full description)::

    manifest.json           format, versions, device, every file's size and sha256, the program
    wrapper.py              the generated wrapper (code ptc-inductor wrote)
    kernels.so              the C++ kernels, built for the CPU named in the manifest (code)
    triton/*.cubin          the Triton kernels' binaries for the GPU architecture named (code)
    ptc_cuda_launch.*.so    ptc's CUDA launcher extension, for the Python named (code)
    constants.safetensors   the graph's constant tensors
    weights.safetensors     parameters and buffers, by name

Loading checks the format, the manifest's own checksum, the size and sha256 of every file, the
torch version and the device before anything is executed; each refusal is one
:class:`ArtifactError` sentence. Tensor files are safetensors and the manifest is JSON: neither
executes code. The kernels, launcher and wrapper are code by nature, like any shared library.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import safetensors.torch
import torch

from .cuda import KernelBinary, ctypes_launch, import_extension
from .errors import ArtifactError
from .machine import cpu_id
from .namespace import build_namespace
from .program import Program
from .triton_launch import BinaryLauncher, size_function

FORMAT = "ptc-aot-artifact/1"
"""The artifact format this runtime reads and writes; a change that old loaders would misread bumps it."""
MANIFEST = "manifest.json"
WRAPPER = "wrapper.py"
LIBRARY = "kernels.so"
CONSTANTS = "constants.safetensors"
WEIGHTS = "weights.safetensors"

_PACKAGES = ("ptc", "ptc-spec", "ptc-capture", "ptc-aot", "ptc-decomp", "ptc-inductor", "ptc-cudagraphs", "torch", "triton",
             "safetensors")


def versions() -> dict[str, str]:
    """This process's Python, platform and package versions, as a manifest records them."""
    found = {"python": platform.python_version(), "python_tag": sys.implementation.cache_tag or "", "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    found["torch"] = torch.__version__
    return found


def device_record(device: torch.device) -> dict[str, Any]:
    """What compiled kernels for ``device`` are tied to: the CPU model, or the GPU architecture."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return {"type": "cuda", "arch": f"sm_{major}{minor}", "name": torch.cuda.get_device_name(device)}
    return {"type": device.type, "cpu": cpu_id(), "machine": platform.machine()}


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manifest_digest(manifest: Mapping[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def finish(path: str, manifest: dict[str, Any]) -> None:
    """Record every file under ``path`` (size and sha256) and the manifest's own checksum, then write it."""
    files: dict[str, Any] = {}
    for root, _, names in os.walk(path):
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            if rel != MANIFEST:
                files[rel] = {"size": os.path.getsize(full), "sha256": _sha256(full)}
    manifest = {**manifest, "format": FORMAT, "files": files}
    manifest["checksum"] = _manifest_digest(manifest)
    tmp = os.path.join(path, f".{MANIFEST}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(path, MANIFEST))


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of the artifact at ``path`` once the artifact passed every check (files, versions, device)."""
    where = os.path.join(path, MANIFEST)
    try:
        with open(where, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"{path} is not a ptc artifact: it has no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{where} is unreadable or truncated ({exc}); write the artifact again with ptc.aot_compile") from exc
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{where} is not an artifact manifest; write the artifact again with ptc.aot_compile")
    found = manifest.get("format")
    if found != FORMAT:
        raise ArtifactError(
            f"{path} has artifact format {found!r} and this ptc-inductor runtime reads {FORMAT!r}: "
            "compile it again with this version's ptc.aot_compile"
        )
    if manifest.get("checksum") != _manifest_digest(manifest):
        raise ArtifactError(f"{where} was edited after the artifact was written (its checksum does not match); write it again")
    _check_files(path, manifest["files"])
    _check_versions(path, manifest["versions"])
    _check_device(path, manifest["device"])
    return manifest


def _check_files(path: str, files: Mapping[str, Any]) -> None:
    for rel, want in files.items():
        full = os.path.join(path, rel)
        if not os.path.isfile(full):
            raise ArtifactError(f"artifact file {rel} is missing from {path}; copy the whole artifact directory")
        size = os.path.getsize(full)
        if size != want["size"]:
            raise ArtifactError(f"artifact file {rel} in {path} is truncated or edited ({size} bytes, {want['size']} written)")
        if _sha256(full) != want["sha256"]:
            raise ArtifactError(f"artifact file {rel} in {path} was edited after it was written (sha256 mismatch)")


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _check_versions(path: str, recorded: Mapping[str, str]) -> None:
    # Extern calls reach ATen ops by name and the wrapper calls torch: a torch of another minor
    # version may change an op's schema or a tensor API the artifact relies on.
    if _major_minor(recorded.get("torch", "?")) != _major_minor(torch.__version__):
        raise ArtifactError(
            f"{path} was compiled with torch {recorded.get('torch')} and this process runs torch {torch.__version__}: "
            "compile it again under this torch"
        )


def _check_device(path: str, recorded: Mapping[str, Any]) -> None:
    if recorded["type"] == "cuda":
        if not torch.cuda.is_available():
            raise ArtifactError(f"{path} holds CUDA kernels for {recorded['arch']} and this process sees no GPU")
        here = device_record(torch.device("cuda", torch.cuda.current_device()))
        if here["arch"] != recorded["arch"]:
            raise ArtifactError(
                f"{path} holds kernels compiled for GPU architecture {recorded['arch']} ({recorded['name']}) and this GPU is "
                f"{here['arch']} ({here['name']}): compile it again on this GPU"
            )
    elif recorded["type"] == "cpu" and recorded.get("cpu") != cpu_id():
        raise ArtifactError(
            f"{path} holds C++ kernels built for another CPU model (-march=native code may not run here): "
            "compile it again on this machine"
        )


def _cpp_kernels(path: str, kernels: Mapping[str, Any]) -> dict[str, Any]:
    cpp = {name: k for name, k in kernels.items() if k["backend"] == "cpp"}
    if not cpp:
        return {}
    try:
        library = ctypes.CDLL(os.path.join(path, LIBRARY))
    except OSError as exc:
        raise ArtifactError(f"cannot load the C++ kernels of {path} ({exc}); is libgomp (OpenMP) installed?") from exc
    found: dict[str, Any] = {}
    for name, k in cpp.items():
        fn = getattr(library, name)
        fn.argtypes = [ctypes.c_void_p] * (len(k["params"]) + len(k["sizes"]))
        fn.restype = None
        found[name] = fn
    return found


def _launch_function(path: str, manifest: Mapping[str, Any]) -> Callable[..., Any]:
    launcher = manifest.get("launcher")
    if launcher and launcher["python_tag"] == sys.implementation.cache_tag:
        try:
            launch: Callable[..., Any] = import_extension(os.path.join(path, launcher["file"])).launch
            return launch
        except (ImportError, OSError):
            pass
    return ctypes_launch


def _triton_kernels(path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    triton = {name: k for name, k in manifest["kernels"].items() if k["backend"] == "triton"}
    if not triton:
        return {}
    launch = _launch_function(path, manifest)
    read: dict[str, KernelBinary] = {}  # one object per file: repeated kernels load it once
    found: dict[str, Any] = {}
    for name, k in triton.items():
        binaries: dict[tuple[bool, ...], KernelBinary] = {}
        for b in k["binaries"]:
            if b["file"] not in read:
                with open(os.path.join(path, b["file"]), "rb") as f:
                    read[b["file"]] = KernelBinary(b["name"], f.read(), b["shared"], b["num_warps"], True)
            binaries[tuple(b["aligned"])] = read[b["file"]]
        xnumel = k["xnumel"] if k["xnumel_source"] is None else size_function(tuple(k["sizes"]), k["xnumel_source"])
        found[name] = BinaryLauncher(name, binaries, len(k["params"]), k["xblock"], xnumel, launch)
    return found


def load(path: str | os.PathLike[str]) -> Program:
    """Load the ahead-of-time artifact at ``path``: a callable taking the model's arguments and
    returning its outputs in the model's structure. Needs no compiler of any kind."""
    path = os.fspath(path)
    manifest = read_manifest(path)
    graph = manifest["graph"]
    constants = safetensors.torch.load_file(os.path.join(path, CONSTANTS))
    namespace = build_namespace(graph["namespace"], constants)
    namespace.update(_cpp_kernels(path, graph["kernels"]))
    namespace.update(_triton_kernels(path, graph))
    with open(os.path.join(path, WRAPPER), encoding="utf-8") as f:
        wrapper = f.read()
    # The wrapper is code ptc-inductor generated: running it is what loading a compiled model means.
    exec(compile(wrapper, os.path.join(path, WRAPPER), "exec"), namespace)
    device = manifest["program"].get("state_device", "cpu")
    weights = safetensors.torch.load_file(os.path.join(path, WEIGHTS), device=device)
    return Program(namespace["call"], manifest["program"], weights, path)


def kernel_files(kernels: Mapping[str, Any]) -> Sequence[str]:
    """Every binary file the kernels of a manifest's graph name."""
    return sorted({b["file"] for k in kernels.values() for b in k.get("binaries", ())})
