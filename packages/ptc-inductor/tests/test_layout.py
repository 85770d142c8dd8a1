"""Channels-last layout in convolution graphs (``lowering/layout.py``): values, strides and where
copies go, on the C++ backend (layout forced on), the Triton backend under TRITON_INTERPRET=1, and
on CUDA (``gpu``: ``auto`` turns it on there)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from conftest import assert_meta_strides, trace_core  # noqa: E402

import ptc_inductor  # noqa: E402
from ptc_inductor.config import config_from_env  # noqa: E402
from ptc_inductor.ir import BufferArg, ExternNode  # noqa: E402
from ptc_inductor.lowering.layout import SAVED_INPUTS_KEY, SAVED_OUTPUTS_KEY, channels_last_strides, plan_layout  # noqa: E402
from ptc_inductor.scheduler import Kernel  # noqa: E402
from ptc_spec import TensorMeta  # noqa: E402
from ptc_spec.testing import assert_as_accurate_as_eager, compare_with_eager  # noqa: E402

aten = torch.ops.aten
CONV = aten.convolution.default
_ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


def _bn_eval(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inference batch norm as ptc-decomp writes it: per-channel (1, C, 1, 1) operands."""
    def ch(t: torch.Tensor) -> torch.Tensor:
        return aten.view.default(t, [1, -1] + [1] * (y.dim() - 2))

    norm = aten.mul.Tensor(aten.sub.Tensor(y, ch(mean)), ch(aten.rsqrt.default(aten.add.Tensor(var, 1e-5))))
    return aten.add.Tensor(aten.mul.Tensor(norm, ch(g)), ch(b))


def _relu(x: torch.Tensor) -> torch.Tensor:
    return aten.clamp.default(x, 0.0)


def residual_block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """conv3x3 -> BN -> ReLU -> conv1x1 -> BN -> + residual -> ReLU, and a batch-norm style
    per-channel sum of the second convolution (a reduction over N, H, W)."""
    y = _relu(_bn_eval(aten.convolution.default(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), mean, var, g, b))
    z = _bn_eval(aten.convolution.default(y, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1), mean, var, g, b)
    return _relu(aten.add.Tensor(z, y)), aten.sum.dim_IntList(z, [0, 2, 3])


def _block_inputs(dtype: torch.dtype, n: int = 2, c: int = 8, hw: int = 6, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(n, c, hw, hw), (c, c, 3, 3), (c, c, 1, 1), (c,), (c,), (c,), (c,)]
    ts = [torch.randn(s, generator=gen) for s in shapes]
    ts[4] = ts[4].abs() + 0.5
    return tuple(t.to(dtype).to(device) for t in ts)


def _compile(fn: Callable[..., Any], inputs: tuple[Any, ...], **config: Any) -> tuple[torch.fx.GraphModule, Any]:
    gm = trace_core(fn, *inputs)
    return gm, ptc_inductor.compile(gm, config=config_from_env(**config))


def _externs(compiled: Any, op: Any = CONV) -> list[ExternNode]:
    return [s for s in compiled.schedule.steps if isinstance(s, ExternNode) and s.op is op]


def _count_restrides(compiled: Any) -> list[int]:
    """Make the compiled wrapper count the copies it makes of inputs or extern results in a layout
    other than the compiled one (``_restride``); returns the live counter."""
    namespace = compiled.call.__globals__
    inner, calls = namespace["_restride"], [0]

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return inner(*args)

    namespace["_restride"] = counting
    return calls


