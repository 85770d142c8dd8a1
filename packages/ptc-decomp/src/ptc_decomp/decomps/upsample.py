# torch.ops overloads are untyped, so every aten call returns Any.
"""2-D nearest and bilinear upsampling and their backward ops, as gathers and scatter-adds.

Source indices are computed in the same float precision eager uses, so rounding at window
edges lands on the same input pixel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..promotion import cast, opmath, upcast
from ..registry import register_decomposition

aten = torch.ops.aten


def _scale(in_size: int, out_size: int, scale: float | None) -> float:
    """Eager's source step per output pixel: 1/scale when a scale was given, else in/out."""
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _positions(out_size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return aten.arange.start_step(0, out_size, 1, dtype=dtype, device=device)


def _nearest_index(in_size: int, out_size: int, scale: float | None, device: torch.device) -> torch.Tensor:
    """int64 source index of each output pixel: min(floor(o * step), in - 1) in float32."""
    step = _scale(in_size, out_size, scale)
    source = aten.floor.default(aten.mul.Tensor(_positions(out_size, torch.float32, device), step))
    return aten.clamp.default(cast(source, torch.int64), None, in_size - 1)


def _output_size(input: torch.Tensor, output_size: Sequence[int] | None, scale_factors: Sequence[float] | None) -> tuple[list[int], list[float | None]]:
    if output_size is not None:
        return list(output_size), [None, None]
    if scale_factors is None:
        raise RuntimeError("upsampling needs either output_size or scale_factors")
    # floor(size * scale) as eager computes it; sym_int keeps a symbolic size an expression
    # (int() would specialize it).
    sizes = [torch.sym_int(input.shape[2 + i] * scale_factors[i]) for i in range(2)]
    return sizes, [float(s) for s in scale_factors]


@register_decomposition(aten.upsample_nearest2d.default)
def upsample_nearest2d(
    self: torch.Tensor, output_size: Sequence[int], scales_h: float | None = None, scales_w: float | None = None
) -> torch.Tensor:
    """Each output pixel copies the input pixel at floor(o * in / out)."""
    rows = _nearest_index(self.shape[2], output_size[0], scales_h, self.device)
    cols = _nearest_index(self.shape[3], output_size[1], scales_w, self.device)
    return aten.index.Tensor(self, [None, None, aten.unsqueeze.default(rows, 1), cols])


@register_decomposition(aten.upsample_nearest2d.vec)
def upsample_nearest2d_vec(input: torch.Tensor, output_size: Sequence[int] | None, scale_factors: Sequence[float] | None) -> torch.Tensor:
    """upsample_nearest2d from an output size or scale factors."""
    sizes, scales = _output_size(input, output_size, scale_factors)
    return upsample_nearest2d(input, sizes, scales[0], scales[1])


@register_decomposition(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(
    grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int], scales_h: float | None = None, scales_w: float | None = None
) -> torch.Tensor:
    """Each output gradient added to the input pixel it was copied from."""
    rows = _nearest_index(input_size[2], output_size[0], scales_h, grad_output.device)
    cols = _nearest_index(input_size[3], output_size[1], scales_w, grad_output.device)
    g = upcast(grad_output)
    zeros = aten.full.default(list(input_size), 0, dtype=g.dtype, device=g.device)
    summed = aten.index_put.default(zeros, [None, None, aten.unsqueeze.default(rows, 1), cols], g, True)
    return cast(summed, grad_output.dtype)


def _linear_taps(in_size: int, out_size: int, align_corners: bool, scale: float | None, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(index0, index1, weight0, weight1) of linear interpolation along one dim, as eager computes them."""
    o = _positions(out_size, dtype, device)
    if align_corners:
        step = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        source = aten.mul.Tensor(o, step)
    else:
        step = _scale(in_size, out_size, scale)
        source = aten.clamp.default(aten.sub.Tensor(aten.mul.Tensor(aten.add.Tensor(o, 0.5), step), 0.5), 0, None)
    index0 = aten.clamp.default(cast(aten.floor.default(source), torch.int64), None, in_size - 1)
    index1 = aten.clamp.default(aten.add.Tensor(index0, 1), None, in_size - 1)
    weight1 = aten.sub.Tensor(source, cast(index0, dtype))
    weight0 = aten.rsub.Scalar(weight1, 1)
    return index0, index1, weight0, weight1


def _bilinear_taps(
    in_h: int, in_w: int, output_size: Sequence[int], align_corners: bool, scales_h: float | None, scales_w: float | None, dtype: torch.dtype, device: torch.device
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    rows = _linear_taps(in_h, output_size[0], align_corners, scales_h, dtype, device)
    cols = _linear_taps(in_w, output_size[1], align_corners, scales_w, dtype, device)
    h0, h1, wh0, wh1 = rows
    rows = (aten.unsqueeze.default(h0, 1), aten.unsqueeze.default(h1, 1), aten.unsqueeze.default(wh0, 1), aten.unsqueeze.default(wh1, 1))
    return rows, cols


@register_decomposition(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(
    self: torch.Tensor, output_size: Sequence[int], align_corners: bool, scales_h: float | None = None, scales_w: float | None = None
) -> torch.Tensor:
    """Bilinear interpolation of the four input pixels around each output pixel."""
    x = upcast(self)
    (h0, h1, wh0, wh1), (w0, w1, ww0, ww1) = _bilinear_taps(self.shape[2], self.shape[3], output_size, align_corners, scales_h, scales_w, x.dtype, x.device)

    def at(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return aten.index.Tensor(x, [None, None, h, w])

    top = aten.add.Tensor(aten.mul.Tensor(at(h0, w0), ww0), aten.mul.Tensor(at(h0, w1), ww1))
    bottom = aten.add.Tensor(aten.mul.Tensor(at(h1, w0), ww0), aten.mul.Tensor(at(h1, w1), ww1))
    out = aten.add.Tensor(aten.mul.Tensor(top, wh0), aten.mul.Tensor(bottom, wh1))
    return cast(out, self.dtype)


@register_decomposition(aten.upsample_bilinear2d.vec)
def upsample_bilinear2d_vec(input: torch.Tensor, output_size: Sequence[int] | None, align_corners: bool, scale_factors: Sequence[float] | None) -> torch.Tensor:
    """upsample_bilinear2d from an output size or scale factors."""
    sizes, scales = _output_size(input, output_size, scale_factors)
    return upsample_bilinear2d(input, sizes, align_corners, scales[0], scales[1])


@register_decomposition(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(
    grad_output: torch.Tensor,
    output_size: Sequence[int],
    input_size: Sequence[int],
    align_corners: bool,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> torch.Tensor:
    """Each output gradient shared among its four input pixels by the interpolation weights."""
    g = upcast(grad_output)
    dtype = opmath(grad_output.dtype)
    (h0, h1, wh0, wh1), (w0, w1, ww0, ww1) = _bilinear_taps(input_size[2], input_size[3], output_size, align_corners, scales_h, scales_w, dtype, g.device)
    grad = aten.full.default(list(input_size), 0, dtype=g.dtype, device=g.device)
    for h, wh in ((h0, wh0), (h1, wh1)):
        for w, ww in ((w0, ww0), (w1, ww1)):
            share = aten.mul.Tensor(aten.mul.Tensor(g, wh), ww)
            grad = aten.index_put.default(grad, [None, None, h, w], share, True)
    return cast(grad, grad_output.dtype)
