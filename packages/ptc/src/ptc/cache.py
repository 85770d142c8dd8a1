"""The graph-level cache: a process that compiles a graph some process compiled before loads its
kernels and wrapper instead of decomposing, lowering, scheduling and generating code again.

An entry is keyed by the aten graph handed to the compiler (its serialized structure and
constants), the compile options, the inductor configuration, the device, and the versions of
torch, triton, Python and every ptc package's source. Entries live under ``PTC_CACHE_DIR``
(default ``~/.cache/ptc``), which also holds ptc-inductor's kernel cache unless
``PTC_INDUCTOR_CACHE_DIR`` says otherwise. Each entry is written into a private directory and
renamed into place, so concurrent processes never see half an entry; a corrupt entry is
rebuilt with a warning; the total size is bounded (``PTC_CACHE_SIZE_MB``, default 2048): the
least recently used entries go first. ``PTC_GRAPH_CACHE=0`` turns the cache off.

The program cache (:class:`ProgramCache`, entries under ``aot/``) is the same one level up:
ptc-aot's forward/backward graphs and runtime plan, keyed by the captured graph and its inputs,
so that a warm start skips tracing, functionalization and partitioning too. Its entries are
written, bounded (together with the graph entries) and rebuilt in the same way.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.fx

from ptc_spec import graph_fingerprint

log = logging.getLogger("ptc.cache")

_GRAPHS = "graphs"
_PROGRAMS = "aot"
T = TypeVar("T")


@dataclass
class CacheStats:
    """What this process's lookups found (the cache's only in-memory state)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    corrupt: int = 0
    program_hits: int = 0
    """ptc-aot programs loaded from the program cache (the four above count graphs)."""
    program_misses: int = 0
    program_stores: int = 0
    program_corrupt: int = 0


STATS = CacheStats()
_PACKAGES = ("ptc", "ptc_spec", "ptc_aot", "ptc_decomp", "ptc_inductor")
"""The packages whose code decides what an entry holds (capture runs before either key)."""


