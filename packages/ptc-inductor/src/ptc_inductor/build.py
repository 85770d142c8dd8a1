"""Compiling generated C++ with the system compiler, with an on-disk cache keyed by source and flags.

Entries are written atomically (temp file + os.replace) next to a checksum; an entry whose
checksum does not match, or that fails to load, is rebuilt.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

from ptc_spec import TimedStep

from . import events
from .config import Config
from .errors import BuildError
from .runtime.cuda import import_extension
from .runtime.machine import cpu_id

log = logging.getLogger("ptc.inductor.cache")
T = TypeVar("T")


@dataclass
class BuildStats:
    """Counters of this process's builds (the cache's only mutable state besides the loaded set)."""

    compiles: int = 0
    disk_hits: int = 0
    memory_hits: int = 0
    rebuilt_corrupt: int = 0


STATS = BuildStats()
_LOADED: dict[str, ctypes.CDLL] = {}
_LOCK = threading.Lock()


@functools.cache
def _compiler_id(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"the C++ compiler '{cxx}' cannot run ({exc}): install g++ or set PTC_INDUCTOR_CXX") from exc
    return out.splitlines()[0] if out else cxx


def cache_key(source: str, config: Config, flags: Sequence[str] | None = None) -> str:
    """The cache key of ``source`` built with ``config``'s compiler and ``flags`` (default: config's)."""
    h = hashlib.sha256()
    used = config.cxx_flags if flags is None else flags
    for part in (source, config.cxx, " ".join(used), _compiler_id(config.cxx), cpu_id()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _compile(source: str, so_path: str, config: Config, flags: Sequence[str], header: str = "") -> None:
    directory = os.path.dirname(so_path)
    os.makedirs(directory, exist_ok=True)
    fd, cpp_tmp = tempfile.mkstemp(suffix=".cpp", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    so_tmp = cpp_tmp[:-4] + ".so"
    built_from, extra = cpp_tmp, []
    with_header = bool(header) and source.startswith(header)
    pch = _precompiled_header(header, config, flags, start=STATS.compiles >= _PCH_AFTER_BUILDS) if with_header else None
    if pch is not None:
        # The same translation unit with its header read from the precompiled one: the machine
        # code is identical, and gcc skips re-parsing ~30k lines of standard headers per graph.
        built_from = cpp_tmp[:-4] + ".pch.cpp"
        with open(built_from, "w", encoding="utf-8") as f:
            f.write(source[len(header) :])
        extra = ["-include", pch, "-Winvalid-pch"]
    cmd = [config.cxx, "-std=c++17", *flags, *extra, built_from, "-o", so_tmp]
    log.debug("compiling: %s", " ".join(cmd))
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        STATS.compiles += 1
        if result.returncode != 0 and pch is not None:
            # gcc falls back to the text header for a stale .gch, but stops on a damaged one.
            # The whole source decides: if it builds, the .gch was at fault and is made again.
            result = subprocess.run([config.cxx, "-std=c++17", *flags, cpp_tmp, "-o", so_tmp], capture_output=True, text=True)
            if result.returncode == 0:
                log.warning("the precompiled C++ prelude %s.gch is damaged; building it again", pch)
                _forget_precompiled_header(pch)
        elif pch is not None and "-Winvalid-pch" in result.stderr:
            # Built from the text header: right code, but every later build would be slow too.
            log.warning("the precompiled C++ prelude %s.gch was not usable; building it again", pch)
            _forget_precompiled_header(pch)
        if result.returncode != 0:
            raise BuildError(f"{config.cxx} failed on generated code ({cpp_tmp}):\n{result.stderr[-4000:]}")
        digest = _file_digest(so_tmp)
        os.replace(cpp_tmp, so_path[:-3] + ".cpp")
        os.replace(so_tmp, so_path)
        sum_tmp = so_path + f".{os.getpid()}.tmp"
        with open(sum_tmp, "w", encoding="utf-8") as f:
            f.write(digest)
        os.replace(sum_tmp, so_path + ".sha256")
    finally:
        for leftover in {cpp_tmp, so_tmp, built_from}:
            if os.path.exists(leftover) and leftover not in (so_path,):
                os.unlink(leftover)


# A process starts precompiling the prelude (about a second of one core, once per cache
# directory) only from its third build on: a program that builds one or two graphs does not pay
# for it on a first, cold run (2 cores, another job beside: gpt-mini-infer's cold first call took
# 1.6-1.7 s without the precompiling and 2.3-3.5 s with it started at the first build).
_PCH_AFTER_BUILDS = 2
_PCH: dict[str, str | None] = {}  # directory -> the usable header, or None: it does not precompile
_PCH_BUILDS: dict[str, tuple[subprocess.Popen[str], str]] = {}  # directory -> (gcc, its output) in flight
# A forked child cannot wait for its parent's gcc (it would read it as done and install a file
# still being written): it forgets those builds, and the parent finishes them.
if hasattr(os, "register_at_fork"):  # POSIX only; elsewhere there is no fork
    os.register_at_fork(after_in_child=_PCH_BUILDS.clear)


def _forget_precompiled_header(path: str) -> None:
    _PCH.pop(os.path.dirname(path), None)
    try:
        os.unlink(path + ".gch")
    except OSError:
        pass


def _pch_directory(header: str, config: Config, flags: Sequence[str]) -> str | None:
    if not config.cxx_pch or "clang" in _compiler_id(config.cxx).lower():
        return None
    return os.path.join(config.cache_dir, "pch", cache_key(header, config, _pch_flags(flags)))


def _pch_flags(flags: Sequence[str]) -> list[str]:
    return [f for f in flags if f != "-shared"]


def _precompiled_header(header: str, config: Config, flags: Sequence[str], start: bool = True) -> str | None:
    """The path of ``header`` beside its gcc precompiled form for ``flags``, once there, else None.

    Where there is none yet and ``start`` is set, gcc starts on the header in the background
    (about a second), and the answer is None until it is done: the builds meanwhile compile
    their whole source and wait for nothing. None also when the compiler is not gcc or the
    header does not precompile. A .gch that gcc finds stale or damaged costs one build's time
    and is made again (``_compile``), never a different result. Callers hold ``_LOCK``.
    """
    directory = _pch_directory(header, config, flags)
    if directory is None:
        return None
    known = _PCH.get(directory, "")
    if known is None or (known and os.path.exists(known)):
        return known  # None: it did not precompile; a path: still there (a cleared cache has none)
    path = os.path.join(directory, "prelude.h")
    running = _PCH_BUILDS.get(directory)
    if running is None:
        if os.path.exists(path + ".gch"):  # made by an earlier process
            _PCH[directory] = path
            return path
        if start:
            _start_precompiling(header, config, flags, directory)
        return None
    if running[0].poll() is None:
        return None
    _finish_precompiling(directory)
    return _PCH[directory]


def _start_precompiling(header: str, config: Config, flags: Sequence[str], directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "prelude.h")
    tag = f".{os.getpid()}.{threading.get_ident()}.tmp"
    with open(path + tag, "w", encoding="utf-8") as f:
        f.write(header)
    os.replace(path + tag, path)
    cmd = [config.cxx, "-std=c++17", *_pch_flags(flags), "-x", "c++-header", path, "-o", path + ".gch" + tag]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _PCH_BUILDS[directory] = (process, path + ".gch" + tag)


def _finish_precompiling(directory: str, timeout: float | None = None) -> None:
    process, output = _PCH_BUILDS.pop(directory)
    try:
        _, errors = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        errors, process.returncode = "timed out", 1
    path = os.path.join(directory, "prelude.h")
    if process.returncode == 0:
        os.replace(output, path + ".gch")
        _PCH[directory] = path
        return
    log.debug("precompiling the C++ prelude failed; building without it:\n%s", errors[-2000:])
    _PCH[directory] = None
    if os.path.exists(output):
        os.unlink(output)


@atexit.register
def wait_for_precompiled_headers(timeout: float = 30.0) -> None:
    """Finish the header precompilations in flight, so that they serve the next build or process."""
    with _LOCK:
        for directory in list(_PCH_BUILDS):
            _finish_precompiling(directory, timeout)


def _valid(so_path: str) -> bool:
    try:
        with open(so_path + ".sha256", encoding="utf-8") as f:
            want = f.read().strip()
        return _file_digest(so_path) == want
    except OSError:
        return False


def _entry_path(source: str, config: Config, flags: Sequence[str]) -> str:
    key = cache_key(source, config, flags)
    return os.path.join(config.cache_dir, key[:2], key + ".so")


def _load_cached(
    so_path: str, source: str, config: Config, flags: Sequence[str], load: Callable[[str], T], errors: tuple[type[Exception], ...],
    header: str = "",
) -> T:
    """Load the cache entry ``so_path`` of ``source`` with ``load``; build it on a miss, rebuild it when corrupt."""
    loaded: T | None = None
    if os.path.exists(so_path) and _valid(so_path):
        try:
            loaded = load(so_path)
            STATS.disk_hits += 1
        except errors:
            loaded = None
    if loaded is None:
        if os.path.exists(so_path):
            STATS.rebuilt_corrupt += 1
            log.warning("cache entry %s is corrupt; rebuilding it", so_path)
        _compile(source, so_path, config, flags, header)
        try:
            loaded = load(so_path)
        except errors as exc:
            raise BuildError(f"built {so_path} but could not load it: {exc}") from exc
    return loaded


def load_library(source: str, config: Config, header: str = "") -> tuple[ctypes.CDLL, str]:
    """Return the loaded shared library for ``source`` (compiling only on a cache miss) and its path.

    ``header``, when ``source`` starts with it, is precompiled once per compiler and flags and
    reused by every build (see ``_precompiled_header``); the cache key is still the whole source.
    """
    start = time.perf_counter()
    so_path = _entry_path(source, config, config.cxx_flags)
    with _LOCK:
        known = _LOADED.get(so_path)
        if known is not None:
            STATS.memory_hits += 1
            _report_build(so_path, start, "memory hit")
            return known, so_path
        compiles = STATS.compiles
        lib = _load_cached(so_path, source, config, config.cxx_flags, ctypes.CDLL, (OSError,), header)
        _LOADED[so_path] = lib
        _report_build(so_path, start, "built" if STATS.compiles > compiles else "disk hit")
        return lib, so_path


def _report_build(path: str, start: float, outcome: str) -> None:
    if events.STEPS.wanted():
        events.STEPS.emit(TimedStep(path, start, time.perf_counter() - start, "build", outcome))


def load_extension(source: str, name: str, config: Config) -> ModuleType:
    """Build (once, cached like kernels) and import a CPython extension module ``name`` from C++ ``source``."""
    flags = ("-O2", "-fPIC", "-shared", f"-I{sysconfig.get_paths()['include']}", "-ldl")

    def load(path: str) -> ModuleType:
        return import_extension(path, name)

    with _LOCK:
        module = _load_cached(_entry_path(source, config, flags), source, config, flags, load, (ImportError, OSError))
    return module


def clear_memory_cache() -> None:
    """Forget the libraries loaded in this process, so the next compile consults the disk again."""
    with _LOCK:
        _LOADED.clear()
        _PCH.clear()
