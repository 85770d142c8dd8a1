"""Runs OpInfo samples eagerly while cross-checking every decomposition the dispatcher reaches.

A dispatch mode sees each ATen call of a sample (forward and backward); when the table has a
decomposition for it, the decomposition runs on the same arguments and its outputs must match
the real op's in structure, dtype, shape and values (dtype-aware tolerances). The first call
of each op per argument dtypes is also traced into a one-op graph and decomposed by
``decompose(..., strict=True)``, which proves the decomposition emits only core ops or ops
that decompose in turn, and the decomposed graph must match eager too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import ptc_spec
from ptc_decomp import InPlaceOpError, decompose
from ptc_spec import GraphBuilder, TensorMeta
from ptc_spec.testing import assert_same

from .symbolic_check import specializations, symbolic_call

aten = torch.ops.aten

# Values that cannot be compared: random draws, and uninitialised memory.
RANDOM_OPS = frozenset(
    {
        aten.rand.default, aten.randn.default, aten.rand_like.default, aten.randn_like.default,
        aten.bernoulli.default, aten.bernoulli.p, aten.native_dropout.default, aten.randint.low,
        aten.randint.default, aten.uniform.default,
    }
)
UNINITIALISED = frozenset({aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default})
# Eager's CPU kernel returns empty saved statistics in eval mode, the meta kernel (C,); the
# decompositions follow the meta kernel, so only the normalized output is compared there.
EVAL_STATS = frozenset(
    {
        aten.native_batch_norm.default, aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default,
        aten._native_batch_norm_legit_functional.default,
    }
)

# The dtypes of normalization ops differ between kernels: eager's CPU kernels round saved
# statistics to a reduced input dtype (and keep mixed-dtype group norm statistics in float32),
# while the meta kernel, hence every traced graph, and CUDA keep them in float32. The
# decompositions follow the meta kernel, so their dtypes are checked against it and their
# values compared after rounding to eager's dtypes.
META_DTYPES = frozenset(
    {
        aten.native_layer_norm.default, aten.native_layer_norm_backward.default,
        aten.native_group_norm.default, aten.native_group_norm_backward.default,
        aten.native_batch_norm.default, aten.native_batch_norm_backward.default, aten.batch_norm_backward.default,
        aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_functional.default,
        aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default, aten.cudnn_batch_norm.default,
    }
)

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-5, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
}


# Eager's bfloat16 CPU kernels of these fused matmul+epilogue ops round intermediate
# products in bfloat16 in an order of their own; with cancellation between beta*self and the
# product the two results differ by a few bfloat16 steps of the operands' magnitude.
# binary_cross_entropy_with_logits is composed in eager from bfloat16 ops, each rounding; the
# decomposition computes in float32 and rounds once.
LOOSE_BF16 = frozenset({aten.addr.default, aten.addbmm.default, aten.baddbmm.default, aten.binary_cross_entropy_with_logits.default})
LOOSE_BF16_TOLERANCE = (0.1, 0.5)

# Eager's CPU layer norm backward for float16 inputs with float32 weights rounds partial sums
# of grad_weight/grad_bias to float16 (a few float16 steps off); the decomposition sums in
# float32 and agrees with a float64 reference.
LOOSE_F16 = frozenset({aten.native_layer_norm_backward.default})
LOOSE_F16_TOLERANCE = (1e-2, 1e-2)


@dataclass
class Report:
    """What a cross-checked run saw: checks per op, and failures with their messages."""

    checked: Counter[Any] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    strict: Counter[Any] = field(default_factory=Counter)
    symbolic: Counter[Any] = field(default_factory=Counter)
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = field(default_factory=list)


# Ops already decomposed strictly in this session, by argument dtypes: one graph each is enough.
STRICTLY_DECOMPOSED: set[tuple[Any, tuple[Any, ...]]] = set()


def _signature(args: Any, kwargs: Any) -> tuple[Any, ...]:
    return tuple(str(x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__ for x in pytree.tree_leaves((args, kwargs)))


def decompose_call(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], target: str = "core/1") -> Any:
    """Build a one-op graph of ``func(*args, **kwargs)``, decompose it with strict=True and run it on the same tensors."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    tensors = [x.detach() for x in leaves if isinstance(x, torch.Tensor)]
    # The builder records the op itself even where its meta kernel is written in other ops
    # (tracing the call would record those instead).
    builder = GraphBuilder("aten")
    inputs = iter([builder.input(f"t{i}", TensorMeta.from_tensor(t).replace(requires_grad=False)) for i, t in enumerate(tensors)])
    node_args, node_kwargs = pytree.tree_unflatten([next(inputs) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
    builder.output(builder.call(func, *node_args, **node_kwargs))
    out = decompose(builder.build(), target, strict=True)
    return out(*tensors)


def check_strictly(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], expected: Any, report: Report) -> None:
    """Decompose one call strictly (once per op and argument dtypes) and compare the graph's result with ``expected``."""
    key = (func, _signature(args, kwargs))
    if key in STRICTLY_DECOMPOSED:
        return
    STRICTLY_DECOMPOSED.add(key)
    try:
        compare(func, decompose_call(func, args, kwargs), expected, tuple(args), kwargs)
    except InPlaceOpError:
        return
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its op
        report.failures.append(f"{func} (decomposed strictly): {type(exc).__name__}: {str(exc)[:400]}")
    report.strict[func] += 1
    check_symbolically(func, args, kwargs, expected, report)


def check_symbolically(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], expected: Any, report: Report) -> None:
    """Decompose the call's one-op graph over symbolic sizes: eager's values, and no size specialized."""
    try:
        found = symbolic_call(func, args, kwargs)
        if found is None:
            return
        actual, added = found
        compare(func, actual, expected, tuple(args), kwargs)
        fixed = specializations(func, added)
        if fixed:
            raise AssertionError(f"the decomposition specialized symbolic sizes: {fixed}")
    except InPlaceOpError:
        return
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its op
        report.failures.append(f"{func} (decomposed over symbolic sizes): {type(exc).__name__}: {str(exc)[:400]}")
        return
    report.symbolic[func] += 1