def cache_dir() -> Path:
    """Where ptc keeps its caches: ``PTC_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptc`` or ``~/.cache/ptc``."""
    configured = os.environ.get("PTC_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ptc"


def inductor_cache_dir() -> str:
    """The kernel cache ptc-inductor uses under ptc: ``PTC_INDUCTOR_CACHE_DIR``, else inside :func:`cache_dir`."""
    return os.environ.get("PTC_INDUCTOR_CACHE_DIR") or str(cache_dir() / "inductor")


def enabled() -> bool:
    """False when ``PTC_GRAPH_CACHE=0`` turned the graph cache off."""
    return os.environ.get("PTC_GRAPH_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def clear() -> None:
    """Empty every ptc cache on disk: aot programs, compiled graphs and kernels (Triton's own cache is Triton's)."""
    flush()
    for path in (cache_dir() / _PROGRAMS, cache_dir() / _GRAPHS, Path(inductor_cache_dir())):
        shutil.rmtree(path, ignore_errors=True)
    if importlib.util.find_spec("ptc_inductor") is not None:
        import ptc_inductor.build

        ptc_inductor.build.clear_memory_cache()


@functools.cache
def _code_version() -> str:
    """A hash of the source of every package that shapes an entry, and of the versions around them."""
    digest = hashlib.sha256()
    digest.update(f"{sys.version}|{torch.__version__}|{_triton_version()}".encode())
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for file in sorted(root.rglob("*.py")):
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _triton_version() -> str:
    if importlib.util.find_spec("triton") is None:
        return "none"
    from importlib.metadata import version

    return version("triton")


def _devices(example_inputs: list[Any]) -> str:
    names = set()
    for x in example_inputs:
        device = getattr(x, "device", None)
        if isinstance(device, torch.device) and device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            names.add(f"{torch.cuda.get_device_name(index)}|{torch.cuda.get_device_capability(index)}")
    return ",".join(sorted(names))


def graph_key(gm: torch.fx.GraphModule, example_inputs: list[Any], settings: str) -> str | None:
    """The key of ``gm`` compiled under ``settings`` (options and configuration as text), or None
    where the graph cannot be serialized (such a graph is compiled every time)."""
    try:
        fingerprint = graph_fingerprint(gm)
    except Exception as exc:  # any graph ptc-spec cannot write is simply not cached
        log.debug("graph not cached: %s", exc)
        return None
    digest = hashlib.sha256()
    digest.update(_code_version().encode())
    digest.update(settings.encode())
    digest.update(_devices(example_inputs).encode())
    digest.update(fingerprint)
    return digest.hexdigest()


def _entry(section: str, key: str) -> Path:
    return cache_dir() / section / key[:2] / key


def _count(section: str, event: str) -> None:
    name = event if section == _GRAPHS else f"program_{event}"
    setattr(STATS, name, getattr(STATS, name) + 1)


class ProgramCache:
    """ptc-aot's program cache (the ``ptc_aot.ProgramCache`` protocol) on disk, under ``aot/``.

    An entry's key hashes ptc-aot's material (the captured graph, its inputs and the settings)
    with the code version (the source of every package that shapes a program).
    """

    def get(self, material: bytes, load: Callable[[str], T]) -> T | None:
        """``load(directory)`` of the entry for ``material``; None on a miss or a corrupt entry."""
        found: T | None = lookup(_program_key(material), load, section=_PROGRAMS)
        return found

    def put(self, material: bytes, write: Callable[[str], None]) -> None:
        """Store the entry ``write(directory)`` writes, atomically."""
        store(_program_key(material), write, section=_PROGRAMS)


def _program_key(material: bytes) -> str:
    digest = hashlib.sha256(_code_version().encode())
    digest.update(material)
    return digest.hexdigest()


def lookup(key: str, load: Any, *, section: str = _GRAPHS) -> Any:
    """The compiled graph (or aot program) of entry ``key`` read by ``load(path)``, or None on a
    miss; a corrupt entry is removed with a warning, so that the caller compiles and stores it again."""
    path = _entry(section, key)
    if not path.is_dir():
        _count(section, "misses")
        return None
    try:
        compiled = load(str(path))
    except Exception as exc:  # whatever is wrong with an entry, compiling again is the cure
        what = "graph" if section == _GRAPHS else "program"
        warnings.warn(f"ptc: the cached {what} {path} cannot be loaded ({type(exc).__name__}: {exc}); compiling it again", stacklevel=2)
        shutil.rmtree(path, ignore_errors=True)
        _count(section, "corrupt")
        _count(section, "misses")
        return None
    try:
        os.utime(path)  # recently used: the size bound evicts it last
    except OSError:  # a read-only cache, or the entry evicted meanwhile: it was read all the same
        pass
    _count(section, "hits")
    return compiled


def store(key: str, save: Any, *, section: str = _GRAPHS) -> None:
    """Write entry ``key`` with ``save(directory)``, atomically; a graph ``save`` refuses stays uncached."""
    final = _entry(section, key)
    if final.exists():
        return
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=final.parent))
    except OSError as exc:  # an unwritable cache directory: compiling still works, uncached
        log.debug("cache entry %s not written: %s", key[:16], exc)
        return
    try:
        save(str(tmp))
        os.replace(tmp, final)
        _count(section, "stores")
    except OSError:
        # Another process stored the same entry first (the rename found a non-empty directory).
        shutil.rmtree(tmp, ignore_errors=True)
        return
    except Exception as exc:  # an object the artifact format cannot hold: compile it every time
        log.debug("graph %s not cached: %s", key[:16], exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return
    _bound([cache_dir() / _GRAPHS, cache_dir() / _PROGRAMS], _limit_bytes())


_WRITER: concurrent.futures.ThreadPoolExecutor | None = None
_PENDING: list[concurrent.futures.Future[None]] = []


def store_later(key: str, save: Any) -> None:
    """:func:`store`, on a background thread: saving a graph waits for its kernels' compiles, which
    would otherwise keep the next graph's compile waiting. Entries are written before the process
    exits (the thread is joined at exit) or at :func:`flush`."""
    global _WRITER
    if _WRITER is None:
        _WRITER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ptc-cache")
    _PENDING.append(_WRITER.submit(store, key, save))


def flush() -> None:
    """Wait until every entry :func:`store_later` was given is written."""
    while _PENDING:
        _PENDING.pop().result()


def _limit_bytes() -> int:
    try:
        return int(float(os.environ.get("PTC_CACHE_SIZE_MB", "2048")) * 2**20)
    except ValueError:
        return 2048 * 2**20


def _bound(roots: list[Path], limit: int) -> None:
    """Remove the least recently used entries until the entries under ``roots`` fit in ``limit`` bytes."""
    entries = []
    for entry in (e for root in roots for e in root.glob("*/*")):
        if entry.name.startswith("."):
            continue
        try:
            size = sum(f.stat().st_size for f in entry.iterdir())
            entries.append((entry.stat().st_mtime, size, entry))
        except OSError:  # removed by another process meanwhile
            continue
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        log.debug("evicted cached entry %s (%d bytes)", entry.name[:16], size)
