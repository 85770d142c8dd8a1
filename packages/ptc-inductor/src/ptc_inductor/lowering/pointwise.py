"""Lowerings of elementwise ops: unary math, binary arithmetic, comparisons, logic, casts."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from .. import sizes
from ..indexing import Expr
from ..ir import FloatSize, TensorValue
from ..virtualized import ops
from .context import LoweringContext
from .registry import register_lowering

aten = torch.ops.aten

Scalar = int | float | bool


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: bf16/fp16 are computed in float32, as eager's CPU kernels do."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def promote(*args: Any) -> torch.dtype:
    """Eager's result dtype of combining ``args`` (TensorValues and Python numbers)."""
    probes: list[Any] = []
    for a in args:
        if isinstance(a, TensorValue):
            probes.append(torch.empty([1] * a.ndim if a.ndim else [], dtype=a.dtype, device="meta"))
        elif isinstance(a, FloatSize):
            probes.append(0.0)
        elif isinstance(a, sympy.Basic):
            probes.append(0)  # a symbolic size: an int
        elif a is not None:
            probes.append(a)
    result: Any = probes[0]
    for p in probes[1:]:
        dtype = torch.result_type(result, p)
        result = torch.empty([1] if _ndim(result) or _ndim(p) else [], dtype=dtype, device="meta")
    if isinstance(result, torch.Tensor):
        return result.dtype
    return torch.tensor(result).dtype


def _ndim(x: Any) -> int:
    return x.ndim if isinstance(x, torch.Tensor) else 0


def scalar(value: Any, dtype: torch.dtype) -> Any:
    """``ops`` value of a Python scalar, a symbolic size (computed from the size arguments at run
    time) or a FloatSize, in ``dtype``."""
    if isinstance(value, FloatSize):
        num, den = sympy.fraction(sympy.together(value.expr))
        out = ops.to_dtype(ops.index_expr(sympy.expand(num), torch.int64), torch.float64)
        if den != 1:
            out = ops.truediv(out, ops.to_dtype(ops.index_expr(sympy.expand(den), torch.int64), torch.float64))
        return ops.to_dtype(out, dtype)
    if isinstance(value, sympy.Basic) and not value.is_number:
        out = ops.index_expr(value, torch.int64)
        return out if dtype == torch.int64 else ops.to_dtype(out, dtype)
    if isinstance(value, sympy.Basic):
        value = int(value) if value.is_Integer else float(value)
    return ops.constant(value, dtype)


def broadcast_loader(value: TensorValue, out_size: Sequence[sizes.Size]) -> Callable[[Sequence[Expr]], Any]:
    """A loader of ``value`` broadcast to ``out_size`` (trailing dims aligned)."""
    shift = len(out_size) - value.ndim
    size = value.size
    loader = value.loader

    def load(idx: Sequence[Expr]) -> Any:
        inner: list[Expr] = []
        for d in range(value.ndim):
            inner.append(sympy.Integer(0) if size[d] == 1 else idx[d + shift])
        return loader(inner)

    return load


def make_pointwise(
    ctx: LoweringContext,
    args: Sequence[Any],
    fn: Callable[..., Any],
    cdtype: torch.dtype,
    out_dtype: torch.dtype | None = None,
    out_size: Sequence[sizes.Size] | None = None,
    device: torch.device | None = None,
) -> TensorValue:
    """A lazy TensorValue computing ``fn`` over ``args`` (cast to ``cdtype``), cast to ``out_dtype``."""
    meta = ctx.meta
    size = tuple(sizes.normalize(s) for s in (out_size if out_size is not None else meta.shape))
    out = out_dtype if out_dtype is not None else meta.dtype
    dev = device if device is not None else _device_of(args, meta)
    loaders: list[Callable[[Sequence[Expr]], Any]] = []
    for a in args:
        if isinstance(a, TensorValue):
            loaders.append(_cast_loader(broadcast_loader(a, size), a.dtype, cdtype))
        else:
            loaders.append(_const_loader(a, cdtype))

    def loader(idx: Sequence[Expr]) -> Any:
        result = fn(*[ld(idx) for ld in loaders])
        return ops.to_dtype(result, out) if out != cdtype else result

    same = [a for a in args if isinstance(a, TensorValue) and tuple(a.size) == size]
    return ctx.lazy(TensorValue(out, dev, size, loader), args, 1, at_own_index=same)


