"""Regenerate tests/fixtures: core/1 graphs of real layers, forward and backward.

Until ptc-decomp lands, the layers are written directly in core/1 ops and traced with
ptc_spec.trace; once it does, this tool belongs in the repo's tools/ and should run the
full pipeline instead. Run: ``python tools/make_inductor_fixtures.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import ptc_spec
from ptc_spec import TensorMeta

aten = torch.ops.aten
CPU = torch.device("cpu")
OUT = Path(__file__).resolve().parent.parent / "packages" / "ptc-inductor" / "tests" / "fixtures"


def t(*shape: int, dtype: torch.dtype = torch.float32) -> TensorMeta:
    return TensorMeta.of(shape, dtype)


def linear(x: Any, w: Any, b: Any) -> Any:
    return aten.addmm.default(b, x, aten.permute.default(w, [1, 0]))


def gelu_tanh(h: Any) -> Any:
    inner = aten.mul.Tensor(aten.add.Tensor(h, aten.mul.Tensor(aten.pow.Tensor_Scalar(h, 3), 0.044715)), math.sqrt(2 / math.pi))
    return aten.mul.Tensor(aten.mul.Tensor(h, 0.5), aten.add.Tensor(aten.tanh.default(inner), 1.0))


def softmax(x: Any) -> Any:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))


def layer_norm(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
    n = x.shape[-1]
    mean = aten.div.Tensor(aten.sum.dim_IntList(x, [-1], True), n)
    d = aten.sub.Tensor(x, mean)
    var = aten.div.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(d, d), [-1], True), n)
    rstd = aten.rsqrt.default(aten.add.Tensor(var, 1e-5))
    return aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(d, rstd), w), b), mean, rstd


def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    return linear(gelu_tanh(linear(x, w1, b1)), w2, b2)


def mlp_backward(g: Any, x: Any, w1: Any, b1: Any, w2: Any) -> tuple[Any, ...]:
    h = linear(x, w1, b1)
    a = gelu_tanh(h)
    grad_w2 = aten.mm.default(aten.permute.default(g, [1, 0]), a)
    grad_b2 = aten.sum.dim_IntList(g, [0])
    grad_a = aten.mm.default(g, w2)
    # d gelu_tanh / dh, written out.
    k = math.sqrt(2 / math.pi)
    u = aten.mul.Tensor(aten.add.Tensor(h, aten.mul.Tensor(aten.pow.Tensor_Scalar(h, 3), 0.044715)), k)
    th = aten.tanh.default(u)
    du = aten.mul.Tensor(aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(h, h), 3 * 0.044715), 1.0), k)
    sech2 = aten.add.Tensor(aten.neg.default(aten.mul.Tensor(th, th)), 1.0)
    dgelu = aten.add.Tensor(aten.mul.Tensor(aten.add.Tensor(th, 1.0), 0.5), aten.mul.Tensor(aten.mul.Tensor(aten.mul.Tensor(h, 0.5), sech2), du))
    grad_h = aten.mul.Tensor(grad_a, dgelu)
    grad_w1 = aten.mm.default(aten.permute.default(grad_h, [1, 0]), x)
    grad_x = aten.mm.default(grad_h, w1)
    return grad_x, grad_w1, aten.sum.dim_IntList(grad_h, [0]), grad_w2, grad_b2


def attention_block(x: Any, wqkv: Any, bqkv: Any, wo: Any, bo: Any, lw: Any, lb: Any) -> Any:
    b, s, d = x.shape
    heads, hd = 4, d // 4
    flat = aten.view.default(x, [b * s, d])
    qkv = aten.view.default(linear(flat, wqkv, bqkv), [b, s, 3, heads, hd])
    qkv = aten.permute.default(qkv, [2, 0, 3, 1, 4])

    def part(i: int) -> Any:
        p = aten.select.int(qkv, 0, i)
        return aten.view.default(aten.clone.default(p, memory_format=torch.contiguous_format), [b * heads, s, hd])

    q, k, v = part(0), part(1), part(2)
    scores = aten.mul.Tensor(aten.bmm.default(q, aten.permute.default(k, [0, 2, 1])), 1 / math.sqrt(hd))
    mask = aten.ge.Tensor(aten.unsqueeze.default(aten.arange.start_step(0, s, 1, dtype=torch.int64, device=CPU), 1),
                          aten.arange.start_step(0, s, 1, dtype=torch.int64, device=CPU))
    scores = aten.where.self(mask, scores, aten.full.default([], -1e9, dtype=torch.float32, device=CPU))
    ctxv = aten.bmm.default(softmax(scores), v)
    merged = aten.permute.default(aten.view.default(ctxv, [b, heads, s, hd]), [0, 2, 1, 3])
    ctxv = aten.view.default(aten.clone.default(merged, memory_format=torch.contiguous_format), [b * s, d])
    out = aten.view.default(linear(ctxv, wo, bo), [b, s, d])
    return layer_norm(aten.add.Tensor(x, out), lw, lb)[0]


def softmax_backward(g: Any, y: Any) -> Any:
    return aten.mul.Tensor(y, aten.sub.Tensor(g, aten.sum.dim_IntList(aten.mul.Tensor(g, y), [-1], True)))


def layer_norm_backward(g: Any, x: Any, mean: Any, rstd: Any, w: Any) -> tuple[Any, Any, Any]:
    n = x.shape[-1]
    xhat = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
    gx = aten.mul.Tensor(g, w)
    a = aten.sum.dim_IntList(gx, [-1], True)
    bsum = aten.sum.dim_IntList(aten.mul.Tensor(gx, xhat), [-1], True)
    inner = aten.sub.Tensor(aten.sub.Tensor(aten.mul.Tensor(gx, n), a), aten.mul.Tensor(xhat, bsum))
    grad_x = aten.mul.Tensor(aten.div.Tensor(rstd, n), inner)
    return grad_x, aten.sum.dim_IntList(aten.mul.Tensor(g, xhat), [0]), aten.sum.dim_IntList(g, [0])


def conv_bn_relu(x: Any, w: Any, mean: Any, var: Any, gamma: Any, beta: Any) -> Any:
    y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)

    def chan(v: Any) -> Any:
        return aten.view.default(v, [1, -1, 1, 1])

    scale = aten.mul.Tensor(aten.rsqrt.default(aten.add.Tensor(var, 1e-5)), gamma)
    z = aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(y, chan(mean)), chan(scale)), chan(beta))
    return aten.maximum.default(z, aten.full.default([], 0.0, dtype=torch.float32, device=CPU))


def relu_conv_backward(g: Any, y: Any) -> Any:
    return aten.where.self(aten.gt.Scalar(y, 0.0), g, aten.full.default([], 0.0, dtype=torch.float32, device=CPU))


FIXTURES: dict[str, tuple[Callable[..., Any], tuple[TensorMeta, ...]]] = {
    "mlp": (mlp, (t(64, 128), t(256, 128), t(256), t(128, 256), t(128))),
    "mlp_backward": (mlp_backward, (t(64, 128), t(64, 128), t(256, 128), t(256), t(128, 256))),
    "attention_block": (attention_block, (t(2, 16, 64), t(192, 64), t(192), t(64, 64), t(64), t(64), t(64))),
    "layer_norm": (layer_norm, (t(128, 256), t(256), t(256))),
    "layer_norm_backward": (layer_norm_backward, (t(128, 256), t(128, 256), t(128, 1), t(128, 1), t(256))),
    "softmax": (softmax, (t(128, 500),)),
    "softmax_backward": (softmax_backward, (t(128, 500), t(128, 500))),
    "conv_bn_relu": (conv_bn_relu, (t(2, 3, 16, 16), t(8, 3, 3, 3), t(8), t(8), t(8), t(8))),
    "relu_backward": (relu_conv_backward, (t(2, 8, 16, 16), t(2, 8, 16, 16))),
    "layer_norm_bf16": (layer_norm, (t(64, 256, dtype=torch.bfloat16), t(256, dtype=torch.bfloat16), t(256, dtype=torch.bfloat16))),
}


def main() -> None:
    """Trace every fixture to core/1 and save it."""
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (fn, metas) in FIXTURES.items():
        gm = ptc_spec.trace(fn, *metas, dialect="core/1")
        ptc_spec.check(gm, "core/1")
        ptc_spec.save(gm, OUT / f"{name}.ptcg")


if __name__ == "__main__":
    main()
