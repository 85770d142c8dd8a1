"""mm and addmm: library calls, with the output's rows padded where cuBLAS needs aligned rows.

cuBLAS runs its fast Hopper kernels only when every row of the result starts 16-byte aligned.
A result whose row length is not a multiple of 16 bytes (a language model's 50257-token
vocabulary) gets a far slower fallback kernel: GPT-2's LM head in bf16 took 1.67 ms on an H200
against 0.23 ms for the same product with aligned rows. Such a product is computed into rows
padded to 16 bytes (the second operand, and addmm's bias, padded with zero columns, a copy that
fuses into one kernel) and read back through a slice. The slice stays unrealized: a pointwise
or reduction consumer (the loss) reads the padded rows directly, and an output the graph
returns is a view of the padded rows (eager's dim order, longer rows), not a copy. A float32
product is padded only where it runs on the matrix units (TF32 allowed): on the CUDA cores
alignment does not pay for the copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ptc_spec import TensorMeta

from ..ir import BufferArg, TensorValue
from ..sizes import equal, normalize
from .context import LoweringContext, buffer_loader, padded_strides
from .extern import extern_lowering
from .registry import register_lowering
from .views import _pad, _slice

aten = torch.ops.aten

_ROW_ALIGN_BYTES = 16
# Below this many result elements a product is launch-bound and the copy would cost more.
_PAD_MIN_ELEMENTS = 1 << 20
_PADDED_DEVICE_TYPES = frozenset({"cuda"})
_PADDED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32})


def padded_columns(meta: Any) -> int | None:
    """The aligned row length to compute a 2-D product of ``meta`` in, or None to leave it as it is."""
    if not isinstance(meta, TensorMeta) or len(meta.shape) != 2 or meta.device.type not in _PADDED_DEVICE_TYPES:
        return None
    rows, cols = meta.shape
    if meta.dtype not in _PADDED_DTYPES or not isinstance(rows, int) or not isinstance(cols, int):
        return None
    if meta.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        # Full-precision float32 runs on the CUDA cores, where unaligned rows cost nothing:
        # GPT-2's LM head (8192x768 by 768x50257) took 12.35 ms plain, 12.34 ms padded and
        # 13.52 ms padded plus the copy out on an H200 (tools/bench_mm_padding.py).
        return None
    per_row = _row_elements(meta.dtype)
    if cols % per_row == 0 or rows * cols < _PAD_MIN_ELEMENTS:
        return None
    return -(-cols // per_row) * per_row


def _padded(ctx: LoweringContext, x: TensorValue, columns: int) -> TensorValue:
    """``x`` with zero columns appended in its last dim up to ``columns``."""
    meta, ctx.meta = ctx.meta, TensorMeta.of((*x.size[:-1], columns), x.dtype, x.device)
    try:
        padded: TensorValue = _pad(ctx, x, [0, columns - int(x.size[-1])], 0)
    finally:
        ctx.meta = meta
    return padded


def _padded_operand(ctx: LoweringContext, x: TensorValue, columns: int) -> TensorValue | BufferArg:
    """The second operand of a padded product, padded with zero columns up to ``columns``.

    A transposed matrix (a linear layer's (N, K) weight read as (K, N)) is padded in its own
    memory order, column-major with an aligned K: the copy then reads and writes along K. Padded
    row-major it was a transposing copy: GPT-2's LM head weight (77 MB in bf16) took 256 us a
    step on an H200, about six times a plain copy of it."""
    padded = _padded(ctx, x, columns)
    stride, rows = ctx.strides_of(x), x.size[0]
    if stride is not None and len(stride) == 2 and stride[0] == 1 and isinstance(rows, int) and equal(stride[1], rows):
        if rows > 1 and rows % _row_elements(x.dtype) == 0:
            return ctx.as_strided_arg(padded, (1, rows))
    return padded


def _row_elements(dtype: torch.dtype) -> int:
    return _ROW_ALIGN_BYTES // dtype.itemsize


def _blas_ready(arg: BufferArg, per_row: int) -> bool:
    """Whether cuBLAS reads this 2-D operand in place with aligned columns or rows."""
    if len(arg.stride) != 2 or not all(isinstance(x, int) for x in (*arg.stride, arg.offset)):
        return True  # symbolic layouts are left as they are
    if 1 in arg.size:
        return True  # a vector: no leading dimension to align
    rows, cols = arg.stride
    lead = rows if cols == 1 else cols if rows == 1 else None
    return lead is not None and lead % per_row == 0 and arg.offset % per_row == 0


def _blas_ready_view(x: TensorValue, found: Any, per_row: int) -> bool:
    """Whether ``x`` viewed with ``found`` (strides, offset) is read by cuBLAS in place."""
    return found is not None and _blas_ready(BufferArg("", x.size, tuple(found[0]), found[1]), per_row)


def _aligned_operand(ctx: LoweringContext, x: Any) -> Any:
    """A matrix operand whose leading dimension cuBLAS cannot use fast (the (M, 50257) gradient
    of an LM head) stored into aligned rows; every other operand as it is."""
    if not isinstance(x, TensorValue) or x.ndim != 2 or x.device.type not in _PADDED_DEVICE_TYPES or x.dtype not in _PADDED_DTYPES:
        return x
    if not all(isinstance(s, int) for s in x.size) or int(x.size[0]) * int(x.size[1]) < _PAD_MIN_ELEMENTS:
        return x
    per_row = _row_elements(x.dtype)
    if x.view is not None and _blas_ready(x.view, per_row):
        return x
    stored = ctx.shared.get(_zero_padded_key(x, per_row))
    if stored is not None:
        return stored[2]  # already copied into aligned rows for another product
    based = ctx.view_base(x)
    if based is not None:
        # A view (an LM head's output gradient, transposed for the weight's gradient) is read
        # from its base stored in aligned rows: one copy serves it and every other product
        # reading the base. Realized as a view of the unaligned base, cuBLAS ran a pre-Hopper
        # kernel: 4.8 ms of GPT-2's 33 ms bf16 training step on an H200.
        base, restride = based
        if all(isinstance(n, int) for n in base.size) and _blas_ready_view(x, restride(padded_strides(base.size, per_row), 0), per_row):
            aligned = _zero_padded(ctx, base, per_row)[2] if base.ndim == 2 else ctx.as_aligned_arg(base, per_row)
            found = restride(aligned.stride, aligned.offset)
            if found is not None and _blas_ready_view(x, found, per_row):
                return BufferArg(aligned.buffer, x.size, tuple(normalize(s) for s in found[0]), normalize(found[1]))
    elif x.view is None and int(x.size[1]) % per_row == 0:
        return x  # realized row-major, its rows are aligned
    rows = _transposed_rows(x)
    if rows is not None:
        # A transposed view of a buffer (an LM head's output gradient, a graph input, read
        # transposed for the weight's gradient) is read from that buffer's rows padded: a copy
        # along memory, which the product over the unpadded view shares. Realized in the view's
        # order it was a transposing copy: 599 us a step of GPT-2's bf16 training on an H200.
        whole = _zero_padded(ctx, rows, per_row)[1]
        return BufferArg(whole.buffer, x.size, (1, whole.stride[0]), whole.offset)
    return _zero_padded(ctx, x, per_row)[2]


def _transposed_rows(x: TensorValue) -> TensorValue | None:
    """The row-major matrix of which the 2-D buffer view ``x`` is the transpose, or None."""
    arg = x.view
    if arg is None or len(arg.stride) != 2 or not all(isinstance(v, int) for v in (*arg.stride, *arg.size, arg.offset)):
        return None
    if arg.stride[0] != 1 or int(arg.stride[1]) < int(arg.size[0]) or 1 in arg.size:
        return None
    rows = BufferArg(arg.buffer, (arg.size[1], arg.size[0]), (arg.stride[1], 1), arg.offset)
    return TensorValue(x.dtype, x.device, rows.size, buffer_loader(rows, x.dtype), rows)


def _zero_padded(ctx: LoweringContext, x: TensorValue, per_row: int) -> tuple[TensorValue, BufferArg, BufferArg]:
    """A static 2-D ``x`` stored once in rows padded with zeros to ``per_row`` elements: ``x``,
    the whole padded buffer, and the view of ``x`` in it. Aligned rows let cuBLAS read ``x`` or
    its transpose; the zeros let a product over its columns run over the padded length instead
    (an odd K). The entry holds ``x``, so no other value takes its id while the lowering runs."""
    columns = -(-int(x.size[1]) // per_row) * per_row
    key = _zero_padded_key(x, per_row)
    found: tuple[TensorValue, BufferArg, BufferArg] | None = ctx.shared.get(key)
    if found is None:
        if columns == x.size[1]:
            whole = ctx.as_aligned_arg(x, per_row)
        else:
            real = ctx.realize(_padded(ctx, x, columns), (columns, 1), exact=True)
            assert real.view is not None
            whole = real.view
        found = x, whole, BufferArg(whole.buffer, x.size, whole.stride, whole.offset)
        ctx.shared[key] = found
        # What the rows hold: x's columns, then zeros up to the padded length (see _wide_rows).
        ctx.shared[("zero_columns", whole.buffer)] = (whole.offset, int(x.size[1]), columns)
    assert found[0] is x or x.view is not None
    return found


def _zero_padded_key(x: TensorValue, per_row: int) -> tuple[Any, ...]:
    # A view of a buffer is known by the view itself: two values reading the same elements of
    # the same buffer (the gradient flattened for one product, rebuilt from its transpose for
    # the other) share one copy.
    if x.view is not None:
        return ("zero_padded", x.view.buffer, x.view.size, x.view.stride, x.view.offset, per_row)
    return ("zero_padded", id(x), per_row)


# A product at least this large (M*K*N) with an unaligned contraction length K is run over K
# padded with zeros: cuBLAS gave GPT-2's LM head input gradient ((8192, 50257) by (50257, 768),
# bf16) a pre-Hopper kernel of 4.8 ms on an H200.
_PAD_K_MIN_WORK = 1 << 30


def _padded_contraction(ctx: LoweringContext, a: Any, b: Any) -> int | None:
    """The aligned contraction length to compute ``a @ b`` over, or None to leave it as it is."""
    if not all(isinstance(m, TensorValue) and m.ndim == 2 and all(isinstance(n, int) for n in m.size) for m in (a, b)):
        return None
    if a.device.type not in _PADDED_DEVICE_TYPES or a.dtype not in _PADDED_DTYPES or b.dtype != a.dtype:
        return None
    if a.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return None  # the CUDA cores: alignment does not pay for the copies (see padded_columns)
    (m, k), n = a.size, b.size[1]
    per_row = _row_elements(a.dtype)
    if k % per_row == 0 or int(m) * int(k) * int(n) < _PAD_K_MIN_WORK:
        return None
    return -(-int(k) // per_row) * per_row


# 16-bit products whose first operand is the transpose of a zero-padded gradient (an LM head's
# weight gradient, (50257 x tokens) by (tokens x hidden)) run over the padded length as their
# result rows, the extra rows sliced off: cuBLAS ran 50257 rows with a pre-Hopper kernel,
# 1.35 ms in bf16 on an H200 against 0.93 ms over 50264 (tools/bench_mm_padding.py).
_WIDE_ROWS_DTYPES = frozenset({torch.float16, torch.bfloat16})


def _wide_rows(ctx: LoweringContext, a: Any, b: Any) -> int | None:
    """The aligned row count to compute ``a @ b`` over, reading zeros past ``a``'s rows, or None."""
    if not isinstance(a, BufferArg) or not isinstance(b, (TensorValue, BufferArg)) or len(a.size) != 2 or len(b.size) != 2:
        return None
    held = ctx.shared.get(("zero_columns", a.buffer))
    dtype = ctx.buffers[a.buffer].layout.dtype if a.buffer in ctx.buffers else None
    if held is None or dtype not in _WIDE_ROWS_DTYPES or not all(isinstance(v, int) for v in (*a.size, *a.stride, *b.size)):
        return None
    offset, columns, padded = held
    (m, k), n = a.size, b.size[1]
    per_row = _row_elements(dtype)
    wide = -(-int(m) // per_row) * per_row
    # a reads the buffer's rows transposed, from their first column through all of x's.
    if a.stride[0] != 1 or a.offset != offset or m != columns or wide > padded or m == wide:
        return None
    return wide if int(m) * int(k) * int(n) >= _PAD_K_MIN_WORK else None


def _rows_padded(ctx: LoweringContext, x: TensorValue, rows: int) -> TensorValue:
    """``x`` with zero rows appended up to ``rows``."""
    meta, ctx.meta = ctx.meta, TensorMeta.of((rows, x.size[1]), x.dtype, x.device)
    try:
        padded: TensorValue = _pad(ctx, x, [0, 0, 0, rows - int(x.size[0])], 0)
    finally:
        ctx.meta = meta
    return padded


def _padded_matmul(op: Any) -> Any:
    plain = extern_lowering(op)
    operand = 2 if op is aten.addmm.default else 1

    def lower(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
        columns = padded_columns(ctx.meta)
        bias = args[0] if op is aten.addmm.default else None
        pads = (
            columns is not None and not kwargs and len(args) == operand + 1 and isinstance(args[operand], TensorValue)
            and (bias is None or (isinstance(bias, TensorValue) and bias.ndim == 1))
        )  # fmt: skip
        k = None if pads or kwargs or len(args) != operand + 1 else _padded_contraction(ctx, args[operand - 1], args[operand])
        if k is not None:
            # Both operands padded along K with zeros, which add nothing to the product.
            a, b = args[operand - 1], args[operand]
            wide_a = _zero_padded(ctx, a, _row_elements(a.dtype))[1]
            return plain(ctx, *args[: operand - 1], wide_a, _aligned_operand(ctx, _rows_padded(ctx, b, k)))
        # The matrix operands; the second one, when the output is padded, gets aligned rows from its padding.
        args = tuple(_aligned_operand(ctx, a) if i >= operand - 1 and not (pads and i == operand) else a for i, a in enumerate(args))
        wide_rows = _wide_rows(ctx, args[0], args[1]) if op is aten.mm.default and not kwargs and len(args) == 2 else None
        if wide_rows is not None:
            a, meta = args[0], ctx.meta
            ctx.meta = dataclasses.replace(meta, shape=(wide_rows, meta.shape[1]), stride=(meta.shape[1], 1))
            try:
                out = plain(ctx, BufferArg(a.buffer, (wide_rows, a.size[1]), a.stride, a.offset), args[1])
            finally:
                ctx.meta = meta
            rows = _slice(ctx, out, 0, 0, meta.shape[0])
            return ctx.lazy(dataclasses.replace(rows, view=None), [rows], 0, stored_as=rows.view)
        if not pads:
            return plain(ctx, *args, **kwargs)
        assert columns is not None
        meta = ctx.meta
        padded = list(args)
        padded[operand] = _padded_operand(ctx, args[operand], columns)
        if bias is not None and bias.size[0] != 1:
            padded[0] = _padded(ctx, bias, columns)
        wide = dataclasses.replace(meta, shape=(meta.shape[0], columns), stride=(columns, 1))
        ctx.meta = wide
        try:
            out = plain(ctx, *padded)
        finally:
            ctx.meta = meta
        view = _slice(ctx, out, 1, 0, meta.shape[1])
        # Unrealized, so that readers load the padded rows; an output returns them (stored_view).
        return ctx.lazy(dataclasses.replace(view, view=None), [view], 0, stored_as=view.view)

    return lower


for _op in (aten.mm.default, aten.addmm.default):
    register_lowering(_op)(_padded_matmul(_op))
