"""Max pooling's indices cross to the backward as one byte a window, not eight.

``max_pool2d_with_indices`` returns, per output point, the int64 position of the window's
maximum in the input plane, and its backward reads them. Saved as they are, they cost eight
bytes an output point: ResNet-50's stem pool (b32) saved 49 MB of them, where the position
inside a window of ``kh * kw`` points fits in an int8. When only pooling backwards read the
indices, the joint graph gets the window offset (``(h - origin_h) / dil_h * kw + (w -
origin_w) / dil_w``, as int8) and the backward rebuilds the index from it and the window's
origin with pointwise ops, so the partitioner's cheapest cut saves the offsets.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
import torch.fx

from ptc_spec import META_KEY, TensorMeta, run_meta

aten = torch.ops.aten

log = logging.getLogger("ptc.aot.pool_offsets")


def save_pool_offsets(gm: torch.fx.GraphModule) -> int:
    """Route max pooling's indices to its backwards through int8 window offsets; return how many pools changed."""
    changed = 0
    for pool in list(gm.graph.nodes):
        if pool.op == "call_function" and pool.target is aten.max_pool2d_with_indices.default and _rewrite(gm.graph, pool):
            changed += 1
    if changed:
        gm.recompile()
    return changed


def _rewrite(graph: torch.fx.Graph, pool: torch.fx.Node) -> bool:
    indices = [u for u in pool.users if u.target is operator.getitem and u.args[1] == 1]
    if len(indices) != 1:
        log.debug("%s: %d index nodes", pool.name, len(indices))
        return False
    (index,) = indices
    readers = list(index.users)
    params = _pool_args(pool)
    # The index must reach nothing but backwards of a pool with these very windows, as their ``indices``.
    if not readers or any(
        r.target is not aten.max_pool2d_with_indices_backward.default or len(r.args) != 8 or r.args[7] is not index or _backward_args(r) != params
        for r in readers
    ):
        log.debug("%s: its indices are read by %s", pool.name, [f"{r.target}" for r in readers])
        return False
    x, meta = pool.args[0], index.meta.get(META_KEY)
    x_meta = x.meta.get(META_KEY) if isinstance(x, torch.fx.Node) else None
    if not isinstance(meta, TensorMeta) or not isinstance(x_meta, TensorMeta) or meta.dtype != torch.int64:
        log.debug("%s: no int64 index metadata", pool.name)
        return False
    if not all(isinstance(s, int) for s in (*meta.shape, *x_meta.shape)):
        log.debug("%s: symbolic sizes %s", pool.name, x_meta.shape)
        return False  # the window origins would need symbolic aranges
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
    if kh * kw > 127:
        return False
    width, out_h, out_w = int(x_meta.shape[-1]), int(meta.shape[-2]), int(meta.shape[-1])
    emit = _Emitter(graph, meta.device)
    with graph.inserting_before(index.next):  # (inserting_after would put each new call first)
        # Each output point's window starts at (row0, col0) of the unpadded input plane.
        row0 = emit(aten.view.default, emit(aten.sub.Scalar, emit(aten.mul.Scalar, emit.arange(out_h), sh), ph), [out_h, 1])
        col0 = emit(aten.sub.Scalar, emit(aten.mul.Scalar, emit.arange(out_w), sw), pw)
        rows = emit(aten.div.Scalar_mode, emit(aten.sub.Tensor, emit(aten.div.Scalar_mode, index, width, rounding_mode="floor"), row0), dh, rounding_mode="floor")
        cols = emit(aten.div.Scalar_mode, emit(aten.sub.Tensor, emit(aten.remainder.Scalar, index, width), col0), dw, rounding_mode="floor")
        offsets = emit(aten._to_copy.default, emit(aten.add.Tensor, emit(aten.mul.Scalar, rows, kw), cols), dtype=torch.int8)
    first = min(readers, key=_position(graph))
    with graph.inserting_before(first):
        # int8 offsets meet the int64 origins: the index is int64 again, with no conversion op.
        row = emit(aten.add.Tensor, row0, emit(aten.mul.Scalar, emit(aten.div.Scalar_mode, offsets, kw, rounding_mode="floor"), dh))
        col = emit(aten.add.Tensor, col0, emit(aten.mul.Scalar, emit(aten.remainder.Scalar, offsets, kw), dw))
        rebuilt = emit(aten.add.Tensor, emit(aten.mul.Scalar, row, width), col)
    for reader in readers:
        reader.replace_input_with(index, rebuilt)
    return True


def _backward_args(backward: torch.fx.Node) -> tuple[tuple[int, int], ...]:
    """(kernel, stride, padding, dilation) of a ``max_pool2d_with_indices_backward`` call."""
    args = list(backward.args)
    kernel = _pair(args[2], (1, 1))
    return kernel, _pair(args[3], kernel), _pair(args[4], (0, 0)), _pair(args[5], (1, 1))


def _pool_args(pool: torch.fx.Node) -> tuple[tuple[int, int], ...]:
    """(kernel, stride, padding, dilation) of a ``max_pool2d_with_indices`` call, defaults filled in."""
    args = list(pool.args) + [None] * (6 - len(pool.args))
    names = ("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
    for i, name in enumerate(names):
        if name in pool.kwargs:
            args[i] = pool.kwargs[name]
    kernel = _pair(args[1], (1, 1))
    return kernel, _pair(args[2], kernel), _pair(args[3], (0, 0)), _pair(args[4], (1, 1))


def _pair(value: Any, default: tuple[int, int]) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return default
    if isinstance(value, int):
        return value, value
    return (int(value[0]), int(value[0])) if len(value) == 1 else (int(value[0]), int(value[1]))


def _position(graph: torch.fx.Graph) -> Any:
    order = {n: i for i, n in enumerate(graph.nodes)}
    return order.__getitem__


class _Emitter:
    """Adds calls at the graph's insertion point, each with the metadata eager gives on the device."""

    def __init__(self, graph: torch.fx.Graph, device: torch.device) -> None:
        self.graph, self.device = graph, device

    def arange(self, n: int) -> torch.fx.Node:
        return self(aten.arange.start_step, 0, n, 1, dtype=torch.int64, device=self.device)

    def __call__(self, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> torch.fx.Node:
        def meta_value(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                return a.meta[META_KEY].to_meta_tensor()
            if isinstance(a, torch.device):
                return torch.device("meta")
            return a

        # run_meta: the layout and dtype eager gives on the graph's device, as for every other node.
        result = run_meta(op, tuple(meta_value(a) for a in args), {k: meta_value(v) for k, v in kwargs.items()}, self.device)
        node = self.graph.call_function(op, args, kwargs)
        node.meta[META_KEY] = TensorMeta.from_tensor(result, device=self.device)
        return node
