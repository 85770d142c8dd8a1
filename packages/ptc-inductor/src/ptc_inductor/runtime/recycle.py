"""Recycled storage for a graph's large CPU outputs, so their pages stay mapped between calls.

glibc hands the top of its heap back to the OS once enough memory there is free, and the
threshold moves with the process's history. A graph whose large outputs the caller drops after
each call can therefore pay one page fault per 4 KiB of output on every call, in some processes
and not others. A recycler keeps the storage of dropped outputs and hands it out again.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import torch

RECYCLE_MIN_BYTES = 1 << 20
"""Outputs at least this large are recycled; below it page faults cost less than the wrapping."""

POOL_SIZE = 2
"""Buffers kept per output: one for code that drops each result, two for ``x = f(x)`` loops."""

_ALIGN = 64


def _references(bufs: list[bytearray], i: int) -> int:
    return sys.getrefcount(bufs[i])


# References of a buffer held by its list alone, counted by the very expression take() uses, so
# the count does not depend on how this interpreter counts temporaries. A buffer in use has one
# more (its storage's) and never matches.
_IDLE = _references([bytearray(1)], 0)


class OutputRecycler:
    """Hands out tensors of one layout whose storage comes from buffers no live tensor uses.

    Each buffer is a ``bytearray``; every storage built on it holds one reference to it, and
    every tensor, view or NumPy array sharing that storage keeps the storage alive. So a buffer
    whose only reference is the pool's own is free, exactly, however the caller shared it.
    When every buffer is in use and the pool is full, a plain ``torch.empty_strided`` is returned.
    Outputs built this way cannot be resized past their size (their storage is not resizable).
    """

    __slots__ = ("_size", "_stride", "_dtype", "_nbytes", "_bufs", "_pads", "_lock")

    def __init__(self, size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, nbytes: int) -> None:
        self._size = tuple(size)
        self._stride = tuple(stride)
        self._dtype = dtype
        self._nbytes = nbytes
        self._bufs: list[bytearray] = []
        self._pads: list[int] = []
        self._lock = threading.Lock()

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...], torch.dtype, int]:
        """Size, stride, dtype and byte size of the tensors :meth:`take` hands out."""
        return self._size, self._stride, self._dtype, self._nbytes

    def take(self) -> torch.Tensor:
        """Return an uninitialised tensor of the recycler's layout on storage nobody else holds."""
        bufs = self._bufs
        with self._lock:
            for i in range(len(bufs)):
                if _references(bufs, i) == _IDLE:
                    return self._wrap(bufs[i], self._pads[i], self._size, self._stride, self._nbytes)
            if len(bufs) < POOL_SIZE:
                buf = bytearray(self._nbytes + _ALIGN)
                pad = -torch.frombuffer(buf, dtype=torch.uint8).data_ptr() % _ALIGN
                bufs.append(buf)
                self._pads.append(pad)
                return self._wrap(buf, pad, self._size, self._stride, self._nbytes)
        return torch.empty_strided(self._size, self._stride, dtype=self._dtype)

    def take_sized(self, size: Sequence[int], stride: Sequence[int], nbytes: int) -> torch.Tensor:
        """The same for an output whose size changes between calls (symbolic sizes): any idle
        buffer of at least ``nbytes`` serves; a too small idle one is replaced by a larger one."""
        if nbytes < RECYCLE_MIN_BYTES:
            return torch.empty_strided(size, stride, dtype=self._dtype)
        bufs = self._bufs
        with self._lock:
            idle = -1
            for i in range(len(bufs)):
                if _references(bufs, i) == _IDLE:
                    if len(bufs[i]) - _ALIGN >= nbytes:
                        return self._wrap(bufs[i], self._pads[i], size, stride, nbytes)
                    idle = i
            if len(bufs) < POOL_SIZE or idle >= 0:
                buf = bytearray(nbytes + _ALIGN)
                pad = -torch.frombuffer(buf, dtype=torch.uint8).data_ptr() % _ALIGN
                if idle >= 0:
                    bufs[idle], self._pads[idle] = buf, pad
                else:
                    bufs.append(buf)
                    self._pads.append(pad)
                return self._wrap(buf, pad, size, stride, nbytes)
        return torch.empty_strided(size, stride, dtype=self._dtype)

    def _wrap(self, buf: bytearray, pad: int, size: Sequence[int], stride: Sequence[int], nbytes: int) -> torch.Tensor:
        storage = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=pad).untyped_storage()
        # set_ rather than a view, so the output is a base tensor, as eager's outputs are.
        return torch.empty(0, dtype=self._dtype).set_(storage, 0, tuple(size), tuple(stride))
