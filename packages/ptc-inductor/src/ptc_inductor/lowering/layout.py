"""Channels-last layout for convolution graphs: which values are stored NHWC (NDHWC) instead of
eager's NCHW, and the convolution lowerings that hand cuDNN / oneDNN channels-last tensors.

cuDNN's tensor-core convolutions (fp16, bf16, and fp32 as TF32) work in NHWC: handed NCHW
tensors they transpose the input and the output around every call (the backward also its
grads). Storing activations channels-last between convolutions removes those transposes; the
kernels between convolutions (batch norm, ReLU, residual adds, pooling) read and write NHWC too,
so no copy sits between two convolutions. Only the graph's boundary keeps eager's strides: its
inputs, and its outputs (a user may ``.view()`` them) are copied where they differ.

The rule (``auto``): a CUDA graph with at least ``MIN_CONVS`` eligible convolutions, forward or
backward, counted together. Each convolution saves about two transposing passes over its
activations (its input and its output); the layout costs at most one transposing copy per
activation crossing the graph's boundary, and a chain of convolutions has about two of those
(the image in, the features out). With one convolution the two balance, so it is left alone.
A convolution is eligible on a 4-D or 5-D input of float16, bfloat16 or float32 (neither cuDNN
nor oneDNN has channels-last float64 kernels: aten would run NCHW and the declared strides
would be wrong) with more than one channel and more than one spatial point (otherwise NCHW and
channels-last are the same memory order), and not transposed (left as eager runs it).
Training programs count too: timm's ResNet-50 training step (b32, H200) runs channels-last in
17.2 ms against 21.7 ms in eager's layout in float32 (torch.compile: 16.5 ms), and in bf16 uses
7.6 ms of GPU time a step against 10.4 ms. (An earlier ptc ran the float32 step slower
channels-last, 35.1 against 26.8 ms for torch.compile, before the batch-norm reductions and the
running statistics' in-place writes were fixed.)

On CPU ``auto`` is off. Measured on the 2-core development machine (transformers' ResNet-50,
fp32): inference batch 4 runs 1.21x faster channels-last (1629 vs 1977 ms; oneDNN's convolutions
gain), batch 1 the same (726 vs 714 ms), but a training step (batch 2) 0.63x as fast (5621 vs
3533 ms): the C++ kernels sum batch-norm statistics over a channels-last value column by column,
with strided loads, and saved values cross to the backward in eager's layout. ``on`` forces it.

Training: ptc-aot splits a program into a forward returning (user outputs, saved values) and a
backward taking (saved values, tangents). When the graphs say how many of their outputs
(``SAVED_OUTPUTS_KEY``) or inputs (``SAVED_INPUTS_KEY``) are saved values, those cross
channels-last whenever they are 4-D/5-D tensors of an eligible dtype whose layouts differ
(both sides apply the same rule, so the backward reads them without a copy). Without the keys
every output and input keeps eager's strides; the compiled wrapper copies any input that
arrives in another layout, so a disagreement costs a copy, never a wrong value.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ptc_spec import META_KEY, TensorMeta, is_fallback

from .. import sizes
from ..config import Config
from ..ir import TensorValue
from ..sizes import Size
from .context import LoweringContext
from .extern import extern_args
from .registry import EXTERN_OPS

aten = torch.ops.aten

SAVED_OUTPUTS_KEY = "ptc_saved_outputs"
"""``GraphModule.meta`` key: how many of a forward graph's last outputs are values saved for the
backward (internal to ptc, so their strides are free); absent means none."""
SAVED_INPUTS_KEY = "ptc_saved_inputs"
"""``GraphModule.meta`` key: how many of a backward graph's first inputs are saved values."""

MIN_CONVS = 2
LAYOUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

CONVOLUTION = aten.convolution.default
CONVOLUTION_BACKWARD = aten.convolution_backward.default
_CONV_ARGS = {CONVOLUTION: (0, 1), CONVOLUTION_BACKWARD: (0, 1, 2)}
"""Per convolution op, the tensor arguments passed channels-last (input and weight; grad_output too)."""
_CONV_INPUT = {CONVOLUTION: 0, CONVOLUTION_BACKWARD: 1}
_TRANSPOSED = {CONVOLUTION: 6, CONVOLUTION_BACKWARD: 7}

# Ops that keep a value's (batch, channel) leading dims in place while they only re-index it: a
# value computed from one of their results is computed from the channels-last value beneath.
_PASS_THROUGH = frozenset({aten.alias.default, aten.slice.Tensor, aten.unfold.default, aten.clone.default, aten.view.default})
_VIEW_OPS = frozenset({
    aten.alias.default, aten.slice.Tensor, aten.unfold.default, aten.view.default, aten.permute.default,
    aten.expand.default, aten.squeeze.dims, aten.unsqueeze.default, aten.select.int, aten.as_strided.default,
})


def channels_last_strides(size: Sequence[Size]) -> tuple[Size, ...]:
    """Strides of a channels-last (4-D) or channels-last-3d (5-D) tensor of ``size``, as
    ``torch.empty(size, memory_format=...)`` makes them (channels innermost, then W, H (, D), N)."""
    strides: list[Size] = [0] * len(size)
    strides[1] = 1
    running: Size = size[1]
    for d in range(len(size) - 1, 1, -1):
        strides[d] = running
        running = sizes.normalize(running * size[d])
    strides[0] = running
    return tuple(strides)


def differs(size: Sequence[Size]) -> bool:
    """True when channels-last is another memory order than row-major for a tensor of ``size``:
    4-D or 5-D, more than one channel and more than one spatial point (a symbolic size is >= 2)."""
    return len(size) in (4, 5) and size[1] != 1 and any(s != 1 for s in size[2:]) and all(s != 0 for s in size)


