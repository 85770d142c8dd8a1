"""Fallback nodes (core/2): an aten op outside the op set runs unfused, as its eager ATen kernel.

A fallback is an extern call like matmul: its tensor inputs are realized (lazy values stored,
views passed with their strides), and each tensor result is a buffer later kernels read.
Results that the schema says are views of an input (``Tensor(a)``) alias that input's
storage. We keep the alias rather than copy it (a copy of ``unfold``'s overlapping windows
can be far larger than its input): the memory plan keeps the viewed buffer alive, and out of
the reuse pool, for as long as the view is read or returned. Their strides are found by
running the op on meta tensors laid out as our buffers are, which may differ from eager's.

A node over complex values is lowered the same way even when it is not marked: the loop IR
has no complex type (neither the C++ nor the Triton kernels compute on complex numbers), so
the eager kernel computes it and only the real values around it are fused.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_spec import META_KEY, TensorMeta, fallback_problem, symbolic, symbolic_dispatch

from .. import sizes
from ..errors import LoweringError
from ..indexing import contiguous_strides
from ..ir import BufferArg, TensorValue
from ..sizes import Size
from .context import LoweringContext

AliasStrides = dict[int, tuple[tuple[Size, ...], tuple[str, ...]]]


def op_name(op: Any) -> str:
    """The qualified name of an aten overload, as the op sets write it (``aten.kthvalue.default``)."""
    return f"{op.namespace}.{op._schema.name.split('::', 1)[-1]}.{op._overloadname}"


_ANNOTATION = re.compile(r"^\w+\((\w+)(!?)")


def _return_alias_sets(op: Any) -> list[str | None]:
    """Per schema return, the alias set it views (``Tensor(a)`` -> "a"), or None for a fresh result.

    Read from the schema text: the Python binding shows no alias info for the elements of a
    list return (``split_with_sizes -> Tensor(a)[]``)."""
    text = str(op._schema).rsplit(") -> ", 1)[-1].strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    found: list[str | None] = []
    for item in text.split(","):
        match = _ANNOTATION.match(item.strip())
        found.append(match.group(1) if match and not match.group(2) else None)
    return found


def _aliased_outputs(op: Any, count: int) -> dict[int, set[str]]:
    """Output index -> the alias sets of the inputs it views (only outputs that are views)."""
    sets = _return_alias_sets(op)
    # A Tensor(a)[] result is one schema return spread over ``count`` outputs.
    per_output = sets * count if len(sets) == 1 else sets
    return {i: {a} for i, a in enumerate(per_output[:count]) if a is not None}


def _viewed_inputs(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], sets: set[str]) -> tuple[str, ...]:
    """The buffers of the arguments whose alias set is in ``sets``."""
    names: list[str] = []
    for i, arg in enumerate(op._schema.arguments):
        info = arg.alias_info
        if info is None or not (set(info.before_set) & sets):
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        names.extend(x.buffer for x in pytree.tree_leaves(value) if isinstance(x, BufferArg))
    return tuple(dict.fromkeys(names))


def _as_meta(ctx: LoweringContext, a: Any) -> Any:
    env = sizes.current()
    if isinstance(a, BufferArg):
        dtype = ctx.buffers[a.buffer].layout.dtype
        if env.dynamic:
            # Symbolic sizes stay symbolic (SymInts over the graph's SymbolEnv): the strides read
            # back hold at every size.
            return TensorMeta(a.size, a.stride, dtype, torch.device("meta")).to_meta_tensor(env=env.shape_env)
        return torch.empty_strided(a.size, a.stride, dtype=dtype, device="meta")
    if isinstance(a, torch.device):
        return torch.device("meta")
    if env.dynamic and isinstance(a, sympy.Basic):
        return symbolic(a, env.shape_env)
    return a


def _alias_strides(ctx: LoweringContext, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], count: int) -> AliasStrides | None:
    """Strides of every aliasing output as it views our buffers, or None when the op refuses their layout."""
    aliased = _aliased_outputs(op, count)
    if not aliased:
        return {}
    margs, mkwargs = pytree.tree_map(lambda a: _as_meta(ctx, a), (args, kwargs))
    env = sizes.current()
    try:
        with symbolic_dispatch(env.shape_env) if env.dynamic else contextlib.nullcontext():
            result = op(*margs, **mkwargs)
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        return None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    found: AliasStrides = {}
    for i, sets in aliased.items():
        out = results[i] if i < len(results) else None
        if isinstance(out, torch.Tensor):
            strides = TensorMeta.from_tensor(out).stride
            found[i] = (tuple(env.simplify(s) for s in strides), _viewed_inputs(op, args, kwargs, sets))
    return found


def _realize_args(ctx: LoweringContext, a: Any, contiguous: bool) -> Any:
    """``a`` with every TensorValue realized into a BufferArg (copied row-major when ``contiguous``)."""
    if isinstance(a, TensorValue):
        if contiguous and not _is_row_major(a):
            # A fresh value (no view) is stored into a new row-major buffer.
            a = TensorValue(a.dtype, a.device, a.size, a.loader)
        return ctx.as_arg(a)
    if isinstance(a, list):
        return [_realize_args(ctx, x, contiguous) for x in a]
    if isinstance(a, tuple):
        return tuple(_realize_args(ctx, x, contiguous) for x in a)
    return a


def _realize_all(ctx: LoweringContext, args: tuple[Any, ...], kwargs: dict[str, Any], contiguous: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _realize_args(ctx, args, contiguous), {k: _realize_args(ctx, v, contiguous) for k, v in kwargs.items()}


def _is_row_major(value: TensorValue) -> bool:
    if value.view is None:
        return True  # realizing a lazy value without strides gives a row-major buffer
    want = contiguous_strides(value.size)
    return all(n == 1 or sizes.equal(s, w) for n, s, w in zip(value.size, value.view.stride, want))


def _is_complex(x: Any) -> bool:
    if isinstance(x, (TensorValue, TensorMeta)):
        return x.dtype.is_complex
    if isinstance(x, torch.dtype):
        return x.is_complex
    return isinstance(x, complex)


def computes_on_complex(node: torch.fx.Node, args: Any, kwargs: Any) -> bool:
    """Whether ``node`` (an aten op that may run as a fallback) reads or makes a complex value."""
    if not isinstance(node.target, torch._ops.OpOverload) or fallback_problem(node.target) is not None:
        return False
    leaves = [*pytree.tree_leaves((args, kwargs)), *pytree.tree_leaves(node.meta.get(META_KEY))]
    return any(_is_complex(x) for x in leaves)


# Ops whose schema returns a new tensor while the kernel returns its input itself: c10d's
# wait_tensor hands back the tensor its collective writes. Planned as a view of that input, so
# the collective's buffer is neither freed nor reused while the waited result lives.
_RETURNS_ITS_INPUT = frozenset({"_c10d_functional.wait_tensor.default"})


def lower_fallback(ctx: LoweringContext, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], meta: Any) -> Any:
    """Lower a fallback node: one extern call of ``op``'s eager kernel; returns its results per ``meta``."""
    count = len(meta) if isinstance(meta, (tuple, list)) else 1
    cargs, ckwargs = _realize_all(ctx, args, kwargs, contiguous=False)
    first = cargs[0] if cargs else None
    if op_name(op) in _RETURNS_ITS_INPUT and isinstance(first, BufferArg):
        return ctx.add_extern(op, cargs, ckwargs, meta, fallback=True, alias_strides={0: (first.stride, (first.buffer,))})
    strides = _alias_strides(ctx, op, cargs, ckwargs, count)
    if strides is None:
        # A view op that refuses our layout of its input (view_as_real wants a unit last
        # stride): give it row-major copies, which every view op accepts.
        cargs, ckwargs = _realize_all(ctx, args, kwargs, contiguous=True)
        strides = _alias_strides(ctx, op, cargs, ckwargs, count)
        if strides is None:
            raise LoweringError(f"fallback {op_name(op)} refuses row-major inputs on meta tensors, so its output layout is unknown")
    return ctx.add_extern(op, cargs, ckwargs, meta, fallback=True, alias_strides=strides)