def _shape_dtype(actual: Any, expected: Any) -> None:
    a, e = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} outputs, expected {len(e)}")
    for x, y in zip(a, e):
        if isinstance(y, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype):
            raise AssertionError(f"got {tuple(x.shape)} {x.dtype}, expected {tuple(y.shape)} {y.dtype}")


def _normalize(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def _degenerate_layer_norm(func: Any, args: tuple[Any, ...]) -> bool:
    # With one normalized element x == mean, so x_hat is exactly 0; eager's fused
    # multiply-add leaves rounding noise there, amplified by rstd = 1/sqrt(eps) to ~1e-4.
    if func is not aten.native_layer_norm_backward.default:
        return False
    size = 1
    for s in args[2]:
        size *= s
    return size == 1


def _meta_dtypes(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.dtype | None]:
    # What a traced graph records for this call on the tensors' device (ptc_spec.run_meta).
    device = next(a.device for a in pytree.tree_leaves((args, dict(kwargs))) if isinstance(a, torch.Tensor))
    meta_args, meta_kwargs = pytree.tree_map(lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, (args, dict(kwargs)))
    return [t.dtype if isinstance(t, torch.Tensor) else None for t in _normalize(ptc_spec.run_meta(func, meta_args, meta_kwargs, device))]


def _follow_meta(func: Any, actual: list[Any], expected: list[Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    """Check ``actual`` has the traced graph's dtypes, and return it rounded to ``expected``'s."""
    dtypes = [t.dtype if isinstance(t, torch.Tensor) else None for t in actual]
    assert dtypes == _meta_dtypes(func, args, kwargs), f"{func}: dtypes {dtypes} differ from the traced graph's"
    return [a.to(e.dtype) if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) else a for a, e in zip(actual, expected)]


def compare(func: Any, actual: Any, expected: Any, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None) -> None:
    """Assert a decomposition's outputs match the op's (values skipped for random/uninitialised ops)."""
    actual, expected = _normalize(actual), _normalize(expected)
    if func in RANDOM_OPS or func in UNINITIALISED:
        _shape_dtype(actual, expected)
        return
    if func in META_DTYPES and args:
        actual = _follow_meta(func, actual, expected, args, kwargs or {})
    if func in EVAL_STATS and isinstance(expected, list) and expected[1].numel() == 0:
        # Drop the saved statistics only; the functional op's running statistics still count.
        actual, expected = [actual[0], *actual[3:]], [expected[0], *expected[3:]]
    dtypes = [t.dtype for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]
    rtol, atol = TOLERANCES.get(min(dtypes, key=lambda d: d.itemsize), (None, None)) if dtypes else (None, None)
    if func in LOOSE_BF16 and torch.bfloat16 in dtypes:
        rtol, atol = LOOSE_BF16_TOLERANCE
    if func in LOOSE_F16 and torch.float16 in dtypes:
        rtol, atol = LOOSE_F16_TOLERANCE
    if _degenerate_layer_norm(func, args):
        atol = 1e-3
    assert_same(actual, expected, rtol=rtol, atol=atol, what=str(func))


class CrossCheck(TorchDispatchMode):
    """Runs each dispatched op, and its decomposition when the table has one, comparing the two."""

    def __init__(self, table: Mapping[Any, Callable[..., Any]], report: Report) -> None:
        super().__init__()
        self.table = table
        self.report = report

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        expected = func(*args, **kwargs)
        fn = self.table.get(func)
        if fn is None:
            return expected
        try:
            with torch.no_grad():
                actual = fn(*args, **kwargs)
            compare(func, actual, expected, tuple(args), kwargs)
        except InPlaceOpError:
            # The op would mutate its arguments here (training batch norm with running
            # statistics); decompose refuses such nodes, so there is nothing to compare.
            return expected
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its op
            self.report.failures.append(f"{func}: {type(exc).__name__}: {str(exc)[:400]}")
        self.report.checked[func] += 1
        if (func, _signature(args, kwargs)) not in STRICTLY_DECOMPOSED:
            # Copies: later in-place ops of the sample may write these tensors.
            snapshot = pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, (tuple(args), dict(kwargs), expected))
            self.report.calls.append((func, *snapshot))
        return expected


def run_samples(op: Any, samples: Iterable[Any], backward: bool, table: Mapping[Any, Callable[..., Any]], report: Report) -> int:
    """Run ``op`` on each sample (and its backward when asked) under CrossCheck; return how many ran."""
    count = 0
    for sample in samples:
        with CrossCheck(table, report):
            try:
                out = op(sample.input, *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001 - samples that eager itself rejects are skipped
                continue
            if backward:
                _backward(sample, out)
        count += 1
    # Outside the mode: decompose traces with a dispatch mode of its own.
    calls, report.calls = report.calls, []
    for func, args, kwargs, expected in calls:
        check_strictly(func, args, kwargs, expected, report)
    return count


def _backward(sample: Any, out: Any) -> None:
    inputs = [t for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not inputs or not outputs:
        return
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) for o in outputs]
    try:
        torch.autograd.grad(outputs, inputs, grads, allow_unused=True)
    except RuntimeError:
        return