def _tol(dtype: torch.dtype) -> dict[str, float]:
    # bf16: the compiled kernels keep float32 between ops where eager rounds after each one.
    return {"rtol": 5e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_residual_block_runs_channels_last_between_convolutions_on_cpp(dtype: torch.dtype) -> None:
    inputs = _block_inputs(dtype)
    gm, compiled = _compile(residual_block, inputs, layout_opt="on")
    restrides = _count_restrides(compiled)
    actual = compare_with_eager(compiled, residual_block, *inputs, **_tol(dtype))
    assert_meta_strides(gm, actual)  # graph outputs keep eager's (NCHW) strides
    assert restrides[0] == 0  # every extern result came back in the layout it was declared with
    first, second = _externs(compiled)
    for conv in (first, second):
        x_arg = conv.args[0]
        assert isinstance(x_arg, BufferArg) and x_arg.stride == channels_last_strides(x_arg.size)
        assert conv.outputs[0] is not None and conv.outputs[0].layout.stride == channels_last_strides(conv.outputs[0].layout.size)
    assert first.args[1].stride == channels_last_strides(first.args[1].size)  # the 3x3 weight, copied channels-last
    # Between the two convolutions runs only the BN-ReLU kernel, and it writes the second one's input.
    steps = list(compiled.schedule.steps)
    between = steps[steps.index(first) + 1 : steps.index(second)]
    assert len(between) == 1 and isinstance(between[0], Kernel)
    assert second.args[0].buffer in {b.name for n in between[0].nodes for b in n.outputs}
    assert any("clamp" in o for n in between[0].nodes for o in n.origins)


def test_layout_off_keeps_eager_strides_and_auto_is_off_on_cpu() -> None:
    inputs = _block_inputs(torch.float32)
    for mode in ("off", "auto"):
        _, compiled = _compile(residual_block, inputs, layout_opt=mode)
        first, _ = _externs(compiled)
        assert first.args[0].stride == (288, 36, 6, 1)


def _meta_block(device: str, dtype: torch.dtype = torch.float32, convs: int = 2) -> torch.fx.GraphModule:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(convs):
            x = _relu(aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        return x

    import ptc_spec

    return ptc_spec.trace(fn, TensorMeta.of((2, 8, 6, 6), dtype=dtype, device=device), TensorMeta.of((8, 8, 3, 3), dtype=dtype, device=device), dialect="core/1")


def test_auto_rule_turns_on_for_cuda_graphs_with_two_eligible_convolutions_in_inference_and_training() -> None:
    auto = config_from_env(layout_opt="auto")
    assert plan_layout(_meta_block("cuda"), auto).enabled
    assert not plan_layout(_meta_block("cuda", convs=1), auto).enabled
    assert not plan_layout(_meta_block("cuda", dtype=torch.float64), auto).enabled  # no channels-last fp64 kernels
    assert not plan_layout(_meta_block("cpu"), auto).enabled
    # Graphs of a training program (a forward saving values, a backward) too: a ResNet-50
    # training step runs faster channels-last on CUDA; ``off`` keeps eager's layout.
    for key in (SAVED_OUTPUTS_KEY, SAVED_INPUTS_KEY):
        training = _meta_block("cuda")
        training.meta[key] = 2
        assert plan_layout(training, auto).enabled
        assert not plan_layout(training, config_from_env(layout_opt="off")).enabled
    assert plan_layout(_meta_block("cpu", convs=1), config_from_env(layout_opt="on")).enabled
    assert config_from_env({"PTC_INDUCTOR_LAYOUT_OPT": "off"}).layout_opt == "off"
    with pytest.raises(ValueError, match="layout_opt 'nchw' is not one of auto, on, off"):
        config_from_env(layout_opt="nchw")


# (input shape, weight shape, stride, padding, groups): ResNet's and ConvNeXt's odd convolutions.
ODD_CONVS = {
    "stem_c3_7x7_s2": ((2, 3, 16, 16), (8, 3, 7, 7), 2, 3, 1),
    "1x1_s2": ((2, 8, 9, 9), (16, 8, 1, 1), 2, 0, 1),
    "depthwise_7x7": ((2, 8, 7, 7), (8, 1, 7, 7), 1, 3, 8),
    "grouped": ((2, 8, 6, 6), (8, 4, 3, 3), 1, 1, 2),
    "batch1": ((1, 8, 5, 5), (8, 8, 3, 3), 1, 1, 1),
    "to_1x1_spatial": ((2, 8, 4, 4), (8, 8, 4, 4), 1, 0, 1),
    "conv3d": ((2, 4, 4, 5, 5), (4, 4, 3, 3, 3), 1, 1, 1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", list(ODD_CONVS), ids=list(ODD_CONVS))
def test_odd_convolutions_match_eager_channels_last(case: str, dtype: torch.dtype) -> None:
    xs, ws, stride, pad, groups = ODD_CONVS[case]
    nd = len(xs) - 2
    gen = torch.Generator().manual_seed(1)
    x, w, w2 = torch.randn(xs, generator=gen).to(dtype), torch.randn(ws, generator=gen).to(dtype), torch.randn(ws[0], ws[0] // groups, *[1] * nd, generator=gen).to(dtype)
    bias = torch.randn(ws[0], generator=gen).to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        y = _relu(aten.convolution.default(x, w, bias, [stride] * nd, [pad] * nd, [1] * nd, False, [0] * nd, groups))
        return aten.mul.Tensor(aten.convolution.default(y, w2, None, [1] * nd, [0] * nd, [1] * nd, False, [0] * nd, groups), 2.0)

    gm, compiled = _compile(fn, (x, w, w2, bias), layout_opt="on")
    restrides = _count_restrides(compiled)
    actual = compare_with_eager(compiled, fn, x, w, w2, bias, **_tol(dtype))
    assert_meta_strides(gm, actual)
    # The library's own layout choice: each convolution result it returns in another layout than
    # channels-last is copied once (oneDNN without AVX-512 returns bf16 3-D convolutions NCDHW).
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    first = aten.convolution.default(x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt), bias, [stride] * nd, [pad] * nd, [1] * nd, False, [0] * nd, groups)
    second = aten.convolution.default(first.contiguous(memory_format=fmt), w2.contiguous(memory_format=fmt), None, [1] * nd, [0] * nd, [1] * nd, False, [0] * nd, groups)
    misses = sum(out.stride() != channels_last_strides(out.shape) and _differs(out.shape) for out in (first, second))
    assert restrides[0] == misses
    for conv in _externs(compiled):
        arg = conv.args[0]
        assert arg.stride == channels_last_strides(arg.size) or not _differs(arg.size)


def _differs(size: tuple[Any, ...]) -> bool:
    return size[1] != 1 and any(s != 1 for s in size[2:])


def _max_pool(x: torch.Tensor) -> torch.Tensor:
    """max_pool2d(3, 2, 1) as ptc-decomp writes it: pad, two unfolds, a copy, a max over the window."""
    n, c, h, w = x.shape
    p = aten.constant_pad_nd.default(x, [1, 1, 1, 1], float("-inf"))
    u = aten.unfold.default(aten.unfold.default(p, 2, 3, 2), 3, 3, 2)
    win = aten.clone.default(u, memory_format=torch.contiguous_format)
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    return aten.amax.default(aten.view.default(win, [n, c, ho, wo, 9]), [-1])


def test_pooling_between_convolutions_writes_channels_last_without_a_copy() -> None:
    gen = torch.Generator().manual_seed(2)
    x, w1, w2 = torch.randn(2, 8, 8, 8, generator=gen), torch.randn(8, 8, 3, 3, generator=gen), torch.randn(8, 8, 3, 3, generator=gen)

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        y = _max_pool(_relu(aten.convolution.default(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)))
        return aten.convolution.default(y, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)

    gm, compiled = _compile(fn, (x, w1, w2), layout_opt="on")
    actual = compare_with_eager(compiled, fn, x, w1, w2)
    assert_meta_strides(gm, actual)
    first, second = _externs(compiled)
    steps = list(compiled.schedule.steps)
    between = [s for s in steps[steps.index(first) + 1 : steps.index(second)] if isinstance(s, Kernel)]
    # One kernel: the pooling itself stores its (N, C, 4, 4) result channels-last for the next convolution.
    assert len(between) == 1 and second.args[0].stride == channels_last_strides((2, 8, 4, 4))
    assert any(n.is_reduction for n in between[0].nodes)


def _forward(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A training forward as ptc-aot splits it: the user's output, then the values saved for the backward."""
    a = aten.convolution.default(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    r = _relu(a)
    out = aten.convolution.default(r, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return out, x, r


def _backward(x: torch.Tensor, r: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The matching backward: (saved x, saved relu output, weights, tangent) -> (grad_x, grad_w1, grad_w2)."""
    g_r, g_w2, _ = aten.convolution_backward.default(grad, r, w2, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    g_a = aten.where.self(aten.le.Scalar(r, 0.0), aten.full.default([], 0.0, dtype=r.dtype), g_r)
    g_x, g_w1, _ = aten.convolution_backward.default(g_a, x, w1, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    return g_x, g_w1, g_w2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_saved_values_cross_channels_last_and_gradients_match_eager(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    x, w1, w2 = (torch.randn(s, generator=gen).to(dtype) for s in ((2, 4, 6, 6), (8, 4, 3, 3), (8, 8, 3, 3)))
    fw = trace_core(_forward, x, w1, w2)
    fw.meta[SAVED_OUTPUTS_KEY] = 2
    fwd = ptc_inductor.compile(fw, config=config_from_env(layout_opt="on"))
    out, saved_x, saved_r = fwd(x, w1, w2)
    assert out.stride() == (288, 36, 6, 1)  # the user's output: eager's strides
    assert saved_x.stride() == channels_last_strides(x.shape) and saved_r.stride() == channels_last_strides(saved_r.shape)
    grad = torch.randn(out.shape, generator=gen).to(dtype)
    eager_r = _relu(aten.convolution.default(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
    bw = trace_core(_backward, x, eager_r, w1, w2, grad)
    bw.meta[SAVED_INPUTS_KEY] = 2
    bwd = ptc_inductor.compile(bw, config=config_from_env(layout_opt="on"))
    restrides = _count_restrides(bwd)
    grads = bwd(saved_x, saved_r, w1, w2, grad)
    assert restrides[0] == 0  # the backward reads the saved values as the forward stored them

    def eager_step(dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
        leaves = [t.detach().to(dtype).requires_grad_() for t in (x, w1, w2)]
        y = torch.nn.functional.conv2d(torch.relu(torch.nn.functional.conv2d(leaves[0], leaves[1], padding=1)), leaves[2], padding=1)
        y.backward(grad.to(dtype))
        return y.detach(), [leaf.grad for leaf in leaves]

    expected, expected_grads = eager_step(dtype)
    for got, want in zip(grads, expected_grads):
        assert got.stride() == want.stride()
    if dtype == torch.float32:
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        for got, want in zip(grads, expected_grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        return
    # bf16: oneDNN's bf16 convolutions round differently per layout (on an AVX2-only CPU eager's
    # own NCHW and channels-last gradients differ by up to 1.5, each about 1.0 from float64),
    # so ptc is judged by its distance from float64, as eager is.
    reference, reference_grads = eager_step(torch.float64)
    assert_as_accurate_as_eager(out, expected, reference)
    for i, (got, want, ref) in enumerate(zip(grads, expected_grads, reference_grads)):
        assert_as_accurate_as_eager(got, want, ref, what=f"grad {i}")


def test_triton_backend_runs_the_block_channels_last_under_the_interpreter() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("forcing Triton for CPU tensors needs TRITON_INTERPRET=1")
    pytest.importorskip("triton")
    # 2 x 32 x 32 points per channel: the per-channel sum over a channels-last value is a column
    # sum in memory order, long enough to be split into partial sums.
    inputs = _block_inputs(torch.float32, n=2, c=8, hw=32)
    gm, compiled = _compile(residual_block, inputs, layout_opt="on", backend="triton")
    actual = compare_with_eager(compiled, residual_block, *inputs, rtol=1e-4, atol=1e-4)
    assert_meta_strides(gm, actual)
    first, second = _externs(compiled)
    assert first.args[0].stride == channels_last_strides(first.args[0].size)
    assert second.args[0].stride == channels_last_strides(second.args[0].size)
    sums = [n for k in compiled.schedule.kernels for n in k.nodes if n.is_reduction]
    assert len(sums) == 2 and sums[0].ranges[-1] == 8  # partial sums per (chunk, channel), then per channel


@pytest.mark.gpu
@pytest.mark.skipif(not _ON_GPU, reason="needs CUDA and TRITON_INTERPRET=0")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_auto_layout_on_cuda_passes_cudnn_channels_last_and_matches_eager(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # cuDNN runs float32 convolutions as TF32 by default, with other algorithms per layout: the
    # two layouts then differ by TF32's rounding (0.3 after BN and a second convolution on an
    # H200), which would hide a real layout error. Full float32 compares them exactly enough.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    inputs = _block_inputs(dtype, n=4, c=32, hw=16, device="cuda")
    gm, compiled = _compile(residual_block, inputs)  # layout_opt auto: two convolutions on CUDA
    restrides = _count_restrides(compiled)
    if dtype == torch.float32:
        actual = compare_with_eager(compiled, residual_block, *inputs, rtol=1e-4, atol=1e-4)
    else:
        # bf16: the block's outputs reach ~1000 and relu(z + y) cancels values that large, so one
        # rounding (ptc keeps float32 between the fused ops; eager rounds after each) moves an
        # element by up to 8 (both are that far from float64). Element-wise tolerances cannot
        # tell that from a layout error; the float64 reference can.
        actual = compiled(*inputs)
        expected = residual_block(*inputs)
        reference = residual_block(*(t.double() for t in inputs))
        for i, (a, e, r) in enumerate(zip(actual, expected, reference, strict=True)):
            assert_as_accurate_as_eager(a, e, r, what=f"output[{i}]")
    assert_meta_strides(gm, actual)
    assert restrides[0] == 0  # cuDNN returned the channels-last strides the lowering declared
    for conv in _externs(compiled):
        assert conv.args[0].stride == channels_last_strides(conv.args[0].size)
