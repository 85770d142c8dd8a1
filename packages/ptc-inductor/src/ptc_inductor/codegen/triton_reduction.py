"""Reductions in Triton tiles: persistent (one tile per row), looped (a per-lane accumulator
tile combined across iterations, then reduced), argmax/argmin and welford."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..errors import CodegenError
from .triton_index import identity, tl_dtype

if TYPE_CHECKING:
    from .triton import TritonOps

INDEX_INIT = 2**63 - 1
"""Initial index of an argmax/argmin lane: larger than any real index, so real values win ties."""


@dataclass(frozen=True, slots=True)
class _Kind:
    combine: str
    final: str
    as_int8: bool = False

    def fold(self, tile: str, axis: int) -> str:
        """``tile`` reduced along ``axis``."""
        return self.final.format(t=tile, axis=axis)


def _kind(rtype: str, dtype: torch.dtype) -> _Kind:
    """How ``rtype`` combines two lanes, and how a tile is reduced along an axis."""
    is_float = dtype.is_floating_point
    if rtype == "sum":
        return _Kind("({a} + {b})", "tl.sum({t}, {axis})")
    if rtype == "prod":
        return _Kind("({a} * {b})", "tl.reduce({t}, {axis}, ptc_mul)")
    if rtype in ("max", "min"):
        fn = "maximum" if rtype == "max" else "minimum"
        if is_float:
            return _Kind(f"ptc_{fn}({{a}}, {{b}})", f"tl.reduce({{t}}, {{axis}}, ptc_{fn})")
        return _Kind(f"tl.{fn}({{a}}, {{b}})", f"tl.{rtype}({{t}}, {{axis}})", dtype == torch.bool)
    if rtype in ("any", "all"):
        fn = "maximum" if rtype == "any" else "minimum"
        return _Kind(f"tl.{fn}({{a}}, {{b}})", f"tl.{'max' if rtype == 'any' else 'min'}({{t}}, {{axis}})", True)
    raise CodegenError(f"unknown reduction type {rtype}")


def emit_reduction(h: TritonOps, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: str) -> Any:
    """Emit the reduction of ``value`` over the node's inner range; return the result name(s)."""
    # A row loop's row nodes hold their whole row in one tile, as a persistent kernel does.
    style = ("persistent" if h.w.style == "rowloop" else h.w.style) if h.inner else "trivial"
    if rtype in ("argmax", "argmin"):
        return _arg_reduction(h, style, src_dtype, rtype, value)
    if rtype == "welford":
        return _welford(h, style, dtype, value)
    if rtype == "sumexp":
        return _sumexp(h, style, dtype, value)
    kind = _kind(rtype, dtype)
    work_dtype = torch.int8 if kind.as_int8 else dtype
    v = value
    if rtype in ("any", "all") or dtype == torch.bool:
        v = h.new_value(f"({value} != 0).to(tl.int8)", torch.int8)
    elif h.dtype_of(value) != dtype:
        v = h.new_value(f"{value}.to({tl_dtype(dtype)})", dtype)
    if style == "trivial":
        out = v
    elif style == "persistent":
        tile = _masked_tile(h, v, identity(rtype, work_dtype))
        out = h.new_value(kind.fold(tile, 1) + "[:, None]", work_dtype)
    else:
        acc = h.new_value(f"tl.full({h.w.tile}, {identity(rtype, work_dtype)}, {tl_dtype(work_dtype)})", work_dtype, h.section.prefix)
        combined = kind.combine.format(a=acc, b=v)
        if h.rmask:
            combined = f"tl.where({h.rmask}, {combined}, {acc})"
        h.emit_line(f"{acc} = {combined}")
        out = h.new_value(kind.fold(acc, 1) + "[:, None]", work_dtype, h.section.suffix)
    if kind.as_int8:
        return h.new_value(f"({out} != 0)", torch.bool, h.section.suffix if style == "looped" else None)
    return out


