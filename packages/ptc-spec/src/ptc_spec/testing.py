"""The one helper every ptc package uses to compare a compiled callable with eager PyTorch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

# (rtol, atol) per dtype for compiled-vs-eager comparisons: compiled kernels reorder float
# reductions and fuse ops, so these are looser than bitwise but far under a real bug.
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float16: (2e-3, 1e-3),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """Return the default (rtol, atol) for comparing tensors of ``dtype`` (0, 0 for exact dtypes)."""
    return _TOLERANCES.get(dtype, (0.0, 0.0))


# Reduced precision: below this fraction of the reference's RMS, an error is the rounding of a
# value eager happened to get exact (see assert_as_accurate_as_eager).
_ACCURACY_FLOOR: dict[torch.dtype, float] = {torch.bfloat16: 4e-3, torch.float16: 5e-4}


def assert_as_accurate_as_eager(
    actual: torch.Tensor,
    eager: torch.Tensor,
    reference: torch.Tensor,
    *,
    precision: torch.dtype | None = None,
    multiplier: float = 3.0,
    what: str = "output",
) -> dict[str, float]:
    """Assert ``actual`` is about as close to ``reference`` (the same computation in float64) as ``eager`` is.

    For reduced precision, where fused kernels that keep float32 between ops and eager, which
    rounds after each op, differ by rounding alone (most at cancellations): the RMS error
    relative to the reference's RMS may be at most ``multiplier`` times eager's, plus a floor
    for the lowest ``precision`` in play (``actual``'s dtype by default). Dtypes, shapes and
    where values are finite must match exactly. Returns both relative errors.
    """
    if actual.dtype != eager.dtype or actual.shape != eager.shape:
        raise AssertionError(f"{what}: {actual.dtype} {tuple(actual.shape)}, eager {eager.dtype} {tuple(eager.shape)}")
    if not torch.equal(torch.isfinite(actual), torch.isfinite(eager)):
        raise AssertionError(f"{what}: non-finite values at other positions than eager's")
    ref = reference.double()
    scale = float(ref.pow(2).mean().sqrt()) or 1.0

    def rms(t: torch.Tensor) -> float:
        return float((t.double() - ref).pow(2).mean().sqrt()) / scale

    err, err_eager = rms(actual), rms(eager)
    bound = multiplier * err_eager + _ACCURACY_FLOOR.get(precision or actual.dtype, 1e-5)
    if not err <= bound:
        raise AssertionError(f"{what}: RMS error {err:.3e} of the float64 reference's RMS > {bound:.3e} (eager's {err_eager:.3e})")
    return {"err_ptc": err, "err_eager": err_eager}


def assert_same(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_stride: bool = False,
    what: str = "output",
) -> None:
    """Assert two pytrees match: structure, and for tensors dtype, shape, device and values."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if a_spec != e_spec:
        raise AssertionError(f"{what}: structure differs: got {a_spec}, expected {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        label = what if len(a_leaves) == 1 else f"{what}[{i}]"
        if isinstance(e, torch.Tensor):
            _assert_tensor(a, e, rtol, atol, check_stride, label)
        elif isinstance(e, float) and isinstance(a, float):
            torch.testing.assert_close(a, e, rtol=rtol or 1e-6, atol=atol or 1e-7, msg=f"{label}: {a} != {e}")
        elif a != e:
            raise AssertionError(f"{label}: got {a!r}, expected {e!r}")


def _assert_tensor(a: Any, e: torch.Tensor, rtol: float | None, atol: float | None, check_stride: bool, label: str) -> None:
    if not isinstance(a, torch.Tensor):
        raise AssertionError(f"{label}: expected a tensor, got {type(a).__name__}")
    if a.dtype != e.dtype:
        raise AssertionError(f"{label}: dtype {a.dtype}, expected {e.dtype}")
    if a.shape != e.shape:
        raise AssertionError(f"{label}: shape {tuple(a.shape)}, expected {tuple(e.shape)}")
    if a.device != e.device:
        raise AssertionError(f"{label}: device {a.device}, expected {e.device}")
    if check_stride and a.numel() > 1 and a.stride() != e.stride():
        raise AssertionError(f"{label}: stride {a.stride()}, expected {e.stride()}")
    default_rtol, default_atol = tolerances(e.dtype)
    torch.testing.assert_close(
        a.detach(),
        e.detach(),
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
        equal_nan=True,
        check_stride=False,
        msg=lambda m: f"{label}: {m}",
    )


def _clone_inputs(args: Sequence[Any]) -> list[Any]:
    def clone(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            return c.requires_grad_(x.requires_grad)
        return x

    return [pytree.tree_map(clone, a) for a in args]


def compare_with_eager(
    compiled: Callable[..., Any],
    eager: Callable[..., Any],
    *args: Any,
    grads: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    check_stride: bool = False,
) -> Any:
    """Run both callables on fresh copies of ``args``; compare outputs, mutated inputs and gradients.

    With ``grads``, a weighted sum of the floating outputs is back-propagated in both and the
    ``.grad`` of every input that requires grad is compared. Returns the compiled outputs.
    """
    eager_args, compiled_args = _clone_inputs(args), _clone_inputs(args)
    expected = eager(*eager_args)
    actual = compiled(*compiled_args)
    assert_same(actual, expected, rtol=rtol, atol=atol, check_stride=check_stride, what="output")
    assert_same(compiled_args, eager_args, rtol=rtol, atol=atol, what="inputs after the call")
    if grads:
        _backward(actual)
        _backward(expected)
        for i, (c, e) in enumerate(zip(pytree.tree_leaves(compiled_args), pytree.tree_leaves(eager_args))):
            if isinstance(e, torch.Tensor) and e.requires_grad:
                if (c.grad is None) != (e.grad is None):
                    raise AssertionError(f"grad of input {i}: compiled has {c.grad is not None}, eager has {e.grad is not None}")
                if e.grad is not None:
                    assert_same(c.grad, e.grad, rtol=rtol, atol=atol, what=f"grad of input {i}")
    return actual


def _backward(outputs: Any) -> None:
    gen = torch.Generator().manual_seed(1234)
    total: torch.Tensor | None = None
    for out in pytree.tree_leaves(outputs):
        if isinstance(out, torch.Tensor) and out.requires_grad and out.dtype.is_floating_point:
            weight = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(out.device, out.dtype)
            term = (out * weight).sum()
            total = term if total is None else total + term
    if total is not None:
        total.backward()
