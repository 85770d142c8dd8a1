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

Concrete sizes have a cost of their own. torch registers its Python reference kernels
as the meta kernels of most pointwise ops, in place of the C++ ones, and those run through a
wrapper that disables Dynamo and imports torch's Dynamo compiler on its first call:
a second of a cold compile spent loading the compiler ptc replaces. :func:`plain_meta`
answers those ops (and the few others common models reach) itself where the answer is certain,
and :class:`PlainMetaMode` applies it to the ops a torch-level call dispatches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from .dispatch_mode import DispatchMode
from .symnode import SymNode

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
_NOT_HANDLED = object()
NOT_HANDLED = _NOT_HANDLED
"""What :func:`plain_meta` returns for a call it leaves to the op's own meta kernel."""


class MetaRulesMode(DispatchMode):
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


class PlainMetaMode(DispatchMode):
    """Answers ops on meta tensors of concrete sizes with :func:`plain_meta` where it can (no Python
    reference kernel, so no import of torch's Dynamo compiler); passes every other call on."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        # Below autograd's dispatch: autograd gives the result its history afterwards.
        out = plain_meta(func, args, kwargs, below_autograd=True)
        if out is _NOT_HANDLED:
            return func(*args, **kwargs)
        return out


# Arguments that choose the result's layout or place: a call that passes one is left to its kernel.
_PLACEMENT = frozenset({"memory_format", "layout", "device", "pin_memory"})
_PYTHON_POINTWISE: dict[Any, bool] = {}


def _python_pointwise(func: Any) -> bool:
    """Pointwise, fresh result, and torch's meta kernel for it is a Python reference kernel."""
    found = _PYTHON_POINTWISE.get(func)
    if found is None:
        found = (
            isinstance(func, torch._ops.OpOverload)
            and _is_plain_pointwise(func)
            # A random op would draw from the CPU generator, moving eager's random stream.
            and torch.Tag.nondeterministic_seeded not in func.tags
            and torch._C.DispatchKey.Meta in func.py_kernels
            and not any(a.name in _PLACEMENT for a in func._schema.arguments)
        )
        _PYTHON_POINTWISE[func] = found
    return found


def plain_meta(func: Any, args: Any, kwargs: dict[str, Any], below_autograd: bool = False) -> Any:
    """The meta result of ``func`` over meta tensors of concrete sizes, computed without torch's
    Python meta kernel, or NOT_HANDLED where no rule here is certain to give the same result.

    The rules cover pointwise ops and the few others common models reach (matmul with bias,
    layer and batch norm and their gradients, mean, softmax, tril, cat), each where the result
    layout is certain: contiguous, or a batch norm's channels-last input kept. For a
    pointwise op that needs operands with the default strides of their shapes: the reference
    kernels order the result's dims by comparing operand strides
    (``compute_elementwise_output_logical_to_physical_perm``, eager's TensorIterator rule), and
    default strides never rank a later dim before an earlier one (they only tie, where a dim is
    broadcast or of size 1). Result dtypes come from running the op on one-element CPU tensors
    of the operands' dtypes and ranks (a zero-dim operand promotes differently from a
    dimensioned one), microseconds in C++; the norms' statistics, whose dtype differs by device,
    follow their meta kernels' rule instead. Any other case, an error included, is NOT_HANDLED:
    the op's own meta kernel then answers or raises.
    """
    rule = _PLAIN_RULES.get(func)
    if rule is None:
        if not _python_pointwise(func):
            return _NOT_HANDLED
        rule = _plain_pointwise
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not tensors or any(isinstance(x, _SYM) for x in leaves):
        return _NOT_HANDLED
    if any(type(t) is not torch.Tensor or not t.is_meta for t in tensors):
        return _NOT_HANDLED
    if any(isinstance(s, _SYM) for t in tensors for s in (*t.shape, *t.stride())) or any(t.numel() == 0 for t in tensors):
        return _NOT_HANDLED  # symbolic sizes have their rules above; empty tensors their kernels
    if not below_autograd and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        # Called outside autograd's dispatch (ptc-spec's tracer), a fresh result would lose requires_grad.
        return _NOT_HANDLED
    return rule(func, args, kwargs)


def _default_strided(*tensors: torch.Tensor | None) -> bool:
    return all(t is None or t.stride() == tuple(_default_strides(tuple(t.shape))) for t in tensors)


