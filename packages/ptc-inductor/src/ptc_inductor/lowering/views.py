"""Lowerings of view and layout ops as index remappings (no copies), plus cat and padding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from ..indexing import Expr, contiguous_strides, view_index
from ..ir import BufferArg, TensorValue
from ..sizes import Size, equal, hint, known_le, known_lt, normalize
from ..virtualized import ops
from .context import LoweringContext, Restride, Strided, Strides, buffer_loader
from .pointwise import broadcast_loader, compute_dtype, scalar
from .registry import register_lowering

aten = torch.ops.aten

IndexFn = Callable[[Sequence[Expr]], list[Expr]]


def remap(ctx: LoweringContext, x: TensorValue, size: Sequence[Size], index_fn: IndexFn, restride: Restride) -> TensorValue:
    """A view of ``x`` with ``size``: ``index_fn`` maps its index to x's, ``restride`` maps x's
    (strides, offset) to its own, or gives None when no strides express it.

    A view of a buffer is a strided view of it; a view of a lazy value stays lazy, and keeps
    ``restride`` so that realizing it can view the realized ``x`` instead of copying.
    """
    dims = tuple(normalize(s) for s in size)
    if x.view is not None:
        found = restride(x.view.stride, x.view.offset)
        if found is not None:
            arg = BufferArg(x.view.buffer, dims, tuple(normalize(s) for s in found[0]), normalize(found[1]))
            return TensorValue(x.dtype, x.device, dims, buffer_loader(arg, x.dtype), arg)
    loader = x.loader

    def load(idx: Sequence[Expr]) -> Any:
        return loader(index_fn(idx))

    return ctx.lazy(TensorValue(x.dtype, x.device, dims, load), (x,), 0, view_of=(x, restride))


def _norm_dim(d: int, ndim: int) -> int:
    return d + max(ndim, 1) if d < 0 else d


@register_lowering(aten.permute.default)
def _permute(ctx: LoweringContext, x: TensorValue, dims: Sequence[int]) -> TensorValue:
    order = [_norm_dim(d, x.ndim) for d in dims]
    size = [x.size[d] for d in order]

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        old: list[Expr] = [sympy.Integer(0)] * x.ndim
        for i, d in enumerate(order):
            old[d] = idx[i]
        return old

    def restride(st: Strides, off: Size) -> Strided:
        return [st[d] for d in order], off

    return remap(ctx, x, size, index_fn, restride)


@register_lowering(aten.expand.default)
def _expand(ctx: LoweringContext, x: TensorValue, size: Sequence[Size], *, implicit: bool = False) -> TensorValue:
    shift = len(size) - x.ndim
    new_size = [x.size[i - shift] if (s == -1 and i >= shift) else normalize(s) for i, s in enumerate(size)]

    def restride(st: Strides, off: Size) -> Strided:
        new_stride: list[Size] = [0] * len(new_size)
        for i in range(shift, len(new_size)):
            new_stride[i] = 0 if (x.size[i - shift] == 1 and new_size[i] != 1) else st[i - shift]
        return new_stride, off

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        return [sympy.Integer(0) if x.size[d] == 1 else idx[d + shift] for d in range(x.ndim)]

    return remap(ctx, x, new_size, index_fn, restride)


def _drop_dims(ctx: LoweringContext, x: TensorValue, drop: set[int]) -> TensorValue:
    keep = [d for d in range(x.ndim) if d not in drop]
    size = [x.size[d] for d in keep]

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        old: list[Expr] = [sympy.Integer(0)] * x.ndim
        for i, d in enumerate(keep):
            old[d] = idx[i]
        return old

    def restride(st: Strides, off: Size) -> Strided:
        return [st[d] for d in keep], off

    return remap(ctx, x, size, index_fn, restride)


@register_lowering(aten.squeeze.dims)
def _squeeze(ctx: LoweringContext, x: TensorValue, dims: Sequence[int]) -> TensorValue:
    drop = {_norm_dim(d, x.ndim) for d in dims}
    return _drop_dims(ctx, x, {d for d in drop if x.ndim and x.size[d] == 1})


@register_lowering(aten.unsqueeze.default)
def _unsqueeze(ctx: LoweringContext, x: TensorValue, dim: int) -> TensorValue:
    d = dim + x.ndim + 1 if dim < 0 else dim
    size = list(x.size)
    size.insert(d, 1)
    def restride(st: Strides, off: Size) -> Strided:
        # Eager gives the new dim the extent of the dim it lands in front of (1 at the end).
        new_st = list(st)
        new_st.insert(d, x.size[d] * st[d] if d < x.ndim else 1)
        return new_st, off

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        return [i for j, i in enumerate(idx) if j != d]

    return remap(ctx, x, size, index_fn, restride)


def position(value: Size, n: Size) -> Size:
    """Eager's position of a start/end/index ``value`` in a dim of ``n``: negative counts from the
    end. A symbolic value's sign must be provable (the trace guarded it when it decided)."""
    if isinstance(value, int):
        return value + n if value < 0 else value
    if known_le(0, value):
        return value
    if known_lt(value, 0):
        return normalize(value + n)
    raise NotImplementedError(f"position {value} may be negative or not; its sign decides the slice")