def _device_of(args: Sequence[Any], meta: Any) -> torch.device:
    if hasattr(meta, "device"):
        return torch.device(meta.device)
    for a in args:
        if isinstance(a, TensorValue):
            return a.device
    return torch.device("cpu")


def _cast_loader(load: Callable[[Sequence[Expr]], Any], src: torch.dtype, dst: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    if src == dst:
        return load
    return lambda idx: ops.to_dtype(load(idx), dst)


def _const_loader(value: Any, dtype: torch.dtype) -> Callable[[Sequence[Expr]], Any]:
    return lambda idx: scalar(value, dtype)


_FLOAT_UNARY = {
    aten.exp.default: "exp",
    aten.exp2.default: "exp2",
    aten.expm1.default: "expm1",
    aten.log.default: "log",
    aten.log2.default: "log2",
    aten.log10.default: "log10",
    aten.log1p.default: "log1p",
    aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt",
    aten.reciprocal.default: "reciprocal",
    aten.sin.default: "sin",
    aten.cos.default: "cos",
    aten.tan.default: "tan",
    aten.asin.default: "asin",
    aten.acos.default: "acos",
    aten.atan.default: "atan",
    aten.sinh.default: "sinh",
    aten.cosh.default: "cosh",
    aten.tanh.default: "tanh",
    aten.asinh.default: "asinh",
    aten.acosh.default: "acosh",
    aten.atanh.default: "atanh",
    aten.sigmoid.default: "sigmoid",
    aten.erf.default: "erf",
    aten.erfc.default: "erfc",
    aten.erfinv.default: "erfinv",
    aten.lgamma.default: "lgamma",
    aten.digamma.default: "digamma",
    aten.i0.default: "i0",
    aten.frac.default: "frac",
}

_KEEP_DTYPE_UNARY = {
    aten.abs.default: "abs",
    aten.neg.default: "neg",
    aten.sign.default: "sign",
    aten.bitwise_not.default: "bitwise_not",
}

_ROUNDING = {
    aten.floor.default: "floor",
    aten.ceil.default: "ceil",
    aten.round.default: "round",
    aten.trunc.default: "trunc",
}


def _unary(opname: str) -> Callable[..., TensorValue]:
    def lower(ctx: LoweringContext, x: TensorValue) -> TensorValue:
        cd = compute_dtype(ctx.meta.dtype)
        return make_pointwise(ctx, [x], getattr_op(opname), cd)

    return lower


def getattr_op(name: str) -> Callable[..., Any]:
    """A function calling ``ops.<name>`` at load time."""
    return lambda *a: getattr(ops, name)(*a)


for _op, _name in {**_FLOAT_UNARY, **_KEEP_DTYPE_UNARY}.items():
    register_lowering(_op)(_unary(_name))


def _rounding(opname: str) -> Callable[..., TensorValue]:
    def lower(ctx: LoweringContext, x: TensorValue) -> TensorValue:
        if not x.dtype.is_floating_point:
            return make_pointwise(ctx, [x], lambda a: a, x.dtype)
        return make_pointwise(ctx, [x], getattr_op(opname), compute_dtype(x.dtype))

    return lower


for _op, _name in _ROUNDING.items():
    register_lowering(_op)(_rounding(_name))


@register_lowering(aten.signbit.default)
def _signbit(ctx: LoweringContext, x: TensorValue) -> TensorValue:
    return make_pointwise(ctx, [x], getattr_op("signbit"), compute_dtype(x.dtype), torch.bool)


def _binary(opname: str, use_alpha: bool = False) -> Callable[..., TensorValue]:
    def lower(ctx: LoweringContext, a: Any, b: Any, *, alpha: Any = 1) -> TensorValue:
        cd = compute_dtype(ctx.meta.dtype)
        op = getattr_op(opname)
        if use_alpha and alpha != 1:
            return make_pointwise(ctx, [a, b, alpha], lambda x, y, s: op(x, ops.mul(y, s)), cd)
        return make_pointwise(ctx, [a, b], op, cd)

    return lower


register_lowering(aten.add.Tensor)(_binary("add", True))
register_lowering(aten.sub.Tensor)(_binary("sub", True))
_BINARY = {
    aten.mul.Tensor: "mul",
    aten.div.Tensor: "truediv",
    aten.remainder.Tensor: "remainder",
    aten.fmod.Tensor: "fmod",
    aten.pow.Tensor_Tensor: "pow",
    aten.pow.Scalar: "pow",
    aten.maximum.default: "maximum",
    aten.minimum.default: "minimum",
    aten.atan2.default: "atan2",
    aten.copysign.Tensor: "copysign",
    aten.nextafter.default: "nextafter",
    aten.bitwise_and.Tensor: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or",
    aten.bitwise_xor.Tensor: "bitwise_xor",
    aten.bitwise_left_shift.Tensor: "left_shift",
    aten.bitwise_right_shift.Tensor: "right_shift",
    aten.fmax.default: "fmax",
    aten.fmin.default: "fmin",
    aten.hypot.default: "hypot",
    aten.logaddexp.default: "logaddexp",
    aten.heaviside.default: "heaviside",
}
for _op, _name in _BINARY.items():
    register_lowering(_op)(_binary(_name))


@register_lowering(aten.div.Tensor_mode)
def _div_mode(ctx: LoweringContext, a: Any, b: Any, *, rounding_mode: str | None = None) -> TensorValue:
    cd = compute_dtype(ctx.meta.dtype)
    name = {None: "truediv", "trunc": "truncdiv", "floor": "floordiv"}[rounding_mode]
    return make_pointwise(ctx, [a, b], getattr_op(name), cd)


@register_lowering(aten.pow.Tensor_Scalar)
def _pow_scalar(ctx: LoweringContext, a: TensorValue, exponent: Scalar) -> TensorValue:
    cd = compute_dtype(ctx.meta.dtype)
    # Small integer exponents become multiplications, as eager's CPU kernel does.
    special: dict[Any, Callable[[Any], Any]] = {
        0: lambda x: ops.constant(1, cd),
        1: lambda x: x,
        2: lambda x: ops.mul(x, x),
        3: lambda x: ops.mul(ops.mul(x, x), x),
        0.5: getattr_op("sqrt"),
        -0.5: getattr_op("rsqrt"),
        -1: getattr_op("reciprocal"),
        -2: lambda x: ops.reciprocal(ops.mul(x, x)),
    }
    if cd.is_floating_point and exponent in special:
        return make_pointwise(ctx, [a], special[exponent], cd)
    return make_pointwise(ctx, [a, exponent], getattr_op("pow"), cd)


_COMPARE = {
    aten.eq.Tensor: "eq",
    aten.ne.Tensor: "ne",
    aten.lt.Tensor: "lt",
    aten.le.Tensor: "le",
    aten.gt.Tensor: "gt",
    aten.ge.Tensor: "ge",
    aten.eq.Scalar: "eq",
    aten.ne.Scalar: "ne",
    aten.lt.Scalar: "lt",
    aten.le.Scalar: "le",
    aten.gt.Scalar: "gt",
    aten.ge.Scalar: "ge",
}


def _compare(opname: str) -> Callable[..., TensorValue]:
    def lower(ctx: LoweringContext, a: Any, b: Any) -> TensorValue:
        cd = compute_dtype(promote(a, b))
        return make_pointwise(ctx, [a, b], getattr_op(opname), cd, torch.bool)

    return lower


for _op, _name in _COMPARE.items():
    register_lowering(_op)(_compare(_name))


@register_lowering(aten.isnan.default)
def _isnan(ctx: LoweringContext, x: TensorValue) -> TensorValue:
    if not x.dtype.is_floating_point:
        return make_pointwise(ctx, [x], lambda a: ops.constant(False, torch.bool), torch.bool, torch.bool)
    return make_pointwise(ctx, [x], getattr_op("isnan"), compute_dtype(x.dtype), torch.bool)


@register_lowering(aten.isinf.default)
def _isinf(ctx: LoweringContext, x: TensorValue) -> TensorValue:
    if not x.dtype.is_floating_point:
        return make_pointwise(ctx, [x], lambda a: ops.constant(False, torch.bool), torch.bool, torch.bool)
    return make_pointwise(ctx, [x], getattr_op("isinf"), compute_dtype(x.dtype), torch.bool)


@register_lowering(aten.logical_not.default)
def _logical_not(ctx: LoweringContext, x: TensorValue) -> TensorValue:
    return make_pointwise(ctx, [x], getattr_op("logical_not"), torch.bool)


_LOGICAL = {
    aten.logical_and.default: "logical_and",
    aten.logical_or.default: "logical_or",
    aten.logical_xor.default: "logical_xor",
}


def _logical(opname: str) -> Callable[..., TensorValue]:
    def lower(ctx: LoweringContext, a: Any, b: Any) -> TensorValue:
        return make_pointwise(ctx, [a, b], getattr_op(opname), torch.bool)

    return lower


for _op, _name in _LOGICAL.items():
    register_lowering(_op)(_logical(_name))


@register_lowering(aten.where.self)
def _where(ctx: LoweringContext, cond: Any, a: Any, b: Any) -> TensorValue:
    cd = compute_dtype(ctx.meta.dtype)
    if isinstance(cond, TensorValue) and cond.dtype != torch.bool:
        cond_v: Any = make_pointwise(ctx, [cond], lambda c: c, torch.bool, torch.bool, cond.size, cond.device)
    else:
        cond_v = cond
    size = tuple(sizes.normalize(s) for s in ctx.meta.shape)
    cl = broadcast_loader(cond_v, size) if isinstance(cond_v, TensorValue) else (lambda idx: ops.constant(bool(cond), torch.bool))
    inner = make_pointwise(ctx, [a, b], lambda x, y: (x, y), cd, cd)

    def loader(idx: Sequence[Expr]) -> Any:
        x, y = inner.loader(idx)
        r = ops.where(cl(idx), x, y)
        return ops.to_dtype(r, ctx_dtype) if ctx_dtype != cd else r

    ctx_dtype = ctx.meta.dtype
    return ctx.lazy(TensorValue(ctx_dtype, inner.device, size, loader), (inner, cond_v), 0)


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx: LoweringContext, x: TensorValue, min: Any = None, max: Any = None) -> TensorValue:
    cd = compute_dtype(ctx.meta.dtype)
    args: list[Any] = [x]
    if min is not None:
        args.append(min)
    if max is not None:
        args.append(max)
    has_min, has_max = min is not None, max is not None

    def fn(v: Any, *bounds: Any) -> Any:
        i = 0
        if has_min:
            v = ops.maximum(v, bounds[i])
            i += 1
        if has_max:
            v = ops.minimum(v, bounds[i])
        return v

    return make_pointwise(ctx, args, fn, cd)


