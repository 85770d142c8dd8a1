"""Loading Triton kernel binaries (cubins) onto a GPU and launching them, through the CUDA driver.

One launch path serves both halves of ptc-inductor: the launchers of a live compile and those
of an ahead-of-time artifact load cubins with :func:`load_binary` and launch them through ptc's
launcher extension (``LAUNCHER_SOURCE``, a small CPython module over ``cuLaunchKernel``; the
compiler half builds it once per machine, an artifact ships the built module). Where that
module is unavailable, :func:`ctypes_launch` calls the driver through ctypes (slower per launch).
The driver library is opened at run time: nothing here links against CUDA or imports Triton's
compiler.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import torch

from ..errors import CodegenError
from .errors import ArtifactError

log = logging.getLogger("ptc.inductor.triton")

MAX_POINTERS = 256
"""More pointer arguments than this are launched through Triton's own launcher."""

LAUNCHER_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <cstdint>

// The few CUDA driver entry points used, with their cuda.h signatures (a stable C ABI), so
// that building needs no CUDA headers.
typedef int CUresult;
typedef CUresult (*LaunchFn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void*, void**, void**);
typedef CUresult (*ErrorStringFn)(CUresult, const char**);

static LaunchFn launch_kernel = nullptr;
static ErrorStringFn error_string = nullptr;
static const Py_ssize_t kFixed = 5;
static const Py_ssize_t kMaxPointers = MAX_POINTERS_VALUE;

static bool bind_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    PyErr_Format(PyExc_RuntimeError, "cannot open the CUDA driver library: %s", dlerror());
    return false;
  }
  launch_kernel = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
  error_string = reinterpret_cast<ErrorStringFn>(dlsym(lib, "cuGetErrorString"));
  if (!launch_kernel) {
    PyErr_SetString(PyExc_RuntimeError, "the CUDA driver library has no cuLaunchKernel");
    return false;
  }
  return true;
}

// launch(function, grid, threads, shared_bytes, stream, *pointers): one-dimensional grid;
// the kernel's two trailing scratch pointers (unused by our kernels) are passed as null.
static PyObject* launch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < kFixed || nargs - kFixed > kMaxPointers) {
    PyErr_SetString(PyExc_TypeError, "launch(function, grid, threads, shared, stream, *pointers)");
    return nullptr;
  }
  if (!launch_kernel && !bind_driver()) return nullptr;
  void* function = PyLong_AsVoidPtr(args[0]);
  unsigned long grid = PyLong_AsUnsignedLong(args[1]);
  unsigned long threads = PyLong_AsUnsignedLong(args[2]);
  unsigned long shared = PyLong_AsUnsignedLong(args[3]);
  void* stream = PyLong_AsVoidPtr(args[4]);
  Py_ssize_t count = nargs - kFixed;
  uint64_t values[kMaxPointers + 2];
  void* params[kMaxPointers + 2];
  for (Py_ssize_t i = 0; i < count; ++i) {
    values[i] = PyLong_AsUnsignedLongLong(args[kFixed + i]);
    params[i] = &values[i];
  }
  values[count] = values[count + 1] = 0;
  params[count] = &values[count];
  params[count + 1] = &values[count + 1];
  if (PyErr_Occurred()) return nullptr;
  CUresult status = launch_kernel(function, static_cast<unsigned>(grid), 1, 1,
                                  static_cast<unsigned>(threads), 1, 1,
                                  static_cast<unsigned>(shared), stream, params, nullptr);
  if (status != 0) {
    const char* text = nullptr;
    if (error_string) error_string(status, &text);
    PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: %s (%d)", text ? text : "unknown error", status);
    return nullptr;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch)), METH_FASTCALL,
     "launch(function, grid, threads, shared, stream, *pointers)"},
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "ptc_cuda_launch", nullptr, -1, methods};

// The driver is bound at the first launch, so the module imports on machines without CUDA.
PyMODINIT_FUNC PyInit_ptc_cuda_launch(void) { return PyModule_Create(&module_def); }
""".replace("MAX_POINTERS_VALUE", str(MAX_POINTERS))

LAUNCHER_NAME = "ptc_cuda_launch"
"""The launcher extension's module name (its ``PyInit_`` symbol)."""


@dataclass(frozen=True, slots=True)
class KernelBinary:
    """One compiled (kernel, config): the cubin and its launch facts."""

    name: str
    cubin: bytes
    shared: int
    num_warps: int
    # No scratch memory to allocate per launch: ptc's own launcher can run it.
    plain: bool
    seconds: float = 0.0
    """How long the compile took (in its worker); 0 for a binary read from an artifact."""


class LoadedKernel(NamedTuple):
    """A kernel binary loaded on the device, launched by ptc's launcher."""

    function: int
    threads: int
    shared: int


_LOADED: dict[tuple[int, int], tuple[KernelBinary, LoadedKernel]] = {}
"""Binaries loaded on a device, by (id of the binary, device index); the binary is kept with its
loaded form, so the id stays its own. Launchers of one repeated kernel share one binary object."""

# CUDA driver enum values (cuda.h, a stable ABI).
_FUNC_MAX_THREADS_PER_BLOCK = 0
_FUNC_SHARED_SIZE_BYTES = 1
_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_DEV_MAX_SHARED_PER_BLOCK_OPTIN = 97
_CACHE_PREFER_SHARED = 2
_STATIC_SHARED_LIMIT = 49152


