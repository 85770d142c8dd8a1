"""Loading, compiling, autotuning and launching generated Triton kernels.

Kernel modules live on disk under ``<cache_dir>/triton/<hash>.py`` (Triton needs a real file
to read a kernel's source). On a GPU, each (kernel, config) is compiled with
``triton.compile`` (Triton's own disk cache makes a second process compile nothing), in
parallel worker processes when a graph has several kernels; autotune winners are kept in
``<cache_dir>/triton/autotune.json``, keyed by kernel source, device and mode. Workers hand
back each variant's cubin; the parent loads it and launches it through ptc's one launcher
(``cuda_launch.py``) with a precomputed grid, or through Triton's own launcher for kernels
that need scratch memory or where ours cannot be built.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import math
import multiprocessing
import multiprocessing.util
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import torch

from ptc_spec.meta import storage_span

from .codegen.triton_heuristics import LaunchConfig, candidate_configs, default_config, next_pow2
from .config import Config
from .errors import CodegenError
from .runtime.cuda import MAX_POINTERS, KernelBinary, LoadedKernel, load_binary, raw_stream
from .triton_interpret import INTERPRETER_GLOBALS, interpreting
from .triton_kernel import TritonKernel

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


class Canonical(NamedTuple):
    """A kernel's source with its graph-specific names taken out: the function is named by a
    hash of its body and its pointer parameters by position, and comments are dropped. Kernels
    of repeated blocks (every layer of a transformer) differ only in those names, so they share
    one canonical module: compiled, autotuned and loaded once."""

    symbol: str
    source: str
    params: tuple[str, ...]


@functools.lru_cache(maxsize=8192)
def canonical(kernel: TritonKernel) -> Canonical:
    """The canonical form of ``kernel`` (see :class:`Canonical`)."""
    rename = {p: f"in_ptr{i}" for i, p in enumerate(kernel.params)}
    text = "\n".join(ln for ln in kernel.source.splitlines() if not ln.lstrip().startswith("#"))
    if rename:
        names = re.compile(r"\b(" + "|".join(re.escape(p) for p in sorted(rename, key=len, reverse=True)) + r")\b")
        text = names.sub(lambda m: rename[m.group(0)], text)
    text = re.sub(rf"\bdef {re.escape(kernel.name)}\(", "def KERNEL(", text, count=1)
    symbol = f"ptc_{hashlib.sha256(text.encode()).hexdigest()[:24]}"
    return Canonical(symbol, text.replace("def KERNEL(", f"def {symbol}(", 1) + "\n", tuple(rename.values()))


def write_module(kernel: TritonKernel, cache_dir: str) -> str:
    """Write ``kernel``'s canonical module to the cache (once) and return its path; the
    module's function is ``canonical(kernel).symbol``."""
    form = canonical(kernel)
    path = os.path.join(_kernel_dir(cache_dir), f"{form.symbol}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(form.source)
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
    """The ``triton.compile`` signature of ``kernel``'s canonical function: pointer types, its int64 sizes, then its constexprs.

    Sizes get no specialization attribute (divisible by 16, equal to 1): one binary serves every size."""
    sig = {name: _SIG_TYPES[dt] for name, dt in zip(canonical(kernel).params, kernel.param_dtypes)}
    sig.update({name: "i64" for name in kernel.sizes})
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


def _binary_of(compiled: Any) -> KernelBinary | None:
    """The binary of a Triton CompiledKernel, or None where it has no CUDA binary."""
    md = compiled.metadata
    cubin = compiled.asm.get("cubin")
    if not isinstance(cubin, bytes):
        return None
    plain = not getattr(md, "global_scratch_size", 0) and not getattr(md, "profile_scratch_size", 0)
    return KernelBinary(md.name, cubin, md.shared, md.num_warps, plain)


def _compile_in_worker(*args: Any) -> KernelBinary | None:
    start = time.perf_counter()
    binary = _binary_of(_compile(*args))
    return None if binary is None else dataclasses.replace(binary, seconds=time.perf_counter() - start)


def _prepare_worker() -> None:
    """Import Triton's compiler and CUDA backend once per worker, not in its first job."""
    try:
        import triton.compiler  # noqa: F401
        from triton.backends.nvidia import compiler  # noqa: F401
    except ImportError:  # a failing initializer would break the pool; the job reports the error
        pass


_POOL: concurrent.futures.ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_RESOLVE_LOCK = threading.Lock()


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
            _POOL = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_prepare_worker)
            # Shut down before interpreter teardown: the executor's own late cleanup otherwise
            # runs after modules are gone and prints an ignored exception at exit.
            atexit.register(_POOL.shutdown, wait=False, cancel_futures=True)
            # A process that multiprocessing started (mp.spawn's ranks) joins its children
            # before atexit runs: the idle workers would keep it from ever exiting. The priority
            # is above the pool's own queues' finalizers (10), which stop the thread that would
            # carry the workers' stop signals.
            multiprocessing.util.Finalize(None, _POOL.shutdown, kwargs={"wait": True, "cancel_futures": True}, exitpriority=100)
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
    """Runs one generated kernel: ``launcher(*tensors, *sizes)`` with tensors in ``kernel.params``
    order, then the values of the size symbols in ``kernel.sizes``.

    The first call picks the launch config (heuristic from the size hints, disk cache, or
    autotuning on the real inputs); later calls only fetch pointers and the stream, compute the
    grid when sizes are symbolic, then launch.
    """

    def __init__(self, kernel: TritonKernel, options: TritonOptions, fn: Any, path: str, launch: Any = None) -> None:
        self.kernel = kernel
        self.options = options
        self._fn = fn
        self.path = path
        self.config: LaunchConfig | None = None
        self._xblock = 1
        self._tail: tuple[int, ...] = ()
        self._variants: dict[tuple[bool, ...], Any] = {}
        # Binaries the compile workers made, by (config key, pointer alignment).
        self.binaries: dict[tuple[str, tuple[bool, ...]], KernelBinary] = {}
        # Binaries the workers are still compiling (see precompile): resolved at first use.
        self._pending: dict[tuple[str, tuple[bool, ...]], concurrent.futures.Future[KernelBinary | None]] = {}
        # ptc's launcher (cuda_launch.py), or None: launch through Triton's.
        self._launch = launch
        # Read once: Triton itself decides interpretation when it is imported, and an
        # environment lookup on every launch is host time on the hot path.
        self._interpret = interpreting()
        self._tensors = len(kernel.params)
        self._all_aligned = (True,) * self._tensors
        # The number of points of the grid's dim: a function of the size arguments, or static.
        self._xnumel: Any = None
        self._static_xnumel = 0 if kernel.xnumel_source else int(kernel.xnumel)
        if kernel.xnumel_source:
            self._xnumel = eval(f"lambda {', '.join(kernel.sizes)}: {kernel.xnumel_source}", {"max": max, "min": min})

    @property
    def fn(self) -> Any:
        """The @triton.jit function; its module is imported only when something needs it."""
        if self._fn is None:
            self._fn = getattr(load_module(self.path), canonical(self.kernel).symbol)
        return self._fn

    def candidates(self) -> list[LaunchConfig]:
        """The launch configs the first call chooses among."""
        k = self.kernel
        return candidate_configs(k.style, k.xnumel_hint, k.rnumel_hint, k.rblock, self.options.autotune, k.strided, k.rows)

    def _set_config(self, cfg: LaunchConfig) -> None:
        self.config = cfg
        self._xblock = cfg.xblock
        self._tail = tuple(_constexprs(self.kernel, cfg).values())
        self._variants = {}

    def __call__(self, *args: Any) -> None:
        xnumel = self._static_xnumel if self._xnumel is None else self._xnumel(*args[self._tensors :])
        if xnumel <= 0:
            # The wrapper never calls a kernel over no points; a direct caller, or symbolic sizes
            # that are 0 in this call, must not launch its one program either (it would write
            # out of bounds; CUDA refuses an empty grid).
            return
        if self.config is None:
            self._choose(args)
        assert self.config is not None
        grid = -(-xnumel // self._xblock)
        tensors = args[: self._tensors]
        if self._interpret or not tensors or not tensors[0].is_cuda:
            self.fn[(grid,)](*args, **_constexprs(self.kernel, self.config))
            return
        ptrs = [a.data_ptr() for a in tensors]
        # One gcd answers the common case (every pointer 16-byte aligned) in a single C call,
        # about a microsecond less per launch than testing each pointer in Python.
        aligned = self._all_aligned if not math.gcd(*ptrs) & 15 else tuple(p % 16 == 0 for p in ptrs)
        variant = self._variants.get(aligned)
        if variant is None:
            variant = self._load_variant(tensors, aligned)
        stream = raw_stream(tensors[0].get_device())
        # Size arguments follow the pointers: 64-bit values, passed as the pointers are.
        values = (*ptrs, *args[self._tensors :])
        if type(variant) is LoadedKernel:
            self._launch(variant.function, grid, variant.threads, variant.shared, stream, *values)
        else:
            variant.run(grid, 1, 1, stream, variant.function, variant.packed_metadata, None, None, None, *values, *self._tail)

    def _compile_variant(self, args: Sequence[torch.Tensor], aligned: tuple[bool, ...]) -> Any:
        """Triton's CompiledKernel for the current config (a disk-cache hit after precompile)."""
        use = self.config
        assert use is not None
        return _compile(self.path, canonical(self.kernel).symbol, signature(self.kernel), _constexprs(self.kernel, use), aligned,
                        use.num_warps, use.num_stages, _target(args[0].device), self.fn)

    def resolve(self) -> dict[tuple[str, tuple[bool, ...]], KernelBinary]:
        """Every candidate's binary, by (config key, pointer alignment), once the workers compiled them."""
        if self._pending:
            with _RESOLVE_LOCK:
                for variant, future in list(self._pending.items()):
                    binary = future.result()
                    if binary is not None:
                        self.binaries[variant] = binary
                    del self._pending[variant]
        return self.binaries

    def _load_variant(self, args: Sequence[torch.Tensor], aligned: tuple[bool, ...]) -> Any:
        """Load the current config's binary for this pointer alignment onto the device."""
        assert self.config is not None
        self.resolve()
        binary = self.binaries.get((self.config.key(), aligned))
        compiled = None
        if binary is None:  # not precompiled (an unaligned pointer): compile here
            compiled = self._compile_variant(args, aligned)
            binary = _binary_of(compiled)
        variant: Any
        if self._launch is not None and binary is not None and binary.plain and len(args) + len(self.kernel.sizes) <= MAX_POINTERS:
            variant = load_binary(binary, args[0].device)
        else:
            variant = compiled if compiled is not None else self._compile_variant(args, aligned)
        self._variants[aligned] = variant
        return variant

    def _choose(self, args: Sequence[Any]) -> None:
        configs = self.candidates()
        if len(configs) == 1 or interpreting() or not args or not args[0].is_cuda:
            self._set_config(configs[0])
            return
        device = args[0].device
        # Keyed by the canonical source and signature: every copy of a repeated kernel reuses the winner.
        sig = ",".join(signature(self.kernel).values())
        key = f"{canonical(self.kernel).symbol}|{sig}|{torch.cuda.get_device_name(device)}|{self.options.autotune}"
        if self._xnumel is not None:
            # One config serves every size; the winner is kept per size bucket of the first call.
            key += f"|x{next_pow2(self._xnumel(*args[self._tensors :]))}"
        cached = _read_autotune(self.options.cache_dir).get(key)
        if cached is not None:
            self._set_config(LaunchConfig(**cached))
            return
        layouts = _shared_layouts(args, self._tensors)
        if layouts is not None:
            # An output written over its input (memory.in_place_safe) reaches the kernel as one
            # tensor twice: timed launches would overwrite the input the real launch reads, and
            # a copy to time on would add that buffer to the call's peak (196 MiB for ResNet-50's
            # first activation in float32). Run the first candidate now; tune_deferred times the
            # candidates once the wrapper has returned, on scratch tensors of the same layouts.
            self._set_config(configs[0])
            _DEFERRED.append((self, key, layouts))
            return
        if not self._tune(args, key, configs):
            raise CodegenError(f"no launch config of Triton kernel {self.kernel.name} ran")

    def _tune(self, trial: Sequence[Any], key: str, configs: list[LaunchConfig]) -> bool:
        """Time each config over ``trial`` and keep (and cache) the fastest; False if none ran."""
        device = trial[0].device
        timings: list[tuple[float, LaunchConfig]] = []
        for cfg in configs:
            self._set_config(cfg)
            try:
                ms = time_launches(lambda: self(*trial), device)
            except Exception as exc:  # a config can exceed shared memory or registers: skip it
                log.debug("config %s of %s failed: %s", cfg.key(), self.kernel.name, exc)
                continue
            timings.append((float(ms), cfg))
        if not timings:
            return False
        best = min(timings, key=lambda t: t[0])[1]
        log.debug("autotuned %s: %s", self.kernel.name, ", ".join(f"{c.key()}={ms:.4f}ms" for ms, c in timings))
        self._set_config(best)
        _write_autotune(self.options.cache_dir, key, best)
        return True


_Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype, torch.device]