@register_lowering(aten.nan_to_num.default)
def _nan_to_num(ctx: LoweringContext, x: TensorValue, nan: float | None = None, posinf: float | None = None, neginf: float | None = None) -> TensorValue:
    if not x.dtype.is_floating_point:
        return make_pointwise(ctx, [x], lambda a: a, x.dtype)
    finfo = torch.finfo(x.dtype)
    nan_v = 0.0 if nan is None else nan
    pos = finfo.max if posinf is None else posinf
    neg = finfo.min if neginf is None else neginf
    cd = compute_dtype(x.dtype)

    def fn(v: Any) -> Any:
        v = ops.where(ops.isnan(v), ops.constant(nan_v, cd), v)
        v = ops.where(ops.eq(v, ops.constant(math.inf, cd)), ops.constant(pos, cd), v)
        return ops.where(ops.eq(v, ops.constant(-math.inf, cd)), ops.constant(neg, cd), v)

    return make_pointwise(ctx, [x], fn, cd)


@register_lowering(aten._to_copy.default)
def _to_copy(ctx: LoweringContext, x: TensorValue, **kwargs: Any) -> TensorValue:
    dtype = ctx.meta.dtype
    if torch.device(ctx.meta.device) != x.device:
        raise NotImplementedError(f"_to_copy across devices ({x.device} -> {ctx.meta.device})")
    out = make_pointwise(ctx, [x], lambda a: a, compute_dtype(x.dtype), dtype)
    if _widens_exactly(x.dtype, dtype):
        ctx.mark_widening(out, x)
    return out


def _widens_exactly(src: torch.dtype, dst: torch.dtype) -> bool:
    """True when every ``src`` value is a ``dst`` value (bfloat16 or float16 to float32 or float64, float32 to float64)."""
    wider = {torch.bfloat16: (torch.float32, torch.float64), torch.float16: (torch.float32, torch.float64), torch.float32: (torch.float64,)}
    return dst in wider.get(src, ())


@register_lowering(aten.clone.default)
def _clone(ctx: LoweringContext, x: TensorValue, *, memory_format: Any = None) -> TensorValue:
    return make_pointwise(ctx, [x], lambda a: a, compute_dtype(x.dtype))