def emit_row_accumulation(h: TritonOps, dtype: torch.dtype, rtype: str, value: str) -> str:
    """A split column reduction in a row loop: each lane (a column) folds in one value per row.

    The accumulator is the whole tile, declared once per chunk (the section's prefix); with
    several rows per step its rows are combined after the loop (the section's suffix)."""
    kind = _kind(rtype, dtype)
    v = value if h.dtype_of(value) == dtype else h.new_value(f"{value}.to({tl_dtype(dtype)})", dtype)
    acc = h.new_value(f"tl.full({h.w.tile}, {identity(rtype, dtype)}, {tl_dtype(dtype)})", dtype, h.section.prefix)
    h.emit_line(f"{acc} = {kind.combine.format(a=acc, b=v)}")
    if h.w.rows == 1:
        return acc
    # Each step folded in several rows, one per tile row: they are combined after the loop.
    return h.new_value(f"{kind.fold(acc, 0)}[None, :]", dtype, h.section.suffix)


def _masked_tile(h: TritonOps, v: str, fill: str) -> str:
    """``v`` broadcast to the full tile, with padded lanes set to ``fill``."""
    inner = f"tl.where({h.rmask}, {v}, {fill})" if h.rmask else v
    return h.new_value(f"tl.broadcast_to({inner}, {h.w.tile})", h.dtype_of(v))


def _arg_reduction(h: TritonOps, style: str, src_dtype: torch.dtype, rtype: str, value: str) -> str:
    combine = f"ptc_{rtype}_combine"
    v = value if h.dtype_of(value) == src_dtype else h.new_value(f"{value}.to({tl_dtype(src_dtype)})", src_dtype)
    if style == "trivial":
        return h.new_value("tl.full([], 0, tl.int64)", torch.int64)
    fill = identity(rtype, src_dtype)
    index = h.new_value(f"tl.broadcast_to(rindex, {h.w.tile}).to(tl.int64)", torch.int64)
    if style == "persistent":
        tile = _masked_tile(h, v, fill)
        pair = h.w.fresh()
        h.emit_line(f"_, {pair} = tl.reduce(({tile}, {index}), 1, {combine})")
        h.w.dtypes[pair] = torch.int64
        return h.new_value(f"{pair}[:, None]", torch.int64)
    accv = h.new_value(f"tl.full({h.w.tile}, {fill}, {tl_dtype(src_dtype)})", src_dtype, h.section.prefix)
    acci = h.new_value(f"tl.full({h.w.tile}, {INDEX_INIT}, tl.int64)", torch.int64, h.section.prefix)
    nv, ni = h.w.fresh(), h.w.fresh()
    h.emit_line(f"{nv}, {ni} = {combine}({accv}, {acci}, {v}, {index})")
    if h.rmask:
        h.emit_line(f"{accv} = tl.where({h.rmask}, {nv}, {accv})")
        h.emit_line(f"{acci} = tl.where({h.rmask}, {ni}, {acci})")
    else:
        h.emit_line(f"{accv} = {nv}")
        h.emit_line(f"{acci} = {ni}")
    pair = h.w.fresh()
    h.section.suffix.append(f"_, {pair} = tl.reduce(({accv}, {acci}), 1, {combine})")
    return h.new_value(f"{pair}[:, None]", torch.int64, h.section.suffix)


