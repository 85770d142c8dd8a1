"""Runs OpInfo samples eagerly while cross-checking every decomposition the dispatcher reaches.

A dispatch mode sees each ATen call of a sample (forward and backward); when the table has a
decomposition for it, the decomposition runs on the same arguments and its outputs must match
the real op's in structure, dtype, shape and values (dtype-aware tolerances).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ptc_decomp import InPlaceOpError
from ptc_spec.testing import assert_same

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
    {aten.native_batch_norm.default, aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default}
)

# Eager's CPU layer norm rounds its saved mean/rstd to a reduced input dtype; the meta kernel
# (hence every traced graph) and CUDA keep them in float32, which the decomposition follows. The
# statistics are compared after rounding the decomposition's to eager's dtype.
CPU_ROUNDED_STATS = frozenset({aten.native_layer_norm.default})

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


@dataclass
class Report:
    """What a cross-checked run saw: checks per op, and failures with their messages."""

    checked: Counter[Any] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


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


def compare(func: Any, actual: Any, expected: Any, args: tuple[Any, ...] = ()) -> None:
    """Assert a decomposition's outputs match the op's (values skipped for random/uninitialised ops)."""
    actual, expected = _normalize(actual), _normalize(expected)
    if func in RANDOM_OPS or func in UNINITIALISED:
        _shape_dtype(actual, expected)
        return
    if func in EVAL_STATS and isinstance(expected, list) and expected[1].numel() == 0:
        actual, expected = actual[0], expected[0]
    if func in CPU_ROUNDED_STATS and expected[1].device.type == "cpu" and expected[1].dtype != actual[1].dtype:
        meta = func(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
        assert [t.dtype for t in actual] == [t.dtype for t in meta], f"{func}: dtypes differ from the meta kernel's"
        actual = [actual[0], *(t.to(e.dtype) for t, e in zip(actual[1:], expected[1:]))]
    dtypes = [t.dtype for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]
    rtol, atol = TOLERANCES.get(min(dtypes, key=lambda d: d.itemsize), (None, None)) if dtypes else (None, None)
    if func in LOOSE_BF16 and torch.bfloat16 in dtypes:
        rtol, atol = LOOSE_BF16_TOLERANCE
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
            compare(func, actual, expected, tuple(args))
        except InPlaceOpError:
            # The op would mutate its arguments here (training batch norm with running
            # statistics); decompose refuses such nodes, so there is nothing to compare.
            return expected
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its op
            self.report.failures.append(f"{func}: {type(exc).__name__}: {str(exc)[:400]}")
        self.report.checked[func] += 1
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