@functools.cache
def _driver() -> ctypes.CDLL:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise ArtifactError("cannot open the CUDA driver library (libcuda.so.1): install the NVIDIA driver")


def _check(status: int, what: str) -> None:
    if status != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(status, ctypes.byref(text))
        raise RuntimeError(f"{what} failed: {(text.value or b'unknown error').decode()} ({status})")


def _ensure_context(index: int) -> None:
    """Make the device's primary context current (torch's runtime calls normally have already)."""
    cu = _driver()
    ctx = ctypes.c_void_p()
    _check(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        dev = ctypes.c_int()
        _check(cu.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        _check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def _load_with_driver(binary: KernelBinary, index: int) -> tuple[int, int]:
    """cuModuleLoadData + cuModuleGetFunction; returns (function handle, max threads per block)."""
    cu = _driver()
    _ensure_context(index)
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    image = ctypes.create_string_buffer(binary.cubin, len(binary.cubin))
    _check(cu.cuModuleLoadData(ctypes.byref(module), image), f"loading kernel {binary.name}")
    _check(cu.cuModuleGetFunction(ctypes.byref(function), module, binary.name.encode()), f"finding kernel {binary.name}")
    max_threads = ctypes.c_int()
    _check(cu.cuFuncGetAttribute(ctypes.byref(max_threads), _FUNC_MAX_THREADS_PER_BLOCK, function), "cuFuncGetAttribute")
    if binary.shared > _STATIC_SHARED_LIMIT:
        # More than 48 KiB of dynamic shared memory must be opted into per function.
        dev, optin, static = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        _check(cu.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        _check(cu.cuDeviceGetAttribute(ctypes.byref(optin), _DEV_MAX_SHARED_PER_BLOCK_OPTIN, dev), "cuDeviceGetAttribute")
        if optin.value > _STATIC_SHARED_LIMIT:
            _check(cu.cuFuncSetCacheConfig(function, _CACHE_PREFER_SHARED), "cuFuncSetCacheConfig")
            _check(cu.cuFuncGetAttribute(ctypes.byref(static), _FUNC_SHARED_SIZE_BYTES, function), "cuFuncGetAttribute")
            _check(cu.cuFuncSetAttribute(function, _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin.value - static.value),
                   "cuFuncSetAttribute")
    return int(function.value or 0), int(max_threads.value)


def _load_with_triton(binary: KernelBinary, index: int) -> tuple[int, int]:
    from triton.runtime.driver import driver

    _, function, _, _, max_threads = driver.active.utils.load_binary(binary.name, binary.cubin, binary.shared, index)
    return int(function), int(max_threads)


def _triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # blocked, or a stub module without a spec
        return False


def load_binary(binary: KernelBinary, device: torch.device) -> LoadedKernel:
    """Load ``binary`` into the device's context once; later calls return the loaded kernel."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    known = _LOADED.get((id(binary), index))
    if known is not None:
        return known[1]
    try:
        # The module must load into the context of the tensor's device, whatever device is current.
        with torch.cuda.device(index):
            function, max_threads = _load_with_driver(binary, index)
    except (OSError, RuntimeError, AttributeError, ArtifactError) as exc:
        if not _triton_installed():
            raise
        # A driver call that failed here may still succeed through Triton's own utilities (a
        # process holding the compiler has them at hand); the artifact path has no Triton.
        log.warning("loading %s through the CUDA driver failed (%s); using Triton's loader", binary.name, exc)
        function, max_threads = _load_with_triton(binary, index)
    threads = 32 * binary.num_warps
    if threads > max_threads:
        raise CodegenError(f"Triton kernel {binary.name} needs {threads} threads per block; the device allows {max_threads}")
    loaded = LoadedKernel(function, threads, binary.shared)
    _LOADED[(id(binary), index)] = (binary, loaded)
    return loaded


def ctypes_launch(function: int, grid: int, threads: int, shared: int, stream: int, *values: int) -> None:
    """The launcher extension's ``launch``, through ctypes: for artifacts whose shipped
    extension does not match this Python."""
    count = len(values)
    # Two trailing scratch pointers (unused by our kernels) are passed as null, as the extension does.
    slots = (ctypes.c_uint64 * (count + 2))(*values, 0, 0)
    params = (ctypes.c_void_p * (count + 2))(*(ctypes.addressof(slots) + 8 * i for i in range(count + 2)))
    status = _driver().cuLaunchKernel(
        ctypes.c_void_p(function), grid, 1, 1, threads, 1, 1, shared, ctypes.c_void_p(stream), params, None
    )
    _check(status, "cuLaunchKernel")


def import_extension(path: str, name: str = LAUNCHER_NAME) -> ModuleType:
    """Import the CPython extension module ``name`` built at ``path`` (a shared object for this Python)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raw_stream(device_index: int) -> int:
    """The current CUDA stream's raw handle, without building a torch.cuda.Stream object (~3 us)."""
    return int(torch._C._cuda_getCurrentRawStream(device_index))


def launch_loaded(launch: Any, kernel: LoadedKernel, grid: int, stream: int, values: tuple[int, ...]) -> None:
    """Launch a loaded kernel over a one-dimensional ``grid`` with ``values`` (pointers, then sizes)."""
    launch(kernel.function, grid, kernel.threads, kernel.shared, stream, *values)


__all__ = [
    "LAUNCHER_NAME", "LAUNCHER_SOURCE", "MAX_POINTERS", "KernelBinary", "LoadedKernel", "ctypes_launch", "import_extension",
    "launch_loaded", "load_binary", "raw_stream",
]
