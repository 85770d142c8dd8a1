"""Results of common ops over symbolic meta tensors, without torch's Python reference kernels.

Under the Python dispatcher (``symbolic_dispatch``), an op on meta tensors with symbolic sizes
runs torch's Python reference implementation: broadcasting, type promotion and the output
layout computed through hundreds of SymInt operations, milliseconds per op. A symbolic compile
of a transformer spent most of its meta time there.

For the common cases the answer is simpler. A pointwise op whose tensor operands are all
contiguous with the default strides of their shapes gives (in eager, TensorIterator's rule) a
contiguous result of the broadcast shape; layer norm, matmuls, sum/mean, embedding and view have
shape rules just as short. A result's dtype never depends on sizes. So: the shapes come from the
rule, which must need no guard (operand sizes that the kernel checks must be equal as
expressions; otherwise the reference kernel decides, and records its guard); the op runs once
on plain meta tensors at the example sizes (the C++ meta kernel: microseconds), which gives the
dtypes and confirms the shapes and the contiguous layout; and the results are empty meta tensors
of the symbolic shapes (a view's is a view of its operand). Anything outside these cases (other layouts, data-dependent sizes,
in-place or multi-output pointwise ops) runs the reference kernel as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .symnode import SymNode

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
_NOT_HANDLED = object()


class MetaRulesMode(TorchDispatchMode):
    """Answers the ops of the rules below directly where they apply; passes every other call on."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        rule = _RULES.get(func)
        if rule is None and _is_plain_pointwise(func):
            rule = _pointwise_result
        if rule is not None:
            out = rule(func, args, kwargs)
            if out is not _NOT_HANDLED:
                return out
        return func(*args, **kwargs)


_PLAIN: dict[Any, bool] = {}


def _is_plain_pointwise(func: Any) -> bool:
    """Pointwise, one fresh tensor result, no argument written (not in-place, no out=)."""
    found = _PLAIN.get(func)
    if found is None:
        schema = func._schema
        found = (
            torch.Tag.pointwise in func.tags
            and len(schema.returns) == 1
            and schema.returns[0].alias_info is None
            and str(schema.returns[0].type) == "Tensor"
            and not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        )
        _PLAIN[func] = found
    return found


def _backed(value: Any) -> bool:
    node = value.node
    return isinstance(node, SymNode) and node.has_hint()


def _same(a: Any, b: Any) -> bool:
    """Whether two sizes are the same for every input (structurally equal expressions)."""
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return bool(a.node.expr == b.node.expr)
    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        return False
    return bool(a == b)


def _never_one(size: torch.SymInt) -> bool:
    """Whether a symbolic size is above 1 for every allowed input (so it never broadcasts)."""
    node = size.node
    return node.env.statically_known(sympy.Gt(node.expr, 1)) is True


def _all_same(a: tuple[Any, ...] | list[Any], b: tuple[Any, ...] | list[Any]) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def _default_strides(shape: tuple[Any, ...]) -> list[Any]:
    strides: list[Any] = []
    expected: Any = 1
    for size in reversed(shape):
        strides.append(expected)
        expected = expected * size
    strides.reverse()
    return strides


def _hint(value: Any) -> Any:
    if isinstance(value, _SYM):
        return value.node.hint
    return value


