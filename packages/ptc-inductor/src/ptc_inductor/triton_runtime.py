"""Loading, compiling, autotuning and launching generated Triton kernels.

Kernel modules live on disk under ``<cache_dir>/triton/<hash>.py`` (Triton needs a real file
to read a kernel's source). On a GPU, each (kernel, config) is compiled with
``triton.compile`` (Triton's own disk cache makes a second process compile nothing), in
parallel worker processes when a graph has several kernels; autotune winners are kept in
``<cache_dir>/triton/autotune.json``, keyed by kernel source, device and mode. Launches go
straight to the compiled kernel with a precomputed grid and constexpr arguments.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.util
import json
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from .codegen.triton import TritonKernel
from .codegen.triton_heuristics import LaunchConfig, candidate_configs, default_config
from .config import Config
from .errors import CodegenError
from .triton_interpret import INTERPRETER_GLOBALS, interpreting

log = logging.getLogger("ptc.inductor.triton")


_SIG_TYPES = {
    torch.float32: "*fp32",
    torch.float64: "*fp64",
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.int64: "*i64",
    torch.int32: "*i32",
    torch.int16: "*i16",
    torch.int8: "*i8",
    torch.uint8: "*u8",
    torch.bool: "*i1",
}


@dataclass(frozen=True, slots=True)
class TritonOptions:
    """Runtime options of the Triton backend (the Config fields it reads, plus its own)."""

    cache_dir: str
    autotune: str = "default"
    compile_workers: int = 0
    force_for_cpu: bool = False


def triton_options(config: Config, env: dict[str, str] | None = None) -> TritonOptions:
    """TritonOptions from ``config`` and the PTC_INDUCTOR_TRITON_* environment variables."""
    source = os.environ if env is None else env
    workers = int(source.get("PTC_INDUCTOR_COMPILE_WORKERS", str(min(16, os.cpu_count() or 1))))
    return TritonOptions(config.cache_dir, config.triton_autotune, workers, config.backend == "triton")


def _kernel_dir(cache_dir: str) -> str:
    path = os.path.join(cache_dir, "triton")
    os.makedirs(path, exist_ok=True)
    return path


def source_hash(source: str) -> str:
    """The cache key of a kernel module."""
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def write_module(kernel: TritonKernel, cache_dir: str) -> str:
    """Write ``kernel``'s module to the cache (once) and return its path."""
    path = os.path.join(_kernel_dir(cache_dir), f"{kernel.name}_{source_hash(kernel.source)}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(kernel.source)
        os.replace(tmp, path)
    return path


def load_module(path: str) -> ModuleType:
    """Import a kernel module from ``path``; under the interpreter, rebind its libdevice."""
    name = "ptc_triton_" + os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CodegenError(f"cannot import generated Triton module {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if interpreting():
        for key, value in INTERPRETER_GLOBALS.items():
            setattr(module, key, value)
    return module


def _constexprs(kernel: TritonKernel, cfg: LaunchConfig) -> dict[str, int]:
    out = {"XBLOCK": cfg.xblock}
    if kernel.style != "flat":
        out["RBLOCK"] = cfg.rblock
    return out


def signature(kernel: TritonKernel) -> dict[str, str]:
    """The ``triton.compile`` signature of ``kernel``: pointer types, then its constexprs."""
    sig = {name: _SIG_TYPES[dt] for name, dt in zip(kernel.params, kernel.param_dtypes)}
    sig["XBLOCK"] = "constexpr"
    if kernel.style != "flat":
        sig["RBLOCK"] = "constexpr"
    return sig


def _compile(path: str, name: str, signature: dict[str, str], constexprs: dict[str, int], aligned: tuple[bool, ...],
             num_warps: int, num_stages: int, target: tuple[str, int, int], fn: Any = None) -> Any:
    """Compile one kernel variant for ``target`` (backend, arch, warp size); runs in workers too."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    if fn is None:
        fn = getattr(load_module(path), name)
    gpu = GPUTarget(*target)
    backend = make_backend(gpu)
    attrs = {(i,): backend.parse_attr("D") for i, ok in enumerate(aligned) if ok}
    src = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=gpu, options={"num_warps": num_warps, "num_stages": num_stages})


def _compile_in_worker(*args: Any) -> float:
    start = time.perf_counter()
    _compile(*args)
    return time.perf_counter() - start


_POOL: concurrent.futures.ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def compile_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """The process pool kernels compile in, created once per process.

    Workers are forked: they inherit the imported modules (a spawned worker would spend
    seconds importing torch), and they never touch CUDA (``triton.compile`` is given its
    target), so forking a process that has initialized CUDA is safe here.
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(method)
            _POOL = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        return _POOL


def warm_compile_pool(workers: int) -> None:
    """Start the compile workers now, so the first graph's compile does not wait for them."""
    pool = compile_pool(workers)
    for fut in [pool.submit(time.sleep, 0.01) for _ in range(workers)]:
        fut.result()


def _target(device: torch.device) -> tuple[str, int, int]:
    major, minor = torch.cuda.get_device_capability(device)
    return ("cuda", major * 10 + minor, 32)


class TritonLauncher:
    """Runs one generated kernel: ``launcher(*tensors)`` with tensors in ``kernel.params`` order.

    The first call picks the launch config (heuristic, disk cache, or autotuning on the
    real inputs); later calls only fetch pointers and the stream, then launch.
    """

    def __init__(self, kernel: TritonKernel, options: TritonOptions, fn: Any, path: str) -> None:
        self.kernel = kernel
        self.options = options
        self.fn = fn
        self.path = path
        self.config: LaunchConfig | None = None
        self._grid = 1
        self._tail: tuple[int, ...] = ()
        self._variants: dict[tuple[bool, ...], Any] = {}
        # Read once: Triton itself decides interpretation when it is imported, and an
        # environment lookup on every launch is host time on the hot path.
        self._interpret = interpreting()

    def candidates(self) -> list[LaunchConfig]:
        """The launch configs the first call chooses among."""
        k = self.kernel
        return candidate_configs(k.style, k.xnumel, k.rnumel, k.rblock, self.options.autotune, k.strided)

    def _set_config(self, cfg: LaunchConfig) -> None:
        self.config = cfg
        self._grid = max(1, -(-self.kernel.xnumel // cfg.xblock))
        self._tail = tuple(_constexprs(self.kernel, cfg).values())
        self._variants = {}

    def __call__(self, *args: torch.Tensor) -> None:
        if self.config is None:
            self._choose(args)
        if self._interpret or not args or not args[0].is_cuda:
            self._launch_interpreted(args)
            return
        ptrs = [a.data_ptr() for a in args]
        aligned = tuple(p % 16 == 0 for p in ptrs)
        compiled = self._variants.get(aligned)
        if compiled is None:
            compiled = self._compile_variant(args, aligned)
        # The raw handle, without building a torch.cuda.Stream object on every launch (~3 us).
        stream = torch._C._cuda_getCurrentRawStream(args[0].get_device())
        compiled.run(self._grid, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *ptrs, *self._tail)

    def _launch_interpreted(self, args: Sequence[torch.Tensor]) -> None:
        assert self.config is not None
        self.fn[(self._grid,)](*args, **_constexprs(self.kernel, self.config))

    def _compile_variant(self, args: Sequence[torch.Tensor], aligned: tuple[bool, ...], cfg: LaunchConfig | None = None) -> Any:
        use = cfg or self.config
        assert use is not None
        sig = signature(self.kernel)
        compiled = _compile(self.path, self.kernel.name, sig, _constexprs(self.kernel, use), aligned,
                            use.num_warps, use.num_stages, _target(args[0].device), self.fn)
        if cfg is None:
            self._variants[aligned] = compiled
        return compiled

    def _choose(self, args: Sequence[torch.Tensor]) -> None:
        configs = self.candidates()
        if len(configs) == 1 or interpreting() or not args or not args[0].is_cuda:
            self._set_config(configs[0])
            return
        device = args[0].device
        key = f"{source_hash(self.kernel.source)}|{torch.cuda.get_device_name(device)}|{self.options.autotune}"
        cached = _read_autotune(self.options.cache_dir).get(key)
        if cached is not None:
            self._set_config(LaunchConfig(**cached))
            return
        from triton.testing import do_bench

        timings: list[tuple[float, LaunchConfig]] = []
        for cfg in configs:
            self._set_config(cfg)
            try:
                ms = do_bench(lambda: self(*args), warmup=5, rep=20)
            except Exception as exc:  # a config can exceed shared memory or registers: skip it
                log.debug("config %s of %s failed: %s", cfg.key(), self.kernel.name, exc)
                continue
            timings.append((float(ms), cfg))
        if not timings:
            raise CodegenError(f"no launch config of Triton kernel {self.kernel.name} ran")
        best = min(timings, key=lambda t: t[0])[1]
        log.debug("autotuned %s: %s", self.kernel.name, ", ".join(f"{c.key()}={ms:.4f}ms" for ms, c in timings))
        self._set_config(best)
        _write_autotune(self.options.cache_dir, key, best)


def _autotune_path(cache_dir: str) -> str:
    return os.path.join(_kernel_dir(cache_dir), "autotune.json")


def _read_autotune(cache_dir: str) -> dict[str, dict[str, int]]:
    try:
        with open(_autotune_path(cache_dir)) as f:
            data: dict[str, dict[str, int]] = json.load(f)
            return data
    except (OSError, ValueError):
        return {}


def _write_autotune(cache_dir: str, key: str, cfg: LaunchConfig) -> None:
    data = _read_autotune(cache_dir)
    data[key] = {"xblock": cfg.xblock, "rblock": cfg.rblock, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    path = _autotune_path(cache_dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def load_launchers(kernels: Sequence[TritonKernel], options: TritonOptions, device: torch.device | None = None) -> dict[str, TritonLauncher]:
    """A launcher per kernel; on a GPU, every candidate config is first compiled in parallel workers."""
    launchers: dict[str, TritonLauncher] = {}
    for k in kernels:
        path = write_module(k, options.cache_dir)
        launchers[k.name] = TritonLauncher(k, options, getattr(load_module(path), k.name), path)
    if device is not None and device.type == "cuda" and not interpreting():
        precompile(list(launchers.values()), device, options)
    return launchers


def precompile(launchers: Sequence[TritonLauncher], device: torch.device, options: TritonOptions) -> float:
    """Compile every (kernel, candidate config) into Triton's disk cache; returns the wall time."""
    start = time.perf_counter()
    target = _target(device)
    jobs = []
    for la in launchers:
        k = la.kernel
        sig = signature(k)
        aligned = tuple(True for _ in k.params)
        for cfg in la.candidates():
            jobs.append((la.path, k.name, sig, _constexprs(k, cfg), aligned, cfg.num_warps, cfg.num_stages, target))
    if options.compile_workers > 1 and len(jobs) > 1:
        pool = compile_pool(options.compile_workers)
        for fut in [pool.submit(_compile_in_worker, *job) for job in jobs]:
            fut.result()
    else:
        for job in jobs:
            _compile(*job)
    elapsed = time.perf_counter() - start
    log.debug("compiled %d Triton kernel variants in %.2fs", len(jobs), elapsed)
    return elapsed


def default_launch_config(kernel: TritonKernel) -> LaunchConfig:
    """The heuristic config of ``kernel`` (what a launch without autotuning uses)."""
    return default_config(kernel.style, kernel.xnumel, kernel.rnumel, kernel.rblock, kernel.strided)
