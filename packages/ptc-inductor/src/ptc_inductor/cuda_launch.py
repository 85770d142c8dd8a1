"""One launcher for every generated Triton kernel: a small CPython extension over the CUDA driver.

Triton builds a C launcher per kernel signature with the system compiler the first time a
kernel loads, serially in the process that launches it. Our kernels all take only pointers
(their block sizes are compile-time constants), so a single launcher serves them all: built
once per machine into the kernel cache, it makes a cold compile load binaries only. The driver
library is opened at run time, so nothing here links against CUDA.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

from .config import Config

log = logging.getLogger("ptc.inductor.triton")

MAX_POINTERS = 256
"""More pointer arguments than this are launched through Triton's own launcher."""

_SOURCE = r"""
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


@functools.cache
def launcher_module(config: Config) -> ModuleType | None:
    """The launcher extension (built on first use, then cached on disk), or None where it
    cannot be built or loaded; callers then launch through Triton's own launcher."""
    from .build import load_extension
    from .errors import BuildError

    try:
        return load_extension(_SOURCE, "ptc_cuda_launch", config)
    except (BuildError, ImportError, OSError) as exc:
        log.warning("ptc-inductor: launching Triton kernels through Triton's launcher: ours did not build (%s)", exc)
        return None