_DEFERRED: list[tuple[TritonLauncher, str, list[Any]]] = []
"""Kernels whose first launch ran untuned (see TritonLauncher._choose), each with its autotune
key and its arguments as tune_deferred rebuilds them."""


def _shared_layouts(args: Sequence[Any], tensors: int) -> list[Any] | None:
    """None unless one tensor is passed twice among the first ``tensors`` args; then ``args``
    with each tensor replaced by its layout, one tuple object per distinct tensor."""
    seen: dict[int, _Layout] = {}
    shared = False
    out: list[Any] = []
    for i, a in enumerate(args):
        if i >= tensors:
            out.append(a)
            continue
        layout = seen.get(id(a))
        if layout is None:
            layout = seen[id(a)] = (tuple(a.shape), tuple(a.stride()), a.dtype, a.device)
        else:
            shared = True
        out.append(layout)
    return out if shared else None


def scratch_args(layouts: Sequence[Any], tensors: int) -> list[Any]:
    """Zeroed tensors for the layouts _shared_layouts recorded (one per distinct tensor, passed
    wherever it was), followed by the size arguments as they were."""
    made: dict[int, torch.Tensor] = {}
    out: list[Any] = []
    for i, item in enumerate(layouts):
        if i < tensors:
            t = made.get(id(item))
            if t is None:
                size, stride, dtype, device = item
                # Zeros, not whatever the memory held: a kernel that gathers through a loaded
                # index (an embedding row) reads in bounds at index 0, never at garbage.
                span = storage_span(size, stride)
                t = made[id(item)] = torch.zeros(span, dtype=dtype, device=device).as_strided(size, stride)
            item = t
        out.append(item)
    return out


