"""Tensor guards read in C++ (the ``_tensormeta`` extension), built on first use against the installed torch.

A tensor guard in Python reads ``type``, ``dtype``, ``requires_grad``, the device, ``size()``
and ``stride()``: about 1.3 us a tensor, most of it building torch.Size and tuple objects. A
model's guards check every parameter on every call (BERT-base: 200 tensors, about 0.35 ms
before its first kernel can start). ``check(tensor, type, spec)`` does the same comparison on
the TensorImpl in one call.

The module is compiled with the system C++ compiler against torch's own c10 headers (about
2 s, once per torch version) into the package directory, or into the user cache when that is
not writable. Its file name carries a digest of the source and of torch's build, so it is
never loaded into another torch. If it cannot be built, guards stay in Python and
``unavailable_reason()`` says why; ``PTC_CAPTURE_TENSORMETA=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ptc_capture.build_ext import compiler
from ptc_capture.logs import channel

__all__ = ["built_path", "module", "spec", "unavailable_reason"]

SOURCE = Path(__file__).with_name("_tensormeta.cpp")
_log = channel("guards")
_lock = threading.Lock()
_state: dict[str, Any] = {}


def _digest() -> str:
    key = [SOURCE.read_bytes(), torch.__version__.encode(), str(torch.version.git_version).encode(),
           str(torch._C._GLIBCXX_USE_CXX11_ABI).encode(), sys.implementation.cache_tag.encode()]
    return hashlib.sha256(b"\0".join(key)).hexdigest()[:16]


def _candidates() -> list[Path]:
    name = f"_tensormeta-{_digest()}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    home = os.environ.get("PTC_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ptc")
    return [SOURCE.parent / name, Path(home) / "capture" / name]


def _build(target: Path) -> None:
    torch_dir = Path(torch.__file__).parent
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built under a temporary name and renamed: a process that loads it never sees half a file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [*compiler("c++"), "-shared", "-fPIC", "-O2", "-std=c++17", "-w", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           f"-I{sysconfig.get_paths()['include']}", f"-I{torch_dir / 'include'}", str(SOURCE), "-o", tmp,
           f"-L{torch_dir / 'lib'}", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}"]
    if sys.platform == "darwin":
        cmd += ["-undefined", "dynamic_lookup"]  # Python's symbols come from the interpreter at load
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE.name} failed: {proc.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader("ptc_capture._tensormeta", str(path))
    found = importlib.util.spec_from_file_location("ptc_capture._tensormeta", path, loader=loader)
    assert found is not None
    loaded = importlib.util.module_from_spec(found)
    loader.exec_module(loaded)
    return loaded


def _find_or_build() -> tuple[ModuleType | None, Path | None, str]:
    if os.environ.get("PTC_CAPTURE_TENSORMETA", "1") == "0":
        return None, None, "PTC_CAPTURE_TENSORMETA=0 turns the C++ tensor guards off"
    candidates = _candidates()
    for path in candidates:
        if path.exists():
            try:
                return _load(path), path, ""
            except Exception as exc:  # a file from a failed copy: rebuild it below
                _log.info("ignoring %s: %s", path, exc)
    reasons = []
    for path in candidates:
        try:
            _build(path)
            return _load(path), path, ""
        except Exception as exc:
            reasons.append(f"{path.parent}: {exc}")
    return None, None, "the C++ tensor guards could not be built (" + "; ".join(reasons) + "); guards check tensors in Python"


def module() -> ModuleType | None:
    """The loaded ``_tensormeta`` module (built on the first call), or None where it cannot be built."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                found, path, reason = _find_or_build()
                if found is None:
                    _log.info("%s", reason)
                _state.update(module=found, path=path, reason=reason)
    loaded: ModuleType | None = _state["module"]
    return loaded


def built_path() -> Path | None:
    """Where the loaded module's file is, once ``module()`` found or built it."""
    module()
    path: Path | None = _state["path"]
    return path


def unavailable_reason() -> str:
    """Why ``module()`` is None (empty when it is loaded)."""
    module()
    return str(_state["reason"])


def spec(dtype: torch.dtype, device: torch.device, requires_grad: bool, shape: tuple[int, ...], stride: tuple[int, ...]) -> bytes | None:
    """The packed metadata ``check`` compares a tensor with, or None where only the Python guard can say
    (no module, or a device without a fixed index, whose match is not a plain comparison)."""
    ext = module()
    if ext is None or not isinstance(dtype, torch.dtype) or not isinstance(device, torch.device):
        return None
    if device.type == "cpu":
        device = torch.device("cpu")  # CPU tensors report no index, whatever index the trace's device named
    elif device.index is None:
        return None
    if len(shape) != len(stride):
        return None
    words = [*ext.codes(dtype, device), int(requires_grad), len(shape), *shape, *stride]
    return array("q", words).tobytes()