def _clamp(value: Size, n: Size) -> Size:
    """``min(max(value, 0), n)``, decided statically where the sizes allow it."""
    if isinstance(value, int) and isinstance(n, int):
        return min(max(value, 0), n)
    low: Size = value if known_le(0, value) else sympy.Max(value, 0)
    if known_le(low, n):
        return normalize(low)
    return n if known_le(n, low) else normalize(sympy.Min(low, n))


def clamp_position(value: Size, n: Size) -> Size:
    """A slice bound ``value`` as eager reads it in a dim of ``n``: from the end when negative, clamped to ``[0, n]``."""
    return _clamp(position(value, n), n)


@register_lowering(aten.slice.Tensor)
def _slice(ctx: LoweringContext, x: TensorValue, dim: int = 0, start: Size | None = None, end: Size | None = None, step: int = 1) -> TensorValue:
    d = _norm_dim(dim, x.ndim)
    n = x.size[d]
    lo = 0 if start is None else clamp_position(start, n)
    size = list(x.size)
    if hasattr(ctx.meta, "shape") and len(ctx.meta.shape) == x.ndim:
        size[d] = normalize(ctx.meta.shape[d])
    else:
        hi = n if end is None else clamp_position(end, n)
        size[d] = normalize(sympy.Max(0, sympy.floor((sympy.sympify(hi) - lo + step - 1) / step)))

    def restride(st: Strides, off: Size) -> Strided:
        new_st = list(st)
        new_st[d] = st[d] * step
        return new_st, off + lo * st[d]

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        old = list(idx)
        old[d] = idx[d] * step + lo
        return old

    return remap(ctx, x, size, index_fn, restride)


@register_lowering(aten.select.int)
def _select(ctx: LoweringContext, x: TensorValue, dim: int, index: Size) -> TensorValue:
    d = _norm_dim(dim, x.ndim)
    i = position(index, x.size[d])
    size = [s for j, s in enumerate(x.size) if j != d]

    def restride(st: Strides, off: Size) -> Strided:
        return [s for j, s in enumerate(st) if j != d], off + i * st[d]

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        old = list(idx)
        old.insert(d, sympy.sympify(i))
        return old

    return remap(ctx, x, size, index_fn, restride)


@register_lowering(aten.alias.default)
def _alias(ctx: LoweringContext, x: TensorValue) -> TensorValue:
    return x


def _stride_chunks(old_size: Sequence[Size], old_stride: Sequence[Size]) -> list[tuple[Size, Size]]:
    """(numel, innermost stride) of each run of old dims that reads as one contiguous range, innermost first.

    Size-1 dims never split a run. The innermost run starts at the last dim even when that dim
    has size 1, so its stride is the last dim's: eager gives that stride to the new size-1 dims
    placed there, and we match it.
    """
    chunks: list[tuple[Size, Size]] = []
    numel: Size = 1
    base = old_stride[-1]
    for d in range(len(old_size) - 1, -1, -1):
        if old_size[d] == 1:
            continue
        if not equal(old_stride[d], numel * base):
            chunks.append((numel, base))
            numel, base = 1, old_stride[d]
        numel = normalize(numel * old_size[d])
    chunks.append((numel, base))
    return chunks


