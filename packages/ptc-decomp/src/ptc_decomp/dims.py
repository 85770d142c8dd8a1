# torch.ops overloads are untyped, so every aten call returns Any.
"""Dimension bookkeeping shared by decompositions: wrapping dims, reduction dims, view strides."""

from __future__ import annotations

from collections.abc import Sequence

import torch

aten = torch.ops.aten


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` made non-negative for a tensor of ``ndim`` dims (0-dim tensors accept 0 and -1)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def reduction_dims(dim: int | Sequence[int] | None, ndim: int) -> list[int]:
    """The sorted, wrapped dims a reduction covers; None or [] mean every dim."""
    if dim is None:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(ndim))
    return sorted({wrap_dim(d, ndim) for d in dims}) if ndim else []


def known(cond: bool | torch.SymBool) -> bool:
    """True when ``cond`` holds for every size the graph's guards admit, recording no guard.

    On symbolic sizes, ``if cond:`` would decide the condition at the example sizes and guard
    it; decompositions use this instead to take a fast path only when it is valid everywhere,
    keeping the general path (which is right at every size) otherwise.
    """
    if isinstance(cond, torch.SymBool):
        return bool(cond.node.statically_known_true())
    return bool(cond)


def same(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """True when sizes ``a`` and ``b`` are equal at every admitted size (no guard)."""
    return known(a == b)


def check(cond: bool | torch.SymBool, message: str) -> None:
    """Raise RuntimeError(message) when ``cond`` fails; on symbolic sizes, assume it (``torch._check``).

    A decomposition replays an op the source graph already ran at these sizes, so its meta
    kernel checked (and guarded) the same validity condition; assuming it records at most
    that guard again.
    """
    torch._check(cond, lambda: message)


def hint(size: int | torch.SymInt) -> int:
    """The example value of a size (itself when it is an int)."""
    if isinstance(size, torch.SymInt):
        value = size.node.hint
        if value is None:
            raise RuntimeError(f"size {size} is data-dependent and has no example value")
        return int(value)
    return size


def at_least_one(size: int | torch.SymInt) -> int | torch.SymInt:
    """``max(size, 1)`` as an expression (Python's max would decide, and guard, the comparison)."""
    return max(size, 1) if isinstance(size, int) else torch.sym_max(size, 1)


def dense_order(shape: Sequence[int | torch.SymInt], stride: Sequence[int | torch.SymInt]) -> list[int] | None:
    """Dims from outermost to innermost when (shape, stride) is dense at every admitted size, else None.

    Dims are ordered by their strides at the example sizes; the strides must then be the
    running products of the sizes exactly, so the order holds at every admitted size.
    """
    order = sorted(range(len(shape)), key=lambda d: (-hint(stride[d]), -hint(shape[d])))
    running: int | torch.SymInt = 1
    for d in reversed(order):
        if not same(shape[d], 1) and not same(stride[d], running):
            return None
        running = running * shape[d]
    return order


def numel_of(shape: Sequence[int | torch.SymInt]) -> int | torch.SymInt:
    """The product of ``shape`` (symbolic when a size is)."""
    n: int | torch.SymInt = 1
    for s in shape:
        n = n * s
    return n


def infer_size(shape: Sequence[int | torch.SymInt], numel: int | torch.SymInt) -> list[int | torch.SymInt]:
    """``shape`` with its one ``-1`` replaced so the sizes multiply to ``numel``."""
    sizes = list(shape)
    # Only a literal -1 asks for inference; a symbolic size is a real size.
    inferred = [i for i, s in enumerate(sizes) if isinstance(s, int) and s == -1]
    if len(inferred) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if inferred:
        known_numel = numel_of([s for i, s in enumerate(sizes) if i != inferred[0]])
        check(known_numel != 0, f"shape '{list(shape)}' is invalid for input of size {numel}")
        check(numel % known_numel == 0, f"shape '{list(shape)}' is invalid for input of size {numel}")  # type: ignore[operator]
        sizes[inferred[0]] = numel // known_numel
    else:
        check(numel_of(sizes) == numel, f"shape '{list(shape)}' is invalid for input of size {numel}")
    return sizes


class _Undecided(Exception):
    """A view-stride decision that depends on which admitted size a symbolic tensor has."""


def _decide(cond: bool | torch.SymBool) -> bool:
    # Statically decided or undecided: never guarded, so a reshape of symbolic sizes views
    # only where the view is valid at every admitted size, and copies otherwise.
    if not isinstance(cond, torch.SymBool):
        return bool(cond)
    if known(cond):
        return True
    if known(torch.sym_not(cond)):
        return False
    raise _Undecided


def view_strides(
    shape: Sequence[int | torch.SymInt], stride: Sequence[int | torch.SymInt], new_shape: Sequence[int | torch.SymInt]
) -> list[int | torch.SymInt] | None:
    """Strides that let a tensor of (shape, stride) be viewed as ``new_shape``, or None when it must be copied.

    On symbolic sizes, None also when the answer differs between admitted sizes.
    """
    try:
        return _view_strides(shape, stride, new_shape)
    except _Undecided:
        return None


def _view_strides(
    shape: Sequence[int | torch.SymInt], stride: Sequence[int | torch.SymInt], new_shape: Sequence[int | torch.SymInt]
) -> list[int | torch.SymInt] | None:
    if _decide(numel_of(shape) == 0):
        return _contiguous(new_shape)
    old_shape, old_stride = (list(shape), list(stride)) if shape else ([1], [1])
    out: list[int | torch.SymInt] = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    # Old dims group into chunks that are contiguous among themselves; walking from the last
    # dim, each chunk must be covered exactly by a run of new dims, which take strides
    # inside that chunk.
    base = old_stride[-1]
    chunk_numel: int | torch.SymInt = 1
    view_numel: int | torch.SymInt = 1
    for d in range(len(old_shape) - 1, -1, -1):
        chunk_numel = chunk_numel * old_shape[d]
        chunk_ends = d == 0 or (_decide(old_shape[d - 1] != 1) and _decide(old_stride[d - 1] != chunk_numel * base))
        if not chunk_ends:
            continue
        while view_d >= 0 and (_decide(view_numel < chunk_numel) or _decide(new_shape[view_d] == 1)):
            out[view_d] = view_numel * base
            view_numel = view_numel * new_shape[view_d]
            view_d -= 1
        if _decide(view_numel != chunk_numel):
            return None
        if d > 0:
            base = old_stride[d - 1]
            chunk_numel = 1
            view_numel = 1
    return out if view_d == -1 else None


def _contiguous(shape: Sequence[int | torch.SymInt]) -> list[int | torch.SymInt]:
    strides: list[int | torch.SymInt] = [1] * len(shape)
    running: int | torch.SymInt = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = running
        running *= shape[i] if not isinstance(shape[i], int) else max(shape[i], 1)
    return strides


def reshape(x: torch.Tensor, shape: Sequence[int | torch.SymInt]) -> torch.Tensor:
    """``x`` reshaped: a view when the strides allow one (as eager's reshape), else a contiguous copy viewed."""
    sizes = infer_size(shape, x.numel())
    if len(sizes) == x.dim() and all(same(a, b) for a, b in zip(x.shape, sizes)):
        return aten.alias.default(x)
    if view_strides(list(x.shape), list(x.stride()), sizes) is None:
        x = aten.clone.default(x, memory_format=torch.contiguous_format)
    return aten.view.default(x, sizes)


def keepdim_shape(shape: Sequence[int | torch.SymInt], dims: Sequence[int]) -> list[int | torch.SymInt]:
    """``shape`` with each of ``dims`` set to 1."""
    return [1 if i in dims else s for i, s in enumerate(shape)]