def tune_deferred() -> None:
    """Autotune the kernels whose first launch deferred it, each over scratch tensors; called as
    a wrapper returns, when its buffers are gone. A kernel none of whose configs runs on the
    scratch keeps the config its real launches already ran with."""
    while True:
        try:
            launcher, key, layouts = _DEFERRED.pop()
        except IndexError:  # empty, or another thread's wrapper took the last one
            return
        kept = launcher.config
        assert kept is not None
        if not launcher._tune(scratch_args(layouts, launcher._tensors), key, launcher.candidates()):
            log.debug("no config of %s ran on scratch arguments; it keeps %s", launcher.kernel.name, kept)
            launcher._set_config(kept)


def tune_after_calls(namespace: dict[str, Any]) -> None:
    """Make a wrapper namespace's ``call_boxed`` (which ``call`` goes through) run tune_deferred
    after each call that left kernels to tune."""
    inner = namespace["call_boxed"]

    def call_boxed(args: list[Any]) -> Any:
        result = inner(args)
        if _DEFERRED:
            tune_deferred()
        return result

    namespace["call_boxed"] = call_boxed


AUTOTUNE_BUDGET_MS = 1.0
"""Device time each candidate config is timed for: a first compile times hundreds of them."""


def time_launches(run: Any, device: torch.device, budget_ms: float = AUTOTUNE_BUDGET_MS) -> float:
    """Mean milliseconds of one ``run()`` on ``device``: one launch to load and warm up, one
    timed alone, then as many as fill ``budget_ms`` (3 to 100), timed together by CUDA events."""
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-4)
    count = int(min(100, max(3, budget_ms / once)))
    start.record()
    for _ in range(count):
        run()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / count


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


