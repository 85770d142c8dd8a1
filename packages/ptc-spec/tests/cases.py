"""Functions traced by the tracer and serialization tests: (name, fn, input metas)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ptc_spec import TensorMeta

M = TensorMeta.of
f32, f64, bf16, i64, b8 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _conv_bn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4).eval(), torch.nn.ReLU())


_MLP = _mlp()
_CONV = _conv_bn()

Case = tuple[str, Callable[..., Any], tuple[Any, ...]]

CASES: list[Case] = [
    # pointwise, unary
    ("abs", torch.abs, (M((5, 3)),)),
    ("neg", torch.neg, (M((5, 3)),)),
    ("exp", torch.exp, (M((5, 3)),)),
    ("log_abs", lambda x: torch.log(x.abs() + 1), (M((5, 3)),)),
    ("sqrt_abs", lambda x: x.abs().sqrt(), (M((4,)),)),
    ("rsqrt", lambda x: (x.abs() + 0.5).rsqrt(), (M((4, 2)),)),
    ("sin_cos", lambda x: x.sin() * x.cos(), (M((3, 3)),)),
    ("tanh", torch.tanh, (M((7,)),)),
    ("sigmoid", torch.sigmoid, (M((2, 5)),)),
    ("erf", torch.erf, (M((6,)),)),
    ("floor_ceil", lambda x: x.floor() + x.ceil(), (M((6,)),)),
    ("round", torch.round, (M((6,)),)),
    ("sign", torch.sign, (M((6,)),)),
    ("reciprocal", lambda x: (x.abs() + 1).reciprocal(), (M((6,)),)),
    ("relu", F.relu, (M((4, 4)),)),
    ("gelu", F.gelu, (M((4, 4)),)),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), (M((4, 4)),)),
    ("silu", F.silu, (M((4, 4)),)),
    ("softplus", F.softplus, (M((4, 4)),)),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), (M((4, 4)),)),
    ("hardswish", F.hardswish, (M((4, 4)),)),
    ("bitwise_not", torch.bitwise_not, (M((5,), i64),)),
    ("logical_not", torch.logical_not, (M((5,), b8),)),
    # pointwise, binary and scalars
    ("add", torch.add, (M((3, 4)), M((3, 4)))),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), (M((3, 4)), M((4,)))),
    ("sub_scalar", lambda a: a - 3, (M((3, 4)),)),
    ("rsub", lambda a: 1 - a, (M((3, 4)),)),
    ("mul_broadcast", torch.mul, (M((3, 1)), M((1, 4)))),
    ("div", lambda a, b: a / (b.abs() + 1), (M((3, 4)), M((3, 4)))),
    ("floor_divide", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"), (M((3, 4)), M((3, 4)))),
    ("remainder_int", lambda a: a % 3, (M((8,), i64),)),
    ("pow_scalar", lambda a: a**2, (M((3, 4)),)),
    ("pow_tensor", lambda a, b: a.abs() ** b, (M((3, 4)), M((3, 4)))),
    ("maximum", torch.maximum, (M((3, 4)), M((3, 4)))),
    ("minimum_bf16", torch.minimum, (M((3, 4), bf16), M((3, 4), bf16))),
    ("atan2", torch.atan2, (M((3,)), M((3,)))),
    ("int_float_promotion", lambda a, b: a + b, (M((4,), i64), M((4,), f32))),
    ("mixed_precision", lambda a, b: a * b, (M((4,), bf16), M((4,), f32))),
    ("bitwise_and", torch.bitwise_and, (M((4,), i64), M((4,), i64))),
    # comparison and logical
    ("eq", torch.eq, (M((4, 4)), M((4, 4)))),
    ("lt_scalar", lambda a: a < 0.5, (M((4, 4)),)),
    ("ge_int", lambda a, b: a >= b, (M((4,), i64), M((4,), i64))),
    ("logical_and", torch.logical_and, (M((4,), b8), M((4,), b8))),
    ("where", lambda c, a, b: torch.where(c, a, b), (M((4, 4), b8), M((4, 4)), M((4, 4)))),
    ("where_scalar", lambda a: torch.where(a > 0, a, 0.0), (M((4, 4)),)),
    ("clamp", lambda a: a.clamp(-0.5, 0.5), (M((4, 4)),)),
    ("clamp_min", lambda a: a.clamp(min=0), (M((4, 4)),)),
    ("isnan", torch.isnan, (M((4,)),)),
    ("masked_fill", lambda a: a.masked_fill(a > 0, -1.0), (M((3, 3)),)),
    # casts
    ("to_dtype", lambda a: a.to(torch.float64), (M((3, 3)),)),
    ("to_int", lambda a: (a * 10).to(torch.int32), (M((3, 3)),)),
    ("bool_to_float", lambda a: a.float(), (M((3,), b8),)),
    ("type_as", lambda a, b: a.type_as(b), (M((3,), i64), M((3,), f64))),
    # reductions
    ("sum", torch.sum, (M((4, 5)),)),
    ("sum_dim_keep", lambda a: a.sum(dim=1, keepdim=True), (M((4, 5)),)),
    ("sum_int", lambda a: a.sum(), (M((4, 5), i64),)),
    ("mean", lambda a: a.mean(dim=(0, 2)), (M((3, 4, 5)),)),
    ("var", lambda a: a.var(dim=-1), (M((3, 8)),)),
    ("std_mean", lambda a: torch.std_mean(a, dim=0), (M((6, 2)),)),
    ("amax", lambda a: a.amax(dim=1), (M((3, 4)),)),
    ("max_dim", lambda a: a.max(dim=1), (M((3, 4)),)),
    ("argmax", lambda a: a.argmax(dim=-1), (M((3, 4)),)),
    ("prod", lambda a: a.prod(dim=0), (M((3, 4)),)),
    ("any", lambda a: (a > 0).any(dim=1), (M((3, 4)),)),
    ("all", lambda a: (a > -10).all(), (M((3, 4)),)),
    ("logsumexp", lambda a: a.logsumexp(dim=1), (M((3, 4)),)),
    ("cumsum", lambda a: a.cumsum(dim=1), (M((3, 4)),)),
    ("softmax", lambda a: a.softmax(dim=-1), (M((3, 7)),)),
    ("log_softmax", lambda a: F.log_softmax(a, dim=0), (M((3, 7)),)),
    ("norm", lambda a: a.norm(dim=-1), (M((3, 7)),)),
    # views and layout
    ("view", lambda a: a.view(2, 6), (M((3, 4)),)),
    ("reshape_transposed", lambda a: a.t().reshape(12), (M((3, 4)),)),
    ("permute", lambda a: a.permute(2, 0, 1), (M((2, 3, 4)),)),
    ("transpose_contiguous", lambda a: a.transpose(0, 1).contiguous(), (M((2, 3)),)),
    ("expand", lambda a: a.expand(3, 4), (M((1, 4)),)),
    ("squeeze_unsqueeze", lambda a: a.squeeze(1).unsqueeze(0), (M((3, 1, 4)),)),
    ("slice_step", lambda a: a[1:, ::2], (M((4, 6)),)),
    ("select", lambda a: a[:, 2], (M((4, 6)),)),
    ("getitem_ellipsis_none", lambda a: a[..., None, 1], (M((2, 3, 4)),)),
    ("narrow", lambda a: a.narrow(1, 1, 2), (M((3, 4)),)),
    ("cat", lambda a, b: torch.cat([a, b], dim=1), (M((2, 3)), M((2, 5)))),
    ("stack", lambda a, b: torch.stack([a, b]), (M((2, 3)), M((2, 3)))),
    ("split", lambda a: a.split(2, dim=1), (M((3, 5)),)),
    ("chunk", lambda a: torch.chunk(a, 3, dim=0), (M((6, 2)),)),
    ("unbind", lambda a: a.unbind(1), (M((2, 3)),)),
    ("flatten", lambda a: a.flatten(1), (M((2, 3, 4)),)),
    ("repeat", lambda a: a.repeat(2, 3), (M((2, 3)),)),
    ("flip", lambda a: a.flip(0), (M((3, 4)),)),
    ("roll", lambda a: a.roll(1, dims=1), (M((3, 4)),)),
    ("tril", lambda a: a.tril(), (M((4, 4)),)),
    ("pad", lambda a: F.pad(a, (1, 2)), (M((3, 4)),)),
    ("as_strided", lambda a: a.as_strided((2, 2), (1, 2)), (M((4,)),)),
    # indexing
    ("index_tensor", lambda a, i: a[i.remainder(5)], (M((5, 3)), M((4,), i64))),
    ("gather", lambda a, i: a.gather(1, i.clamp(0, 2).abs()), (M((4, 3)), M((4, 2), i64))),
    ("index_select", lambda a, i: a.index_select(0, i.abs().clamp(max=4)), (M((5, 3)), M((3,), i64))),
    ("embedding", lambda w, i: F.embedding(i.abs(), w), (M((10, 4)), M((2, 3), i64))),
    ("one_hot", lambda i: F.one_hot(i.abs(), 9), (M((5,), i64),)),
    ("scatter_add", lambda a, i, s: a.scatter_add(0, i.abs().clamp(max=2), s), (M((3, 4)), M((2, 4), i64), M((2, 4)))),
    # creation (inside the function)
    ("zeros_like", lambda a: torch.zeros_like(a) + a, (M((3, 4)),)),
    ("full", lambda a: a + torch.full((3, 4), 2.5), (M((3, 4)),)),
    ("arange", lambda a: a + torch.arange(4), (M((3, 4)),)),
    ("tensor_constant", lambda a: a * torch.tensor([1.0, 2.0, 3.0, 4.0]), (M((3, 4)),)),
    ("new_ones", lambda a: a.new_ones(2, 2), (M((3, 4)),)),
    # linear algebra and layers
    ("matmul", torch.matmul, (M((3, 4)), M((4, 5)))),
    ("bmm", torch.bmm, (M((2, 3, 4)), M((2, 4, 5)))),
    ("linear", lambda x, w, b: F.linear(x, w, b), (M((3, 4)), M((5, 4)), M((5,)))),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), (M((3, 6)), M((6,)), M((6,)))),
    ("group_norm", lambda x: F.group_norm(x, 2), (M((2, 4, 3)),)),
    ("mlp_module", _MLP, (M((3, 8)),)),
    ("conv_bn_relu", _CONV, (M((2, 3, 5, 5)),)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), (M((1, 2, 4, 4)),)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2), (M((1, 2, 4, 4)),)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1), (M((1, 2, 4, 4)),)),
    ("interpolate_nearest", lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), (M((1, 2, 3, 3)),)),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (M((1, 2, 4, 8)),) * 3),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t.abs().clamp(max=4)), (M((3, 5)), M((3,), i64))),
    ("mse_loss", F.mse_loss, (M((3, 5)), M((3, 5)))),
    # nested inputs and outputs
    ("nested_io", lambda xs, d: {"sum": xs[0] + xs[1], "scaled": [d["w"] * 2, None, 3]}, ([M((2,)), M((2,))], {"w": M((2,))})),
]


# -- symbolic sizes ---------------------------------------------------------------------------
# (name, fn, inputs as (shape, dims made dynamic, dtype)): traced once with those dims symbolic,
# then run at other sizes. Grown dims keep their parity, so guards such as "s1 is even" hold.
Dyn = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
SymbolicCase = tuple[str, Callable[..., Any], tuple[Dyn, ...]]

_W = torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1))
_EMB = torch.randn(10, 4, generator=torch.Generator().manual_seed(2))


def D(shape: tuple[int, ...], dims: tuple[int, ...], dtype: torch.dtype = f32) -> Dyn:
    return (shape, dims, dtype)


SYMBOLIC_CASES: list[SymbolicCase] = [
    ("broadcast_add", lambda a, b: a + b, (D((6, 5), (0, 1)), D((5,), (0,)))),
    ("outer_mul", lambda a, b: a * b, (D((6, 1), (0,)), D((1, 5), (1,)))),
    ("where", lambda a, b: torch.where(a > 0, a, b), (D((6, 5), (0, 1)), D((6, 5), (0, 1)))),
    ("sum_mean_var", lambda a: a.sum(1) + a.mean(0).sum() + a.var(1), (D((6, 5), (0, 1)),)),
    ("amax_argmax", lambda a: (a.amax(0), a.argmax(1)), (D((6, 5), (0, 1)),)),
    ("mm", lambda a, b: a @ b, (D((6, 5), (0,)), D((5, 3), (1,)))),
    ("bmm", torch.bmm, (D((3, 6, 5), (0, 1)), D((3, 5, 4), (0, 2)))),
    ("matmul_broadcast", lambda a, b: a @ b, (D((3, 6, 5), (0, 1)), D((5, 4), ()))),
    ("view_from_sizes", lambda a: a.view(a.shape[0], 5, -1) * 2, (D((6, 10), (0,)),)),
    ("view_arithmetic", lambda a: a.reshape(a.size(0) * a.size(1) // 2, 2), (D((6, 4), (0, 1)),)),
    ("reshape_transposed", lambda a: a.t().reshape(-1), (D((6, 5), (0, 1)),)),
    ("permute_contiguous", lambda a: a.permute(2, 0, 1).contiguous(), (D((6, 5, 3), (0, 1)),)),
    ("expand_to_other", lambda a, b: a.expand(b.shape[0], -1) + b, (D((1, 5), (1,)), D((6, 5), (0, 1)))),
    ("cat_split", lambda a, b: torch.cat([a, b], 1).split(2, 1), (D((6, 5), (0,)), D((6, 3), (0,)))),
    ("cat_dynamic", lambda a, b: torch.cat([a, b, a], 0), (D((6, 5), (0, 1)), D((4, 5), (0, 1)))),
    ("chunk", lambda a: a.chunk(2, 0)[1] + 1, (D((6, 5), (0, 1)),)),
    ("pad_slice", lambda a: F.pad(a, (1, 2, 0, 3))[1:, ::2], (D((6, 5), (0, 1)),)),
    ("select_index", lambda a, i: a[:, -1] + a[i].sum(0), (D((6, 6), (0, 1)), D((4,), (0,), i64))),
    ("conv2d", lambda a: F.conv2d(a, _W, stride=2, padding=1), (D((2, 3, 9, 8), (0, 2, 3)),)),
    ("max_pool_interpolate", lambda a: F.interpolate(F.max_pool2d(a, 2), scale_factor=2), (D((2, 3, 6, 8), (0, 2, 3)),)),
    ("softmax", lambda a: a.softmax(-1) + F.log_softmax(a, 0), (D((6, 5), (0, 1)),)),
    ("layer_norm_bf16", lambda a: F.layer_norm(a.to(bf16), (5,)), (D((3, 6, 5), (0, 1)),)),
    ("softmax_fp16", lambda a: a.half().softmax(0), (D((6, 5), (0, 1)),)),
    ("embedding", lambda i: F.embedding(i, _EMB), (D((3, 6), (0, 1), i64),)),
    (
        "sdpa",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        (D((2, 2, 6, 4), (0, 2)), D((2, 2, 7, 4), (0, 2)), D((2, 2, 7, 4), (0, 2))),
    ),
    ("arange_new_zeros", lambda a: a[:, :2] + torch.arange(a.shape[0]).unsqueeze(1) + a.new_zeros(a.shape[0], 2), (D((6, 5), (0, 1)),)),
    ("cumsum_topk", lambda a: a.cumsum(1).topk(2, dim=1).values, (D((6, 5), (0, 1)),)),
    ("size_results", lambda a: (a * 2, a.shape[0] * a.shape[1] + 1, a.shape[1] / 2), (D((6, 5), (0, 1)),)),
]