def _welford(h: TritonOps, style: str, dtype: torch.dtype, value: str) -> tuple[str, str, str]:
    tdt = tl_dtype(dtype)
    v = value if h.dtype_of(value) == dtype else h.new_value(f"{value}.to({tdt})", dtype)
    if style == "trivial":
        zero = h.new_value(f"tl.full([], 0, {tdt})", dtype)
        one = h.new_value(f"tl.full([], 1, {tdt})", dtype)
        return v, zero, one
    count = h.p(math.prod(h.inner))
    if style == "persistent":
        # The whole row is in registers: two passes (mean, then squared deviations) are exact-er
        # than the streaming update and cost no extra memory traffic.
        tile = _masked_tile(h, v, "0")
        mean = h.new_value(f"tl.sum({tile}, 1)[:, None] / {count}", dtype)
        dev = _masked_tile(h, h.new_value(f"{v} - {mean}", dtype), "0")
        m2 = h.new_value(f"tl.sum({dev} * {dev}, 1)[:, None]", dtype)
        # A symbolic count is a run-time scalar: added to zeros rather than a constexpr fill.
        n = h.new_value(f"tl.zeros({h.w.column}, {tdt}) + {count}", dtype)
        return mean, m2, n
    accs = [h.new_value(f"tl.zeros({h.w.tile}, {tdt})", dtype, h.section.prefix) for _ in range(3)]
    mean, m2, n = accs
    nn = h.new_value(f"{n} + 1", dtype)
    delta = h.new_value(f"{v} - {mean}", dtype)
    nmean = h.new_value(f"{mean} + {delta} / {nn}", dtype)
    nm2 = h.new_value(f"{m2} + {delta} * ({v} - {nmean})", dtype)
    for acc, new in ((mean, nmean), (m2, nm2), (n, nn)):
        h.emit_line(f"{acc} = tl.where({h.rmask}, {new}, {acc})" if h.rmask else f"{acc} = {new}")
    a, b, c = h.w.fresh(), h.w.fresh(), h.w.fresh()
    h.section.suffix.append(f"{a}, {b}, {c} = tl.reduce(({mean}, {m2}, {n}), 1, ptc_welford_combine)")
    for name in (a, b, c):
        h.w.dtypes[name] = dtype
    return tuple(h.new_value(f"{x}[:, None]", dtype, h.section.suffix) for x in (a, b, c))  # type: ignore[return-value]


def _sumexp(h: TritonOps, style: str, dtype: torch.dtype, value: str) -> str:
    """``sum(exp(v - max(v)))`` over the row (see online_softmax.py). Looped, each lane keeps its
    running max ``m`` and its sum ``s`` of ``exp(v - m)``, rescaled by ``exp(m_old - m)`` when
    ``m`` grows; the lanes are then rescaled to the row's max and summed.

    Non-finite values give what the two-pass form gives: a row whose max is -inf sums NaNs (each
    term is ``exp(-inf - -inf)``), an inf or a NaN in the row makes the sum NaN; -inf values in
    a row with a finite max add nothing."""
    tdt = tl_dtype(dtype)
    v = value if h.dtype_of(value) == dtype else h.new_value(f"{value}.to({tdt})", dtype)
    if style == "trivial":
        return h.new_value(f"tl.exp({v} - {v})", dtype)
    if style == "persistent":
        tile = _masked_tile(h, v, 'float("-inf")')
        top = h.new_value(f"tl.reduce({tile}, 1, ptc_maximum)[:, None]", dtype)
        terms = _masked_tile(h, h.new_value(f"tl.exp({v} - {top})", dtype), "0")
        return h.new_value(f"tl.sum({terms}, 1)[:, None]", dtype)
    m = h.new_value(f"tl.full({h.w.tile}, float(\"-inf\"), {tdt})", dtype, h.section.prefix)
    s = h.new_value(f"tl.zeros({h.w.tile}, {tdt})", dtype, h.section.prefix)
    grown = h.new_value(f"ptc_maximum({m}, {v})", dtype)
    # Equal maxima (both -inf included) keep the sum as it is: exp(-inf - -inf) would be NaN.
    scale = h.new_value(f"tl.where({grown} == {m}, 1.0, tl.exp({m} - {grown}))", dtype)
    term = h.new_value(f"tl.where({v} == float(\"-inf\"), 0.0, tl.exp({v} - {grown}))", dtype)
    new_s = h.new_value(f"{s} * {scale} + {term}", dtype)
    for acc, new in ((s, new_s), (m, grown)):
        h.emit_line(f"{acc} = tl.where({h.rmask}, {new}, {acc})" if h.rmask else f"{acc} = {new}")
    top = h.new_value(f"tl.reduce({m}, 1, ptc_maximum)[:, None]", dtype, h.section.suffix)
    lanes = h.new_value(f"tl.where({m} == {top}, {s}, {s} * tl.exp({m} - {top}))", dtype, h.section.suffix)
    total = h.new_value(f"tl.sum({lanes}, 1)[:, None]", dtype, h.section.suffix)
    return h.new_value(f"tl.where({top} == float(\"-inf\"), float(\"nan\"), {total})", dtype, h.section.suffix)