def load_launchers(
    kernels: Sequence[TritonKernel], options: TritonOptions, device: torch.device | None = None, config: Config | None = None
) -> dict[str, TritonLauncher]:
    """A launcher per kernel; on a GPU, every candidate config is first compiled in parallel workers."""
    gpu = device is not None and device.type == "cuda" and not interpreting()
    launch = None
    if gpu:
        from .cuda_launch import launcher_module

        module = launcher_module(config if config is not None else Config(cache_dir=options.cache_dir))
        launch = module.launch if module is not None else None
    launchers: dict[str, TritonLauncher] = {}
    for k in kernels:
        path = write_module(k, options.cache_dir)
        # On a GPU the workers import the module; here it is imported only if a launch needs it.
        fn = None if gpu else getattr(load_module(path), canonical(k).symbol)
        launchers[k.name] = TritonLauncher(k, options, fn, path, launch)
    if gpu:
        assert device is not None
        precompile(list(launchers.values()), device, options)
    return launchers


def precompile(launchers: Sequence[TritonLauncher], device: torch.device, options: TritonOptions) -> float:
    """Compile every (kernel, candidate config), in parallel workers where there are several
    (Triton's disk cache makes a second process's compile a lookup). With workers, the jobs are
    only submitted: each launcher takes its binaries at first use (``TritonLauncher.resolve``).
    Returns the seconds spent here."""
    start = time.perf_counter()
    target = _target(device)
    # Identical canonical kernels (one per repeated block) make identical jobs: each compiles once.
    jobs: dict[str, tuple[Any, ...]] = {}
    users: dict[str, list[tuple[TritonLauncher, tuple[str, tuple[bool, ...]]]]] = {}
    for la in launchers:
        k = la.kernel
        sig = signature(k)
        aligned = tuple(True for _ in k.params)
        for cfg in la.candidates():
            job = (la.path, canonical(k).symbol, sig, _constexprs(k, cfg), aligned, cfg.num_warps, cfg.num_stages, target)
            key = repr(job)
            jobs.setdefault(key, job)
            users.setdefault(key, []).append((la, (cfg.key(), aligned)))
    if options.compile_workers > 1 and len(jobs) > 1:
        # The workers compile while the caller goes on (the next graph's lowering, the first
        # run of an earlier graph); a launcher waits for its own binaries at its first launch.
        pool = compile_pool(options.compile_workers)
        for key, job in jobs.items():
            future = pool.submit(_compile_in_worker, *job)
            for la, variant in users[key]:
                la._pending[variant] = future
        log.debug("submitted %d Triton kernel variants (%d distinct)", sum(map(len, users.values())), len(jobs))
        return time.perf_counter() - start
    for key, found in users.items():
        binary = _compile_in_worker(*jobs[key])
        if binary is not None:
            for la, variant in found:
                la.binaries[variant] = binary
    elapsed = time.perf_counter() - start
    log.debug("compiled %d Triton kernel variants (%d distinct) in %.2fs", sum(map(len, users.values())), len(jobs), elapsed)
    return elapsed


def default_launch_config(kernel: TritonKernel) -> LaunchConfig:
    """The heuristic config of ``kernel`` (what a launch without autotuning uses)."""
    return default_config(kernel.style, kernel.xnumel_hint, kernel.rnumel_hint, kernel.rblock, kernel.strided, kernel.rows)