def view_strides(old_size: Sequence[Size], old_stride: Sequence[Size], new_size: Sequence[Size]) -> list[Size] | None:
    """Eager's strides for ``new_size`` aliasing the strided ``old`` layout, or None when a copy is needed.

    Each run of old dims that is contiguous in memory is split into consecutive new dims,
    innermost first; a new size-1 dim takes the stride its position in the run would have.
    With symbolic sizes a run must match its new dims' product exactly (the same expression),
    so the strides found hold at every size.
    """
    if any(s == 0 for s in old_size) or any(s == 0 for s in new_size):
        # No element is ever read: eager keeps the strides of an unchanged shape and otherwise
        # gives row-major ones (size-0 dims counted as 1).
        same = tuple(old_size) == tuple(new_size)
        return list(old_stride) if same else list(contiguous_strides(new_size))
    if not old_size:
        return [1] * len(new_size)
    result: list[Size] = [0] * len(new_size)
    d = len(new_size) - 1
    for numel, base in _stride_chunks(old_size, old_stride):
        taken: Size = 1
        # Every new dim whose elements lie inside this run, and the size-1 dims just outside it.
        while d >= 0 and ((not equal(taken, numel) and hint(taken) < hint(numel)) or new_size[d] == 1):
            result[d] = normalize(taken * base)
            taken = normalize(taken * new_size[d])
            d -= 1
        if not equal(taken, numel):
            return None
    return result if d < 0 else None


@register_lowering(aten.view.default)
def _view(ctx: LoweringContext, x: TensorValue, size: Sequence[Size]) -> TensorValue:
    new_size = [normalize(s) for s in ctx.meta.shape]
    old_size = x.size

    def restride(st: Strides, off: Size) -> Strided | None:
        found = view_strides(old_size, st, new_size)
        return None if found is None else (found, off)

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        return view_index(idx, new_size, old_size)

    return remap(ctx, x, new_size, index_fn, restride)


@register_lowering(aten.unfold.default)
def _unfold(ctx: LoweringContext, x: TensorValue, dimension: int, size: int, step: int) -> TensorValue:
    d = _norm_dim(dimension, x.ndim)
    out = [normalize(s) for s in ctx.meta.shape]

    def restride(st: Strides, off: Size) -> Strided:
        new_st = list(st) if x.ndim else []
        if x.ndim:
            new_st[d] = st[d] * step
        new_st.append(st[d] if x.ndim else 1)
        return new_st, off

    def index_fn(idx: Sequence[Expr]) -> list[Expr]:
        if not x.ndim:
            return []
        old = list(idx[:-1])
        old[d] = idx[d] * step + idx[-1]
        return old

    return remap(ctx, x, out, index_fn, restride)


@register_lowering(aten.as_strided.default)
def _as_strided(ctx: LoweringContext, x: TensorValue, size: Sequence[Size], stride: Sequence[Size], storage_offset: Size | None = None) -> TensorValue:
    base = ctx.realize(x) if x.view is None else x
    assert base.view is not None
    base_off = ctx.storage_offsets.get(base.view.buffer, 0)
    off = (storage_offset - base_off) if storage_offset is not None else base.view.offset
    arg = BufferArg(base.view.buffer, tuple(normalize(s) for s in size), tuple(normalize(s) for s in stride), normalize(off))
    return TensorValue(x.dtype, x.device, arg.size, buffer_loader(arg, x.dtype), arg)


