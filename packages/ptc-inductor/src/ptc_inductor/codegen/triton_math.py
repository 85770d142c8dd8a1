"""The math of the Triton backend: one entry per ``ops.*`` op, and the jitted helpers they call.

Each entry maps operand names and their (common) compute dtype to a Triton expression;
``PRELUDE`` is the source of the helpers every generated module starts with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Unary = Callable[[str, torch.dtype], str]
Binary = Callable[[str, str, torch.dtype], str]


def _f(name: str) -> Unary:
    return lambda x, dt: f"{name}({x})"


def _is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point


UNARY: dict[str, Unary] = {
    "exp": _f("tl.exp"),
    "exp2": _f("tl.exp2"),
    "expm1": _f("libdevice.expm1"),
    "log": _f("tl.log"),
    "log2": _f("tl.log2"),
    "log10": _f("libdevice.log10"),
    "log1p": _f("libdevice.log1p"),
    "sqrt": _f("libdevice.sqrt"),
    "rsqrt": _f("libdevice.rsqrt"),
    "reciprocal": lambda x, dt: f"(1.0 / {x})",
    "sin": _f("tl.sin"),
    "cos": _f("tl.cos"),
    "tan": _f("libdevice.tan"),
    "asin": _f("libdevice.asin"),
    "acos": _f("libdevice.acos"),
    "atan": _f("libdevice.atan"),
    "sinh": _f("libdevice.sinh"),
    "cosh": _f("libdevice.cosh"),
    "tanh": _f("libdevice.tanh"),
    "asinh": _f("libdevice.asinh"),
    "acosh": _f("libdevice.acosh"),
    "atanh": _f("libdevice.atanh"),
    "sigmoid": lambda x, dt: f"(1.0 / (1.0 + tl.exp(-{x})))",
    "erf": _f("libdevice.erf"),
    "erfc": _f("libdevice.erfc"),
    "erfinv": _f("libdevice.erfinv"),
    "lgamma": _f("libdevice.lgamma"),
    "digamma": _f("ptc_digamma"),
    "i0": _f("libdevice.cyl_bessel_i0"),
    "frac": lambda x, dt: f"({x} - libdevice.trunc({x}))",
    "abs": lambda x, dt: x if dt == torch.bool else f"tl.abs({x})",
    "neg": lambda x, dt: f"(-{x})",
    "sign": lambda x, dt: x if dt == torch.bool else f"ptc_sign({x})",
    "bitwise_not": lambda x, dt: f"({x} == 0)" if dt == torch.bool else f"(~{x})",
    "floor": lambda x, dt: f"tl.floor({x})" if _is_float(dt) else x,
    "ceil": lambda x, dt: f"tl.ceil({x})" if _is_float(dt) else x,
    "round": lambda x, dt: f"libdevice.nearbyint({x})" if _is_float(dt) else x,
    "trunc": lambda x, dt: f"libdevice.trunc({x})" if _is_float(dt) else x,
    "signbit": lambda x, dt: f"(libdevice.signbit({x}) != 0)" if _is_float(dt) else f"({x} < 0)",
    "isnan": lambda x, dt: f"({x} != {x})" if _is_float(dt) else f"({x} != {x})",
    "isinf": lambda x, dt: f"(tl.abs({x}) == float(\"inf\"))" if _is_float(dt) else f"({x} != {x})",
    "logical_not": lambda x, dt: f"({x} == 0)",
    "relu": lambda x, dt: f"ptc_maximum({x}, 0)" if _is_float(dt) else f"tl.maximum({x}, 0)",
}


def _minmax(name: str) -> Binary:
    def emit(a: str, b: str, dt: torch.dtype) -> str:
        if dt == torch.bool:
            return f"({a} | {b})" if name == "maximum" else f"({a} & {b})"
        return f"ptc_{name}({a}, {b})" if _is_float(dt) else f"tl.{name}({a}, {b})"

    return emit


def _floordiv(a: str, b: str, dt: torch.dtype) -> str:
    return f"tl.floor({a} / {b})" if _is_float(dt) else f"ptc_floordiv_int({a}, {b})"


def _remainder(a: str, b: str, dt: torch.dtype) -> str:
    return f"ptc_remainder_float({a}, {b})" if _is_float(dt) else f"ptc_remainder_int({a}, {b})"


def _pow(a: str, b: str, dt: torch.dtype) -> str:
    if _is_float(dt):
        return f"libdevice.pow({a}, {b})"
    # Integer powers go through float64, exact for every result that fits in 53 bits.
    return f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64)).to({a}.dtype)"


def _shift(left: bool) -> Binary:
    def emit(a: str, b: str, dt: torch.dtype) -> str:
        bits = dt.itemsize * 8
        shifted = f"({a} << {b})" if left else f"({a} >> {b})"
        # Shifting by the width or more is undefined in hardware; eager gives 0 (or -1 for
        # a negative value shifted right).
        out = "0" if left else f"tl.where({a} < 0, -1, 0)"
        return f"tl.where(({b} < 0) | ({b} >= {bits}), {out}, {shifted})"

    return emit


BINARY: dict[str, Binary] = {
    "add": lambda a, b, dt: f"({a} | {b})" if dt == torch.bool else f"({a} + {b})",
    "sub": lambda a, b, dt: f"({a} - {b})",
    "mul": lambda a, b, dt: f"({a} & {b})" if dt == torch.bool else f"({a} * {b})",
    "truediv": lambda a, b, dt: f"({a} / {b})",
    "floordiv": _floordiv,
    "truncdiv": lambda a, b, dt: f"libdevice.trunc({a} / {b})" if _is_float(dt) else f"({a} // {b})",
    "remainder": _remainder,
    "fmod": lambda a, b, dt: f"libdevice.fmod({a}, {b})" if _is_float(dt) else f"({a} % {b})",
    "pow": _pow,
    "maximum": _minmax("maximum"),
    "minimum": _minmax("minimum"),
    "atan2": lambda a, b, dt: f"libdevice.atan2({a}, {b})",
    "copysign": lambda a, b, dt: f"libdevice.copysign({a}, {b})",
    "nextafter": lambda a, b, dt: f"libdevice.nextafter({a}, {b})",
    "bitwise_and": lambda a, b, dt: f"({a} & {b})",
    "bitwise_or": lambda a, b, dt: f"({a} | {b})",
    "bitwise_xor": lambda a, b, dt: f"({a} ^ {b})",
    "left_shift": _shift(True),
    "right_shift": _shift(False),
    # CUDA's libdevice has no fmax/fmin (the interpreter's does): a NaN operand yields the other.
    "fmax": lambda a, b, dt: f"tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, tl.maximum({a}, {b})))" if _is_float(dt) else f"tl.maximum({a}, {b})",
    "fmin": lambda a, b, dt: f"tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, tl.minimum({a}, {b})))" if _is_float(dt) else f"tl.minimum({a}, {b})",
    "hypot": lambda a, b, dt: f"libdevice.hypot({a}, {b})",
    "logaddexp": lambda a, b, dt: f"ptc_logaddexp({a}, {b})",
    "heaviside": lambda a, b, dt: f"tl.where({a} == 0, {b}, ({a} > 0).to({b}.dtype))",
    "eq": lambda a, b, dt: f"({a} == {b})",
    "ne": lambda a, b, dt: f"({a} != {b})",
    "lt": lambda a, b, dt: f"({a} < {b})",
    "le": lambda a, b, dt: f"({a} <= {b})",
    "gt": lambda a, b, dt: f"({a} > {b})",
    "ge": lambda a, b, dt: f"({a} >= {b})",
    "logical_and": lambda a, b, dt: f"(({a} != 0) & ({b} != 0))",
    "logical_or": lambda a, b, dt: f"(({a} != 0) | ({b} != 0))",
    "logical_xor": lambda a, b, dt: f"(({a} != 0) ^ ({b} != 0))",
}

BOOL_RESULT = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf", "signbit"}
)
"""Ops whose result is bool whatever their operands."""


PRELUDE = '''
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def ptc_maximum(a, b):
    # Eager's maximum propagates NaN; the hardware max does not.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def ptc_minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def ptc_round_bf16(x):
    # Rounds float32 to the nearest bfloat16 (ties to even), kept in float32.
    return x.to(tl.bfloat16).to(tl.float32)


@triton.jit
def ptc_add(a, b):
    return a + b


@triton.jit
def ptc_mul(a, b):
    return a * b


@triton.jit
def ptc_sign(x):
    # NaN stays NaN (x != x); 0 stays 0.
    s = (x > 0).to(x.dtype) - (x < 0).to(x.dtype)
    return tl.where(x != x, x, s)


@triton.jit
def ptc_floordiv_int(a, b):
    q = a // b
    fix = ((a % b) != 0) & ((a < 0) != (b < 0))
    return q - fix.to(q.dtype)


@triton.jit
def ptc_remainder_int(a, b):
    m = a % b
    fix = (m != 0) & ((m < 0) != (b < 0))
    return tl.where(fix, m + b, m)


@triton.jit
def ptc_remainder_float(a, b):
    m = libdevice.fmod(a, b)
    fix = (m != 0) & ((m < 0) != (b < 0))
    return tl.where(fix, m + b, m)


@triton.jit
def ptc_logaddexp(a, b):
    m = tl.maximum(a, b)
    d = tl.abs(a - b)
    out = m + libdevice.log1p(tl.exp(-d))
    return tl.where((a == b) & (tl.abs(a) == float("inf")), a, out)


@triton.jit
def ptc_digamma(x):
    # Reflection for x < 0, recurrence up to x >= 6, then the asymptotic series.
    neg = x < 0
    y = tl.where(neg, 1.0 - x, x)
    r = tl.zeros_like(y)
    for _ in tl.static_range(6):
        small = y < 6
        r = tl.where(small, r - 1.0 / y, r)
        y = tl.where(small, y + 1.0, y)
    f = 1.0 / (y * y)
    series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))))
    out = r + tl.log(y) - 0.5 / y - series
    # A bare literal would be a float32 constant; near the poles its error is amplified.
    pi = tl.full([], 3.141592653589793, x.dtype)
    out = tl.where(neg, out - pi / libdevice.tan(pi * x), out)
    out = tl.where(neg & (x == tl.floor(x)), float("nan"), out)
    return tl.where(x == 0, tl.where(libdevice.signbit(x) != 0, float("inf"), float("-inf")), out)


@triton.jit
def ptc_arg_combine(va, ia, vb, ib, IS_MAX: tl.constexpr):
    # The first index of the extreme value wins; NaN counts as the extreme, as in eager.
    a_nan = va != va
    b_nan = vb != vb
    if IS_MAX:
        better = va > vb
    else:
        better = va < vb
    tie = (va == vb) | (a_nan & b_nan)
    pick_a = (a_nan & ~b_nan) | (~a_nan & ~b_nan & better) | (tie & (ia < ib))
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@triton.jit
def ptc_argmax_combine(va, ia, vb, ib):
    return ptc_arg_combine(va, ia, vb, ib, True)


@triton.jit
def ptc_argmin_combine(va, ia, vb, ib):
    return ptc_arg_combine(va, ia, vb, ib, False)


@triton.jit
def ptc_welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Chan et al.'s parallel merge; an empty side (n == 0) contributes nothing.
    n = n_a + n_b
    w = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    d = mean_b - mean_a
    return mean_a + d * w, m2_a + m2_b + d * d * n_a * w, n
'''
