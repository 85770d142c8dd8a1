"""A generated Triton kernel as the launcher needs it, apart from the code generator that made it
(a kernel loaded from the graph cache needs this, not Triton code generation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sizes import Size


@dataclass(frozen=True, slots=True)
class TritonKernel:
    """Generated Triton source of one kernel, its parameters and what the launcher needs to size it.

    ``style`` is "flat" (1D tiles), "persistent" or "looped" (2D tiles); ``rnumel`` is the
    largest flattened inner range (0 for flat kernels); ``rblock`` the fixed RBLOCK of a
    persistent kernel (0 otherwise); ``strided`` is set when a reduction reads memory that is
    not contiguous along its reduced dim (a column sum), which wants tall tiles.

    With symbolic sizes, ``xnumel`` and ``rnumel`` are expressions over the size symbols named
    in ``sizes`` (the kernel's int64 arguments, after the pointers): the launcher computes the
    grid from them at each call; block sizes are chosen from ``xnumel_hint``/``rnumel_hint``.
    """

    name: str
    source: str
    params: tuple[str, ...]
    param_dtypes: tuple[torch.dtype, ...]
    style: str
    xnumel: Size
    rnumel: Size
    rblock: int
    index_dtype: str
    strided: bool = False
    origins: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()
    xnumel_source: str = ""
    """``xnumel`` as a Python expression over the ``sizes`` names (empty when static)."""
    xnumel_hint: int = 0
    rnumel_hint: int = 0
    rows: int = 1
    """Rows a row loop's tile holds (its [rows, RBLOCK] tile sizes its warps); 1 otherwise."""