@register_lowering(aten.cat.default)
def _cat(ctx: LoweringContext, tensors: Sequence[TensorValue], dim: int = 0) -> TensorValue:
    out_size = tuple(normalize(s) for s in ctx.meta.shape)
    d = _norm_dim(dim, len(out_size))
    dtype = ctx.meta.dtype
    cd = compute_dtype(dtype)
    parts: list[tuple[Size, Size, TensorValue]] = []
    start: Size = 0
    for t in tensors:
        if t.numel == 0 and (t.ndim == 1 or t.size[d] == 0):
            continue
        parts.append((start, normalize(start + t.size[d]), t))
        start = normalize(start + t.size[d])

    def part_loader(lo: Size, t: TensorValue) -> Callable[[Sequence[Expr]], Any]:
        inner = broadcast_loader(t, t.size)

        def load(idx: Sequence[Expr]) -> Any:
            shifted = list(idx)
            shifted[d] = idx[d] - lo
            v = inner(shifted)
            return ops.to_dtype(v, cd) if t.dtype != cd else v

        return load

    loaders = [(lo, hi, part_loader(lo, t)) for lo, hi, t in parts]
    last = len(loaders) - 1

    def load(idx: Sequence[Expr]) -> Any:
        # Later parts first, so each earlier part selects in front of what follows it. Every
        # part's load is masked to its own range: outside it the shifted index points before
        # or past that input, which a GPU faults on (the selects would discard the value, but
        # the load happens first).
        at = ops.index_expr(idx[d], torch.int64)
        result: Any = None
        for k in range(last, -1, -1):
            lo, hi, ld = loaders[k]
            below = ops.lt(at, scalar(hi, torch.int64)) if k < last else None
            above = ops.ge(at, scalar(lo, torch.int64)) if k > 0 else None
            inside = below if above is None else above if below is None else ops.logical_and(above, below)
            part = ld(idx) if inside is None else ops.masked(inside, (lambda ld=ld: ld(idx)), 0, cd)
            result = part if result is None else ops.where(below, part, result)
        return ops.to_dtype(result, dtype) if dtype != cd else result

    return ctx.lazy(TensorValue(dtype, torch.device(ctx.meta.device), out_size, load), [t for _, _, t in parts], 1)


@register_lowering(aten.constant_pad_nd.default)
def _pad(ctx: LoweringContext, x: TensorValue, pad: Sequence[Size], value: float = 0) -> TensorValue:
    out_size = tuple(normalize(s) for s in ctx.meta.shape)
    cd = compute_dtype(x.dtype)
    pads: dict[int, Size] = {}
    for i in range(len(pad) // 2):
        pads[x.ndim - 1 - i] = normalize(pad[2 * i])

    def load(idx: Sequence[Expr]) -> Any:
        src = [idx[d] - pads.get(d, 0) for d in range(x.ndim)]
        conds: list[Any] = []
        for d, left in pads.items():
            e = ops.index_expr(src[d], torch.int64)
            # A symbolic pad whose sign is unknown keeps its check: it is right either way.
            if not known_le(left, 0):
                conds.append(ops.ge(e, ops.constant(0, torch.int64)))
            if not known_le(out_size[d] - left, x.size[d]):
                conds.append(ops.lt(e, scalar(x.size[d], torch.int64)))
        if not conds:
            return x.loader(src)
        mask = conds[0]
        for c in conds[1:]:
            mask = ops.logical_and(mask, c)
        v = ops.masked(mask, lambda: _cast(x.loader(src), x.dtype, cd), value, cd)
        return ops.to_dtype(v, x.dtype) if x.dtype != cd else v

    return ctx.lazy(TensorValue(x.dtype, x.device, out_size, load), (x,), 1)


def _cast(v: Any, src: torch.dtype, dst: torch.dtype) -> Any:
    return ops.to_dtype(v, dst) if src != dst else v


@register_lowering(aten.sym_size.int)
def _sym_size(ctx: LoweringContext, x: TensorValue, dim: int) -> Size:
    return x.size[_norm_dim(dim, x.ndim)]


@register_lowering(aten.sym_stride.int)
def _sym_stride(ctx: LoweringContext, x: TensorValue, dim: int) -> Size:
    if x.view is None:
        return contiguous_strides(x.size)[_norm_dim(dim, x.ndim)]
    return x.view.stride[_norm_dim(dim, x.ndim)]


@register_lowering(aten.sym_numel.default)
def _sym_numel(ctx: LoweringContext, x: TensorValue) -> Size:
    return x.numel


@register_lowering(aten.sym_storage_offset.default)
def _sym_storage_offset(ctx: LoweringContext, x: TensorValue) -> Size:
    return normalize(ctx.meta) if isinstance(ctx.meta, (int, sympy.Expr)) else 0