def _pointwise_result(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not _symbolic_and_backed(leaves, tensors):
        return _NOT_HANDLED
    if not all(_default_contiguous(t) for t in tensors):
        return _NOT_HANDLED
    out_shape = _broadcast([tuple(t.shape) for t in tensors])
    if out_shape is None:
        return _NOT_HANDLED
    return _lifted(func, args, kwargs, [out_shape])


def _symbolic_and_backed(leaves: list[Any], tensors: list[torch.Tensor]) -> bool:
    """Plain meta tensors, some size symbolic, and every symbol with an example value."""
    if not tensors or any(type(t) is not torch.Tensor or not t.is_meta for t in tensors):
        return False
    symbolic = False
    values = [*leaves, *(s for t in tensors for s in (*t.shape, *t.stride(), t.storage_offset()))]
    for x in values:
        if isinstance(x, _SYM):
            if not _backed(x):
                return False
            symbolic = True
    # Without symbols the C++ meta kernel answers as fast as this would.
    return symbolic


def _default_contiguous(t: torch.Tensor) -> bool:
    shape = tuple(t.shape)
    return t.storage_offset() == 0 and all(_same(a, b) for a, b in zip(t.stride(), _default_strides(shape)))


def _lifted(func: Any, args: Any, kwargs: dict[str, Any], shapes: list[tuple[Any, ...]]) -> Any:
    """Fresh contiguous results of ``shapes`` with the dtypes ``func`` gives at the example sizes,
    or _NOT_HANDLED when that run disagrees with the shapes or gives another layout."""

    def concrete(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided([_hint(s) for s in x.shape], [_hint(s) for s in x.stride()], dtype=x.dtype, device="meta")
        return _hint(x)

    c_args, c_kwargs = pytree.tree_map(concrete, (args, kwargs))
    try:
        with torch._C._DisablePythonDispatcher():
            example = func(*c_args, **c_kwargs)
    except Exception:
        return _NOT_HANDLED  # the reference kernel raises the op's own error, or handles it
    examples = list(example) if isinstance(example, (tuple, list)) else [example]
    if len(examples) != len(shapes):
        return _NOT_HANDLED
    results = []
    for ex, shape in zip(examples, shapes):
        if not isinstance(ex, torch.Tensor) or tuple(ex.shape) != tuple(_hint(s) for s in shape):
            return _NOT_HANDLED
        strides = _default_strides(shape)
        if ex.storage_offset() != 0 or ex.stride() != tuple(_hint(s) for s in strides):
            return _NOT_HANDLED
        results.append(torch.empty_strided(shape, strides, dtype=ex.dtype, device="meta"))
    return tuple(results) if isinstance(example, (tuple, list)) else results[0]


def _broadcast(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The broadcast shape, or None when deciding it would need a guard (two different symbolic sizes)."""
    ndim = max(len(s) for s in shapes)
    out: list[Any] = []
    for d in range(ndim):
        found: Any = 1
        for shape in shapes:
            i = d - (ndim - len(shape))
            if i < 0:
                continue
            size = shape[i]
            if not isinstance(size, torch.SymInt) and size == 1:
                continue  # a broadcast dim
            if isinstance(size, torch.SymInt) and not _never_one(size):
                return None
            if not isinstance(found, torch.SymInt) and found == 1:
                found = size
            elif not _same(found, size):
                return None
        out.append(found)
    return tuple(out)


# -- ops with a shape rule: the result's symbolic shapes from the operands' -------------------
# Each rule returns the results, or _NOT_HANDLED for the reference kernel to answer. Results
# are checked against the op's own run at the example sizes (shapes, strides) by _lifted.
aten = torch.ops.aten
Rule = Callable[[Any, Any, dict[str, Any]], Any]


def _operands(args: Any, kwargs: dict[str, Any], contiguous: bool) -> list[torch.Tensor] | None:
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not _symbolic_and_backed(leaves, tensors):
        return None
    if contiguous and not all(_default_contiguous(t) for t in tensors):
        return None
    return tensors


def _layer_norm(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # native_layer_norm(input, normalized_shape, weight, bias, eps): the output has the input's
    # shape; mean and rstd keep the leading dims and have size 1 in the normalized ones.
    if _operands(args, kwargs, contiguous=True) is None:
        return _NOT_HANDLED
    x, normalized = args[0], list(args[1])
    shape = tuple(x.shape)
    axis = len(shape) - len(normalized)
    # The kernel checks these sizes; here they must hold as expressions, so no guard is skipped.
    params = [p for p in args[2:4] if isinstance(p, torch.Tensor)]
    if axis < 0 or not _all_same(shape[axis:], normalized) or not all(_all_same(tuple(p.shape), normalized) for p in params):
        return _NOT_HANDLED
    stats = (*shape[:axis], *([1] * len(normalized)))
    return _lifted(func, args, kwargs, [shape, stats, stats])


def _matmul(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # The product is a fresh contiguous tensor whatever the operands' layouts.
    if _operands(args, kwargs, contiguous=False) is None:
        return _NOT_HANDLED
    a, b = (args[1], args[2]) if func is aten.addmm.default else (args[0], args[1])
    if a.dim() != b.dim() or a.dim() != (3 if func is aten.bmm.default else 2):
        return _NOT_HANDLED
    # The kernel checks that the operands fit; here they must fit as expressions.
    if not _same(a.shape[-1], b.shape[-2]) or (func is aten.bmm.default and not _same(a.shape[0], b.shape[0])):
        return _NOT_HANDLED
    shape = (*a.shape[:-1], b.shape[-1])
    if func is aten.addmm.default and _broadcast([tuple(args[0].shape), shape]) is None:
        return _NOT_HANDLED
    return _lifted(func, args, kwargs, [shape])


def _reduction(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # sum/mean over dims of a contiguous input: the kept dims in order (size 1 with keepdim).
    if _operands(args, kwargs, contiguous=True) is None:
        return _NOT_HANDLED
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    ndim = x.dim()
    reduced = set(range(ndim)) if not dims else {d % ndim for d in dims} if ndim else set()
    shape = tuple((1 if i in reduced else s) for i, s in enumerate(x.shape) if keepdim or i not in reduced)
    return _lifted(func, args, kwargs, [shape])


def _embedding(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    if _operands(args, kwargs, contiguous=False) is None:
        return _NOT_HANDLED
    weight, indices = args[0], args[1]
    if weight.dim() != 2:
        return _NOT_HANDLED
    return _lifted(func, args, kwargs, [(*indices.shape, weight.shape[1])])


def _view(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # view of a contiguous tensor: a contiguous view of the new shape (eager's strides there),
    # when the element counts are equal as expressions (no guard is needed to know it).
    if kwargs or _operands(args, kwargs, contiguous=True) is None:
        return _NOT_HANDLED
    x, requested = args[0], list(args[1])
    numel = math.prod(x.shape)
    free = [i for i, s in enumerate(requested) if not isinstance(s, torch.SymInt) and s == -1]
    if len(free) > 1:
        return _NOT_HANDLED
    if free:
        rest = math.prod(requested[: free[0]] + requested[free[0] + 1 :])
        if not isinstance(rest, torch.SymInt) and rest == 0:
            return _NOT_HANDLED
        requested[free[0]] = numel // rest
    if not _same(math.prod(requested), numel):
        return _NOT_HANDLED
    shape = tuple(requested)
    strides = _default_strides(shape)
    try:
        with torch._C._DisablePythonDispatcher():
            example = func(torch.empty_strided([_hint(s) for s in x.shape], [_hint(s) for s in x.stride()], dtype=x.dtype, device="meta"),
                           [_hint(s) for s in shape])
    except Exception:
        return _NOT_HANDLED  # the reference kernel raises the op's own error
    if example.stride() != tuple(_hint(s) for s in strides):
        return _NOT_HANDLED
    return x.as_strided(shape, strides, 0)


_RULES: dict[Any, Rule] = {
    aten.native_layer_norm.default: _layer_norm,
    aten.mm.default: _matmul,
    aten.addmm.default: _matmul,
    aten.bmm.default: _matmul,
    aten.sum.dim_IntList: _reduction,
    aten.mean.dim: _reduction,
    aten.embedding.default: _embedding,
    aten.view.default: _view,
}