def _cpu_dtypes(func: Any, args: Any, kwargs: dict[str, Any], ranks: list[int]) -> list[torch.dtype] | None:
    """The result dtypes of ``func`` run on one-element CPU tensors, or None when it raises or
    its results do not have ``ranks``."""

    def one_element(x: Any) -> Any:
        return torch.ones((1,) * x.dim(), dtype=x.dtype) if isinstance(x, torch.Tensor) else x

    try:
        c_args, c_kwargs = pytree.tree_map(one_element, (args, kwargs))
        with torch.no_grad(), torch._C._DisablePythonDispatcher():
            out = func(*c_args, **c_kwargs)
    except Exception:
        return None
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(results) != len(ranks) or any(not isinstance(r, torch.Tensor) or r.dim() != n for r, n in zip(results, ranks)):
        return None
    return [r.dtype for r in results]


def _fresh(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _one_result(func: Any, args: Any, kwargs: dict[str, Any], shape: tuple[int, ...]) -> Any:
    dtypes = _cpu_dtypes(func, args, kwargs, [len(shape)])
    return _NOT_HANDLED if dtypes is None else _fresh(shape, dtypes[0])


def _plain_pointwise(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if not _default_strided(*tensors):
        return _one_strided_operand(func, args, kwargs, tensors)
    shape = _broadcast([tuple(t.shape) for t in tensors])
    return _NOT_HANDLED if shape is None else _one_result(func, args, kwargs, shape)


def _one_strided_operand(func: Any, args: Any, kwargs: dict[str, Any], tensors: list[torch.Tensor]) -> Any:
    """One tensor operand with a layout of its own (a transposed, sliced or expanded view): the
    result is dense, its dims ordered as the reference kernels order the operand's
    (:func:`_elementwise_order`).

    Only where that order is strict: the dims of size above 1 have distinct strides (or stride 0,
    a broadcast dim, which the order places by position alone), and the size-1 dims lead with
    strides above all of those. A composite reference (``gelu``) or a dtype round trip (bf16
    computed in float32) orders dims again on each intermediate result, and where the first
    order has ties (a size-1 dim's stride equal to another's) a later one may place a size-1 dim
    elsewhere: its stride would differ from the kernel's. A dense intermediate has no stride 0,
    so orders after the first agree with it.
    """
    if len(tensors) != 1:
        return _NOT_HANDLED
    t = tensors[0]
    sized = [st for n, st in zip(t.shape, t.stride()) if n > 1 and st != 0]
    ones = [d for d, n in enumerate(t.shape) if n == 1]
    if len(set(sized)) != len(sized) or ones != list(range(len(ones))):
        return _NOT_HANDLED
    if any(t.stride(d) <= max(sized, default=0) for d in ones):
        return _NOT_HANDLED
    dtypes = _cpu_dtypes(func, args, kwargs, [t.dim()])
    if dtypes is None:
        return _NOT_HANDLED
    shape = tuple(t.shape)
    return torch.empty_strided(shape, _dense_strides(shape, _elementwise_order(t)), dtype=dtypes[0], device="meta")


def _dense_strides(shape: tuple[int, ...], order: list[int]) -> list[int]:
    """The strides of a dense tensor of ``shape`` whose dims, outermost first, are ``order``."""
    strides = [0] * len(shape)
    expected = 1
    for d in reversed(order):
        strides[d] = expected
        expected *= shape[d]
    return strides


def _at_least(a: int, b: int) -> bool:
    # The reference's comparison of two sizes or strides: a zero is below everything.
    if b == 0:
        return True
    if a == 0:
        return False
    return a >= b or a % b == 0


def _elementwise_order(t: torch.Tensor) -> list[int]:
    """The dims of a pointwise result over ``t`` alone, outermost first, as eager orders them:
    contiguous or channels-last operands keep their format; otherwise a stable insertion sort
    puts the dim of larger stride outside, a size-1 or broadcast dim deciding nothing."""
    ndim = t.dim()
    contiguous, channels_last = t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last)
    if ndim < 2 or (contiguous and not channels_last):
        return list(range(ndim))
    if channels_last and not contiguous:
        return [0, *range(2, ndim), 1]
    shape, strides = tuple(t.shape), t.stride()

    def outer_first(a: int, b: int) -> int:
        # > 0: dim a belongs outside dim b; < 0: inside; 0: undecided.
        if strides[a] == 0 or strides[b] == 0:
            return 0
        if strides[a] == strides[b]:
            return 0 if _at_least(shape[b], shape[a]) else 1
        if _at_least(strides[b], strides[a]):
            return -1
        return 1 if _at_least(strides[a], strides[b]) else 0

    order = list(reversed(range(ndim)))  # innermost first while sorting
    for i in range(1, ndim):
        moving = i
        for j in reversed(range(i)):
            found = outer_first(order[j], order[moving])
            if found > 0:
                order[j], order[moving] = order[moving], order[j]
                moving = j
            elif found < 0:
                break
    order.reverse()
    return order


def _plain_addmm(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # torch's decomposition adds the bias to mm's fresh contiguous product, product first.
    bias, a, b = args[:3]
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or not _default_strided(bias):
        return _NOT_HANDLED
    shape = (a.shape[0], b.shape[1])
    if _broadcast([tuple(bias.shape), shape]) != shape:
        return _NOT_HANDLED
    return _one_result(func, args, kwargs, shape)


_COMPUTATION = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _plain_layer_norm(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # The reference makes its operands contiguous first: the results are contiguous whatever
    # the input layout. The output keeps the input's dtype; the statistics are computed (and,
    # on a meta tensor, returned) in the computation dtype.
    x, normalized, weight, bias = args[0], list(args[1]), args[2], args[3]
    axis = x.dim() - len(normalized)
    if kwargs or not x.is_floating_point() or axis < 0 or list(x.shape[axis:]) != normalized:
        return _NOT_HANDLED
    if any(p is not None and list(p.shape) != normalized for p in (weight, bias)):
        return _NOT_HANDLED
    stats = (*x.shape[:axis], *([1] * len(normalized)))
    dtype = _COMPUTATION.get(x.dtype, x.dtype)
    return _fresh(tuple(x.shape), x.dtype), _fresh(stats, dtype), _fresh(stats, dtype)


# The dtypes the norm rules answer for; the reference computes the others (float8, complex) its own way.
_NORM_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def bound_arguments(func: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``func``'s arguments by their schema names."""
    return dict(zip((a.name for a in func._schema.arguments), args)) | kwargs


def _per_channel(channels: int, *params: torch.Tensor | None) -> bool:
    return all(p is None or (tuple(p.shape) == (channels,) and p.dtype in _NORM_DTYPES and _default_strided(p)) for p in params)


def _norm_strides(x: torch.Tensor) -> list[int] | None:
    """The strides of a batch norm's output (and input gradient) over ``x``: the input's own where
    they are the default ones or strictly channels-last (not contiguous too), the two layouts the
    reference's pointwise steps keep whatever the sizes; None for any other layout."""
    if x.dtype not in _NORM_DTYPES or x.dim() < 2:
        return None
    if _default_strided(x):
        return list(x.stride())
    if x.dim() in (4, 5) and not x.is_contiguous():
        strides = _dense_strides(tuple(x.shape), [0, *range(2, x.dim()), 1])
        if list(x.stride()) == strides:
            return strides
    return None


def _plain_batch_norm(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # native_batch_norm and the _native_batch_norm_legit forms (training or not, with or without
    # running statistics, functional): the output is pointwise over the input and per-channel
    # operands; the saved statistics are per channel, in the computation dtype on a meta tensor
    # (training or not). The functional form's new running statistics blend the batch's into
    # the old ones in training (dtypes promoted), and are the old ones in the computation dtype
    # in eval.
    bound = bound_arguments(func, args, kwargs)
    x, mean, var = bound["input"], bound.get("running_mean"), bound.get("running_var")
    training = bound.get("training", False)
    strides = _norm_strides(x)
    if strides is None or not _per_channel(x.shape[1], bound["weight"], bound["bias"], mean, var):
        return _NOT_HANDLED
    if not training and (mean is None or var is None):
        return _NOT_HANDLED  # the reference's error to raise
    if training and var is not None and x.numel() == x.shape[1]:
        return _NOT_HANDLED  # the unbiased variance of one value per channel: the reference divides by zero
    channels = (x.shape[1],)
    dtype = _COMPUTATION.get(x.dtype, x.dtype)
    out = (torch.empty_strided(tuple(x.shape), strides, dtype=x.dtype, device="meta"), _fresh(channels, dtype), _fresh(channels, dtype))
    if func is not aten._native_batch_norm_legit_functional.default:
        return out
    if mean is None or var is None:
        return _NOT_HANDLED
    return (*out, *(_fresh(channels, torch.promote_types(dtype, r.dtype) if training else dtype) for r in (mean, var)))


def _plain_batch_norm_backward(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # native_batch_norm_backward: the input gradient is pointwise over the output gradient, the
    # input and per-channel values, so it keeps the layout the two share, in the input's dtype
    # (returned whatever the mask says); the weight and bias gradients are per channel, in the
    # weight's dtype (the input's without a weight).
    bound = bound_arguments(func, args, kwargs)
    grad, x, weight, mask = bound["grad_out"], bound["input"], bound["weight"], bound["output_mask"]
    names = ("save_mean", "save_invstd") if bound["train"] else ("running_mean", "running_var")
    strides = _norm_strides(x)
    if strides is None or grad.dtype not in _NORM_DTYPES or grad.shape != x.shape or grad.stride() != x.stride():
        return _NOT_HANDLED
    per_channel = [bound[n] for n in ("weight", "running_mean", "running_var", "save_mean", "save_invstd")]
    if any(bound[n] is None for n in names) or not _per_channel(x.shape[1], *per_channel):
        return _NOT_HANDLED  # missing statistics are the reference's error to raise
    channels = (x.shape[1],)
    param = x.dtype if weight is None else weight.dtype
    return (
        torch.empty_strided(tuple(x.shape), strides, dtype=x.dtype, device="meta"),
        _fresh(channels, param) if mask[1] else None,
        _fresh(channels, param) if mask[2] else None,
    )


def _plain_layer_norm_backward(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # native_layer_norm_backward: the reference makes its operands contiguous, and the input
    # gradient is pointwise over them and the statistics (the leading dims, then ones): with
    # every operand default-strided, contiguous, in the input's dtype. The weight and bias
    # gradients have the normalized shape and their parameter's dtype, each where the mask asks
    # for it and the parameter is given.
    bound = bound_arguments(func, args, kwargs)
    grad, x, normalized = bound["grad_out"], bound["input"], list(bound["normalized_shape"])
    weight, bias, mask = bound["weight"], bound["bias"], bound["output_mask"]
    axis = x.dim() - len(normalized)
    if not normalized or axis < 0 or list(x.shape[axis:]) != normalized or grad.shape != x.shape:
        return _NOT_HANDLED
    stats = (*x.shape[:axis], *([1] * len(normalized)))
    operands = (grad, x, bound["mean"], bound["rstd"], weight, bias)
    if any(t is not None and t.dtype not in _NORM_DTYPES for t in operands) or not _default_strided(*operands):
        return _NOT_HANDLED
    if tuple(bound["mean"].shape) != stats or tuple(bound["rstd"].shape) != stats:
        return _NOT_HANDLED
    if any(p is not None and list(p.shape) != normalized for p in (weight, bias)):
        return _NOT_HANDLED
    return (
        _fresh(tuple(x.shape), x.dtype) if mask[0] else None,
        _fresh(tuple(normalized), weight.dtype) if mask[1] and weight is not None else None,
        _fresh(tuple(normalized), bias.dtype) if mask[2] and bias is not None else None,
    )


def _plain_cat(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # cat of default-strided tensors of one rank: contiguous (eager keeps the memory format the
    # inputs share), in the dtype promoted over them.
    tensors, dim = list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0)
    ndim = tensors[0].dim()
    if ndim == 0 or not -ndim <= dim < ndim or any(t.dim() != ndim for t in tensors) or not _default_strided(*tensors):
        return _NOT_HANDLED
    dim %= ndim
    others = [[s for d, s in enumerate(t.shape) if d != dim] for t in tensors]
    if any(o != others[0] for o in others):
        return _NOT_HANDLED  # the kernel's error to raise
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return _one_result(func, args, kwargs, tuple(shape))


def _plain_mean(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not _default_strided(x):
        return _NOT_HANDLED
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    ndim = x.dim()
    if dims and any(not -max(ndim, 1) <= d < max(ndim, 1) for d in dims):
        return _NOT_HANDLED
    reduced = set(range(ndim)) if not dims else {d % ndim for d in dims} if ndim else set()
    shape = tuple((1 if i in reduced else s) for i, s in enumerate(x.shape) if keepdim or i not in reduced)
    return _one_result(func, args, kwargs, shape)


def _plain_same_shape(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # _safe_softmax of a contiguous input, and tril (whose reference ends in .contiguous()).
    x = args[0]
    if func is not aten.tril.default and not _default_strided(x):
        return _NOT_HANDLED
    if func is aten.tril.default and x.dim() < 2:
        return _NOT_HANDLED
    return _one_result(func, args, kwargs, tuple(x.shape))


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
            example = plain_meta(func, c_args, c_kwargs)
            if example is NOT_HANDLED:
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


_PLAIN_RULES: dict[Any, Rule] = {
    aten.addmm.default: _plain_addmm,
    aten.native_layer_norm.default: _plain_layer_norm,
    aten.native_batch_norm.default: _plain_batch_norm,
    aten._native_batch_norm_legit.default: _plain_batch_norm,
    aten._native_batch_norm_legit.no_stats: _plain_batch_norm,
    aten._native_batch_norm_legit_no_training.default: _plain_batch_norm,
    aten._native_batch_norm_legit_functional.default: _plain_batch_norm,
    aten.native_batch_norm_backward.default: _plain_batch_norm_backward,
    aten.native_layer_norm_backward.default: _plain_layer_norm_backward,
    aten.cat.default: _plain_cat,
    aten.mean.dim: _plain_mean,
    aten._safe_softmax.default: _plain_same_shape,
    aten.tril.default: _plain_same_shape,
}
