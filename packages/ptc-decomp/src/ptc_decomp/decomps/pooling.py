# torch.ops overloads are untyped, so every aten call returns Any.
"""2-D pooling (max with indices, average, adaptive average) and their backward ops, via unfold windows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..dims import known, reshape
from ..promotion import cast, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    values = [v] if isinstance(v, int) else list(v)
    if not values and default is not None:
        values = list(default)
    return values * 2 if len(values) == 1 else values


def pooled_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """Output length of one pooled dim, with eager's rule that the last window starts inside the input."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _batched(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 4 else aten.unsqueeze.default(x, 0)


def _unbatched(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x if like.dim() == 4 else aten.squeeze.dims(x, [0])


def _windows(
    x: torch.Tensor, kernel: list[int], stride: list[int], pad: list[int], dilation: list[int], out: list[Any], fill: Any, ceil_mode: bool
) -> torch.Tensor:
    """(N, C, oH, oW, kH * kW): every pooling window of a padded 4-D input."""
    spans = [dilation[i] * (kernel[i] - 1) + 1 for i in range(2)]
    # The last window ends at most ``pad`` past the input (ceil mode: stride - 1 more). Padding
    # that much on the right, whatever the size, keeps the padding a constant; the windows
    # beyond ``out`` that the extra padding may add are sliced off below.
    rights = [pad[i] + (stride[i] - 1 if ceil_mode else 0) for i in range(2)]
    padded = aten.constant_pad_nd.default(x, [pad[1], rights[1], pad[0], rights[0]], fill)
    rows = aten.unfold.default(padded, 2, spans[0], stride[0])
    rows = aten.slice.Tensor(aten.slice.Tensor(rows, 2, 0, out[0]), 4, 0, spans[0], dilation[0])
    cells = aten.unfold.default(rows, 3, spans[1], stride[1])
    cells = aten.slice.Tensor(aten.slice.Tensor(cells, 3, 0, out[1]), 5, 0, spans[1], dilation[1])
    return reshape(cells, [x.shape[0], x.shape[1], out[0], out[1], kernel[0] * kernel[1]])


def _lowest(dtype: torch.dtype) -> float | int:
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


# Up to this many window positions a pooling op is a chain of pointwise ops over strided slices,
# one slice per position, which fuse into one kernel that reads the input in place. The unfold
# form stores every window first (ResNet-50's 3x3 max pool: a buffer 9x its output, 0.8 ms of
# 3.7 on an H200 in bf16); it stays for larger windows, where the chain would grow the graph.
_MAX_TAPS = 49


def _taps(
    x: torch.Tensor, kernel: list[int], stride: list[int], pad: list[int], dilation: list[int], out: list[Any], fill: Any, ceil_mode: bool
) -> list[tuple[int, int, torch.Tensor]]:
    """(kh, kw, (N, C, oH, oW) values at that offset of every window), offsets in row-major order."""
    rights = [pad[i] + (stride[i] - 1 if ceil_mode else 0) for i in range(2)]
    padded = aten.constant_pad_nd.default(x, [pad[1], rights[1], pad[0], rights[0]], fill)
    taps = []
    for i in range(kernel[0]):
        top = i * dilation[0]
        rows = aten.slice.Tensor(padded, 2, top, top + (out[0] - 1) * stride[0] + 1, stride[0])
        for j in range(kernel[1]):
            left = j * dilation[1]
            taps.append((i, j, aten.slice.Tensor(rows, 3, left, left + (out[1] - 1) * stride[1] + 1, stride[1])))
    return taps


def _window_starts(out: Any, step: int, pad: int, dilation: int, device: torch.device) -> torch.Tensor:
    """(out,) first position of each window along one dim, before padding (may be negative)."""
    return aten.sub.Tensor(aten.mul.Tensor(aten.arange.start_step(0, out, 1, dtype=torch.int64, device=device), step), pad)


def _first_inside(start: torch.Tensor, dilation: int) -> torch.Tensor:
    """The first window position at or after 0: eager's starting argmax for a window that begins in the padding."""
    behind = aten.clamp.default(aten.neg.default(start), 0, None)
    return aten.add.Tensor(start, aten.mul.Tensor(aten.div.Tensor_mode(aten.add.Tensor(behind, dilation - 1), dilation, rounding_mode="floor"), dilation))


def _max_pool_taps(
    x: torch.Tensor, kernel: list[int], steps: list[int], pads: list[int], dils: list[int], out: list[Any], ceil_mode: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Max pooling as eager's CUDA and CPU kernels scan a window: in row-major order, a value
    replaces the running max when it is greater or NaN, and the index starts at the window's
    first position inside the input.

    The values are a chain of ``maximum`` (NaN wins, as in the scan), each link read once: with
    the indices unused (inference) the whole window inlines into one expression of its readers,
    where a select on a comparison would read each running max twice and store it."""
    width = x.shape[3]
    rows = aten.unsqueeze.default(_window_starts(out[0], steps[0], pads[0], dils[0], x.device), 1)
    cols = _window_starts(out[1], steps[1], pads[1], dils[1], x.device)
    taps = _taps(x, kernel, steps, pads, dils, out, _lowest(x.dtype), ceil_mode)
    best = taps[0][2]
    where = aten.add.Tensor(aten.mul.Tensor(_first_inside(rows, dils[0]), width), _first_inside(cols, dils[1]))
    for i, j, value in taps[1:]:
        take = aten.gt.Tensor(value, best)
        if x.dtype.is_floating_point:
            take = aten.logical_or.default(take, aten.isnan.default(value))
        position = aten.add.Tensor(aten.mul.Tensor(aten.add.Tensor(rows, i * dils[0]), width), aten.add.Tensor(cols, j * dils[1]))
        where = aten.where.self(take, position, where)
        best = aten.maximum.default(best, value)
    if where.dim() != best.dim():  # a 1x1 window: no comparison broadcast the index
        where = aten.clone.default(aten.expand.default(where, list(best.shape)), memory_format=torch.contiguous_format)
    if len(taps) == 1:
        best = aten.clone.default(best, memory_format=torch.contiguous_format)
    return best, where


@register_decomposition(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(
    self: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(max of each window, flat H*W index of that max in the input)."""
    kernel = _pair(kernel_size)
    steps, pads, dils = _pair(stride, kernel), _pair(padding), _pair(dilation)
    x = _batched(self)
    width = x.shape[3]
    out = [pooled_size(x.shape[2 + i], kernel[i], steps[i], pads[i], dils[i], ceil_mode) for i in range(2)]
    if kernel[0] * kernel[1] <= _MAX_TAPS:
        values, indices = _max_pool_taps(x, kernel, steps, pads, dils, out, ceil_mode)
        return _unbatched(values, self), _unbatched(indices, self)
    windows = _windows(x, kernel, steps, pads, dils, out, _lowest(x.dtype), ceil_mode)
    values = aten.amax.default(windows, [-1], False)
    where = aten.argmax.default(windows, -1, False)
    kh = aten.div.Tensor_mode(where, kernel[1], rounding_mode="floor")
    kw = aten.sub.Tensor(where, aten.mul.Tensor(kh, kernel[1]))
    oh = aten.arange.start_step(0, out[0], 1, dtype=torch.int64, device=x.device)
    ow = aten.arange.start_step(0, out[1], 1, dtype=torch.int64, device=x.device)
    h = aten.add.Tensor(aten.mul.Tensor(kh, dils[0]), aten.view.default(aten.sub.Tensor(aten.mul.Tensor(oh, steps[0]), pads[0]), [out[0], 1]))
    w = aten.add.Tensor(aten.mul.Tensor(kw, dils[1]), aten.sub.Tensor(aten.mul.Tensor(ow, steps[1]), pads[1]))
    indices = aten.add.Tensor(aten.mul.Tensor(h, width), w)
    return _unbatched(values, self), _unbatched(indices, self)


@register_decomposition(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: torch.Tensor,
) -> torch.Tensor:
    """Each output gradient added at the input position its max came from."""
    x, g, idx = _batched(self), _batched(grad_output), _batched(indices)
    n, c = x.shape[0], x.shape[1]
    flat = aten.full.default([n, c, x.shape[2] * x.shape[3]], 0, dtype=upcast(g).dtype, device=g.device)
    summed = aten.scatter_add.default(flat, 2, reshape(idx, [n, c, -1]), reshape(upcast(g), [n, c, -1]))
    return cast(_unbatched(aten.view.default(summed, list(x.shape)), self), grad_output.dtype)


def _avg_divisor(x: torch.Tensor, out: list[int], kernel: list[int], steps: list[int], pads: list[int], include_pad: bool, dtype: torch.dtype) -> torch.Tensor:
    """(oH, oW) element counts eager divides each window's sum by."""
    sizes = []
    for i in range(2):
        start = aten.sub.Tensor(aten.mul.Tensor(aten.arange.start_step(0, out[i], 1, dtype=torch.int64, device=x.device), steps[i]), pads[i])
        end = aten.clamp.default(aten.add.Tensor(start, kernel[i]), None, x.shape[2 + i] + pads[i])
        if not include_pad:
            start = aten.clamp.default(start, 0, None)
            end = aten.clamp.default(end, None, x.shape[2 + i])
        sizes.append(aten.sub.Tensor(end, start))
    return cast(aten.mul.Tensor(aten.unsqueeze.default(sizes[0], 1), aten.unsqueeze.default(sizes[1], 0)), dtype)


def _avg_setup(
    x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int], ceil_mode: bool
) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = _pair(kernel_size)
    steps, pads = _pair(stride, kernel), _pair(padding)
    out = [pooled_size(x.shape[2 + i], kernel[i], steps[i], pads[i], 1, ceil_mode) for i in range(2)]
    return kernel, steps, pads, out


@register_decomposition(aten.avg_pool2d.default)
def avg_pool2d(
    self: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    """Window sums divided by the window size (with or without padding) or divisor_override."""
    x = _batched(upcast(self))
    kernel, steps, pads, out = _avg_setup(x, kernel_size, stride, padding, ceil_mode)
    if kernel[0] * kernel[1] <= _MAX_TAPS:
        # Summed in eager's order (row-major over the window); the padding adds zeros.
        values = [v for _, _, v in _taps(x, kernel, steps, pads, [1, 1], out, 0, ceil_mode)]
        total = values[0]
        for value in values[1:]:
            total = aten.add.Tensor(total, value)
    else:
        total = aten.sum.dim_IntList(_windows(x, kernel, steps, pads, [1, 1], out, 0, ceil_mode), [-1], False)
    if divisor_override:
        result = aten.div.Tensor(total, divisor_override)
    else:
        result = aten.div.Tensor(total, _avg_divisor(x, out, kernel, steps, pads, count_include_pad, x.dtype))
    return cast(_unbatched(result, self), self.dtype)


@register_decomposition(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """Each window's gradient / divisor spread over the window's input positions."""
    x, g = _batched(self), _batched(upcast(grad_output))
    kernel, steps, pads, out = _avg_setup(x, kernel_size, stride, padding, ceil_mode)
    divisor: Any = divisor_override or _avg_divisor(x, out, kernel, steps, pads, count_include_pad, g.dtype)
    share = aten.div.Tensor(g, divisor)
    folded = _fold(lambda i, j: share, [x.shape[0], x.shape[1], x.shape[2], x.shape[3]], out, kernel, steps, pads, [1, 1], g.dtype, g.device)
    return cast(_unbatched(folded, self), grad_output.dtype)


def _fold(
    part: Callable[[int, int], torch.Tensor],
    shape: list[int],
    out: list[int],
    kernel: list[int],
    steps: list[int],
    pads: list[int],
    dils: list[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Sum each kernel offset's (N, C, oH, oW) values back onto the input grid (col2im)."""
    spans = [(out[i] - 1) * steps[i] + 1 for i in range(2)]
    # Windows end at most pad (ceil mode: stride - 1 more) past the input, so this buffer
    # holds every window at every size, with no max() of sizes to decide.
    padded = [shape[2 + i] + 2 * pads[i] + steps[i] - 1 for i in range(2)]
    buffer = aten.full.default([shape[0], shape[1], padded[0], padded[1]], 0, dtype=dtype, device=device)
    # One strided add per kernel offset: the windows at offset (i, j) touch a regular grid.
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dils[0], j * dils[1]
            rows = aten.slice.Tensor(buffer, 2, top, top + spans[0], steps[0])
            cells = aten.slice.Tensor(rows, 3, left, left + spans[1], steps[1])
            rows = aten.slice_scatter.default(rows, aten.add.Tensor(cells, part(i, j)), 3, left, left + spans[1], steps[1])
            buffer = aten.slice_scatter.default(buffer, rows, 2, top, top + spans[0], steps[0])
    cropped = aten.slice.Tensor(aten.slice.Tensor(buffer, 2, pads[0], pads[0] + shape[2]), 3, pads[1], pads[1] + shape[3])
    return aten.clone.default(cropped, memory_format=torch.contiguous_format)


@register_decomposition(aten.im2col.default)
def im2col(self: torch.Tensor, kernel_size: Sequence[int], dilation: Sequence[int], padding: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """(N, C*kH*kW, L) sliding windows of a 4-D input (nn.Unfold)."""
    kernel, dils, pads, steps = _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride)
    x = _batched(self)
    n, c = x.shape[0], x.shape[1]
    out = [pooled_size(x.shape[2 + i], kernel[i], steps[i], pads[i], dils[i], False) for i in range(2)]
    windows = _windows(x, kernel, steps, pads, dils, out, 0, False)
    cols = reshape(aten.permute.default(windows, [0, 1, 4, 2, 3]), [n, c * kernel[0] * kernel[1], out[0] * out[1]])
    return _unbatched_cols(cols, self)


def _unbatched_cols(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x if like.dim() == 4 else aten.squeeze.dims(x, [0])


@register_decomposition(aten.col2im.default)
def col2im(
    self: torch.Tensor, output_size: Sequence[int], kernel_size: Sequence[int], dilation: Sequence[int], padding: Sequence[int], stride: Sequence[int]
) -> torch.Tensor:
    """Sum of (N, C*kH*kW, L) window columns back into an (N, C, H, W) image (nn.Fold)."""
    kernel, dils, pads, steps = _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride)
    size = _pair(output_size)
    cols = self if self.dim() == 3 else aten.unsqueeze.default(self, 0)
    n = cols.shape[0]
    c = cols.shape[1] // (kernel[0] * kernel[1])
    out = [pooled_size(size[i], kernel[i], steps[i], pads[i], dils[i], False) for i in range(2)]
    grid = reshape(upcast(cols), [n, c, kernel[0], kernel[1], out[0], out[1]])
    folded = _fold(lambda i, j: aten.select.int(aten.select.int(grid, 2, i), 2, j), [n, c, size[0], size[1]], out, kernel, steps, pads, dils, grid.dtype, grid.device)
    folded = cast(folded, self.dtype)
    return folded if self.dim() == 3 else aten.squeeze.dims(folded, [0])


def _adaptive_matrix(size: int, out: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(out, size) averaging matrix: row o averages [floor(o*size/out), ceil((o+1)*size/out))."""
    o = aten.arange.start_step(0, out, 1, dtype=torch.int64, device=device)
    start = aten.div.Tensor_mode(aten.mul.Tensor(o, size), out, rounding_mode="floor")
    end = aten.div.Tensor_mode(aten.add.Tensor(aten.mul.Tensor(aten.add.Tensor(o, 1), size), out - 1), out, rounding_mode="floor")
    pos = aten.arange.start_step(0, size, 1, dtype=torch.int64, device=device)
    inside = aten.logical_and.default(aten.ge.Tensor(pos, aten.unsqueeze.default(start, 1)), aten.lt.Tensor(pos, aten.unsqueeze.default(end, 1)))
    count = aten.unsqueeze.default(cast(aten.sub.Tensor(end, start), dtype), 1)
    return aten.div.Tensor(cast(inside, dtype), count)


@register_decomposition(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(self: torch.Tensor, output_size: Sequence[int]) -> torch.Tensor:
    """Average over adaptive windows: a reshape-mean when sizes divide, else averaging matrices."""
    x = _batched(upcast(self))
    n, c, height, width = x.shape
    oh, ow = _pair(output_size)
    # The reshape-mean fast path only where the sizes divide at every admitted size: testing
    # a symbolic size would guard its divisibility, and the matrices are right at any size.
    if known(height % oh == 0) and known(width % ow == 0):
        blocks = reshape(x, [n, c, oh, height // oh, ow, width // ow])
        out = aten.div.Tensor(aten.sum.dim_IntList(blocks, [3, 5], False), (height // oh) * (width // ow))
    else:
        rows = _adaptive_matrix(height, oh, x.dtype, x.device)
        cols = _adaptive_matrix(width, ow, x.dtype, x.device)
        out = aten.matmul.default(aten.matmul.default(rows, x), aten.permute.default(cols, [1, 0]))
    return cast(_unbatched(out, self), self.dtype)


@register_decomposition(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    """Each output gradient spread evenly over its window."""
    x, g = _batched(self), _batched(upcast(grad_output))
    n, c, height, width = x.shape
    oh, ow = g.shape[2], g.shape[3]
    if known(height % oh == 0) and known(width % ow == 0):
        kh, kw = height // oh, width // ow
        share = aten.div.Tensor(aten.view.default(g, [n, c, oh, 1, ow, 1]), kh * kw)
        spread = aten.expand.default(share, [n, c, oh, kh, ow, kw])
        out = reshape(aten.clone.default(spread, memory_format=torch.contiguous_format), [n, c, height, width])
    else:
        rows = _adaptive_matrix(height, oh, g.dtype, g.device)
        cols = _adaptive_matrix(width, ow, g.dtype, g.device)
        out = aten.matmul.default(aten.matmul.default(aten.permute.default(rows, [1, 0]), g), cols)
    return cast(_unbatched(out, self), grad_output.dtype)