def _tensor_meta(node: Any) -> TensorMeta | None:
    meta = node.meta.get(META_KEY) if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, TensorMeta) else None


def _eligible_conv(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _CONV_ARGS or is_fallback(node):
        return False
    x = _tensor_meta(node.args[_CONV_INPUT[node.target]])
    if x is None or x.dtype not in LAYOUT_DTYPES or not differs(x.shape):
        return False
    return not bool(node.args[_TRANSPOSED[node.target]])


def cross_channels_last(meta: Any) -> bool:
    """True when a saved value of ``meta`` crosses between forward and backward channels-last."""
    return isinstance(meta, TensorMeta) and meta.dtype in LAYOUT_DTYPES and differs(meta.shape)


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    """The layout decision of one graph: off, or which nodes' values are stored channels-last.

    ``convs`` take channels-last arguments and return channels-last results; ``channels_last``
    names every node whose value is stored so (convolution results, what is computed from them,
    saved inputs); ``saved_inputs``/``saved_outputs`` count the graph's saved values."""

    enabled: bool = False
    convs: frozenset[str] = frozenset()
    channels_last: frozenset[str] = frozenset()
    saved_inputs: int = 0
    saved_outputs: int = 0


def plan_layout(gm: torch.fx.GraphModule, config: Config) -> LayoutPlan:
    """Decide whether ``gm`` runs channels-last (``config.layout_opt`` and the rule above), and where."""
    if config.layout_opt == "off":
        return LayoutPlan()
    convs = [n for n in gm.graph.nodes if _eligible_conv(n)]
    if not convs:
        return LayoutPlan()
    if config.layout_opt == "auto":
        x = _tensor_meta(convs[0].args[_CONV_INPUT[convs[0].target]])
        if len(convs) < MIN_CONVS or x is None or x.device.type != "cuda":
            return LayoutPlan()
    saved_inputs = int(gm.meta.get(SAVED_INPUTS_KEY, 0))
    saved_outputs = int(gm.meta.get(SAVED_OUTPUTS_KEY, 0))
    marked: set[torch.fx.Node] = set()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders[:saved_inputs]:
        if cross_channels_last(_tensor_meta(node)):
            marked.add(node)
    conv_set = set(convs)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        meta = _tensor_meta(node)
        if node in conv_set:
            if node.target is CONVOLUTION and meta is not None and differs(meta.shape):
                marked.add(node)
        elif node.target is operator.getitem:
            base = node.args[0]
            # convolution_backward's grad_input is an activation; its grad_weight is not.
            if base in conv_set and node.args[1] == 0 and meta is not None and differs(meta.shape):
                marked.add(node)
        elif _follows(node, meta, marked):
            marked.add(node)
    return LayoutPlan(True, frozenset(n.name for n in convs), frozenset(n.name for n in marked), saved_inputs, saved_outputs)


def _follows(node: torch.fx.Node, meta: TensorMeta | None, marked: set[torch.fx.Node]) -> bool:
    """True when ``node`` computes (not views) a channels-last-able value from a marked one with
    the same batch and channel dims."""
    if meta is None or not differs(meta.shape) or node.target in _VIEW_OPS or node.target in EXTERN_OPS or is_fallback(node):
        return False
    for arg in node.all_input_nodes:
        source = _source(arg)
        src_meta = _tensor_meta(source)
        if source in marked and src_meta is not None and all(sizes.equal(a, b) for a, b in zip(src_meta.shape[:2], meta.shape[:2])):
            return True
    return False


def _source(node: torch.fx.Node) -> torch.fx.Node:
    """The value beneath a chain of re-indexing ops that keep the (batch, channel) dims first."""
    while node.op == "call_function" and node.target in _PASS_THROUGH and isinstance(node.args[0], torch.fx.Node):
        base, meta, base_meta = node.args[0], _tensor_meta(node), _tensor_meta(node.args[0])
        if meta is None or base_meta is None or len(meta.shape) < 2 or len(base_meta.shape) < 2:
            break
        if not all(sizes.equal(a, b) for a, b in zip(meta.shape[:2], base_meta.shape[:2])):
            break
        node = base
    return node


def conv_output_meta(op: Any, meta: Any) -> Any:
    """``meta`` with the strides aten returns for channels-last arguments: channels-last results
    (the backward's grad_input and grad_weight), as cuDNN and oneDNN allocate them, even where
    the shape leaves both layouts one memory order (a 1x1 kernel's grad_weight)."""
    if op is CONVOLUTION:
        return dataclasses.replace(meta, stride=channels_last_strides(meta.shape))
    grads = list(meta)
    for i in (0, 1):
        m = grads[i]
        if isinstance(m, TensorMeta) and len(m.shape) in (4, 5):
            grads[i] = dataclasses.replace(m, stride=channels_last_strides(m.shape))
    return type(meta)(grads)


def lower_convolution(ctx: LoweringContext, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A convolution (or its backward) called on channels-last input, weight (and grad_output).

    A weight is a graph input in eager's layout: it is copied channels-last on every call (one
    pass over the weights, e.g. 100 MB for ResNet-50 in fp32, about 0.07 ms on an H100), which
    cuDNN would otherwise do inside the call, since it runs both in one layout."""
    lowered: list[Any] = []
    for i, a in enumerate(args):
        if i in _CONV_ARGS[op] and isinstance(a, TensorValue):
            lowered.append(ctx.as_strided_arg(a, channels_last_strides(a.size)) if len(a.size) in (4, 5) else ctx.as_arg(a))
        else:
            lowered.append(extern_args(ctx, a))
    return ctx.add_extern(op, tuple(lowered), {k: extern_args(ctx, v) for k, v in kwargs.items()}, conv_output_meta(op, ctx.meta))
