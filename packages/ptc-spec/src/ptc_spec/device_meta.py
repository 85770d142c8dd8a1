"""Meta kernels told the traced device: the ops whose eager result layout or dtype depends on the device.

The tracer computes every result's TensorMeta by running the op on meta tensors. A few meta
kernels (torch's Python ones, in ``torch/_meta_registrations.py``) choose the result's strides
by the device the eager kernel would run on, which they read from the tensor; a meta tensor
names no such device, and they then assume CUDA. On CPU, eager's LAPACK and pocketfft kernels
return other layouts (column-major eigenvectors and SVD factors, a different dim order for
real FFTs), so the graph's strides would disagree with what eager gives. For those ops only,
we run the meta kernel over tensors that report the traced device while computing on meta.

Norm statistics are the dtype case: the meta kernel saves them in float32 for bfloat16 and
float16 inputs, as CUDA does, while eager's CPU kernels keep the parameters' dtype (the
input's when there are none) and, in eval mode, save none at all (empty tensors). :func:`norm_statistics_dtype` is that rule, shared with the
decompositions that must produce what the graph says.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from .dispatch_mode import DispatchMode
from .meta_rules import NOT_HANDLED, bound_arguments, plain_meta

aten = torch.ops.aten

_DEVICE_LAYOUT_OPS = frozenset(
    {
        aten._fft_c2c.default,
        aten._fft_r2c.default,
        aten._fft_c2r.default,
        aten.linalg_eig.default,
        aten._linalg_svd.default,
        aten.reflection_pad2d.default,
        aten.replication_pad2d.default,
        aten.nonzero_static.default,
        aten.pixel_shuffle.default,
    }
)
"""Ops whose meta kernel picks the result layout by device (torch's ``device_hint``)."""

# CUDA is what those meta kernels assume for a meta tensor, so it needs nothing done.
_ASSUMED = ("cuda", "meta")


class _OnDevice(torch.Tensor):
    """A meta tensor that reports ``device``: what a device-aware meta kernel reads."""

    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device) -> _OnDevice:
        out = torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype, layout=inner.layout, device=device
        )
        out._inner = inner
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        raise RuntimeError(f"{func} reached a device-reporting meta tensor outside its meta kernel")


class _OnDeviceMode(DispatchMode):
    """Runs each ATen call a meta kernel makes on the meta tensors inside, wrapping the results."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        margs, mkwargs = pytree.tree_map(_unwrap, (tuple(args), kwargs))
        margs, mkwargs = on_meta_device(func, margs, mkwargs)
        out = func(*margs, **mkwargs)
        written = _written_wrapper(func, args, kwargs)
        if written is not None:
            # ``as_strided_`` and friends re-view the meta tensor; the wrapper must follow.
            inner = written._inner
            with torch._C._DisableTorchDispatch():
                written.as_strided_(inner.shape, inner.stride(), inner.storage_offset())
            return written
        return pytree.tree_map(lambda x: _OnDevice(x, self.device) if isinstance(x, torch.Tensor) and x.device.type == "meta" else x, out)


def _unwrap(x: Any) -> Any:
    if isinstance(x, _OnDevice):
        return x._inner
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


def on_meta_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``func``'s arguments with its ``device`` argument set to meta (factories default to the CPU)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name != "device":
            continue
        if not arg.kwarg_only and i < len(args):
            args = (*args[:i], torch.device("meta"), *args[i + 1 :])
        else:
            kwargs = {**kwargs, "device": torch.device("meta")}
    return args, kwargs


def _written_wrapper(func: Any, args: Any, kwargs: dict[str, Any]) -> _OnDevice | None:
    """The wrapper an in-place call wrote (and returns), if any."""
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if (not arg.kwarg_only and i < len(args)) else kwargs.get(arg.name)
        if isinstance(value, _OnDevice):
            return value
    return None


_REDUCED = (torch.bfloat16, torch.float16)


def norm_statistics_dtype(device_type: str, input_dtype: torch.dtype, *params: torch.dtype | None) -> torch.dtype:
    """The dtype eager saves a norm's mean and rstd in: on the CPU the first given parameter's
    (weight, then running mean), else the input's; elsewhere float32 for reduced inputs."""
    if device_type == "cpu":
        return next((p for p in params if p is not None), input_dtype)
    return torch.float32 if input_dtype in _REDUCED else input_dtype


def running_statistics_dtype(device_type: str, input_dtype: torch.dtype, running: torch.dtype) -> torch.dtype:
    """The dtype of the updated running statistics a functional batch norm returns."""
    if device_type == "cpu":
        return running
    return torch.promote_types(running, torch.float32 if input_dtype in _REDUCED else input_dtype)


def _param_dtypes(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.dtype | None, ...]:
    bound = bound_arguments(func, args, kwargs)
    names = ("weight",) if func is aten.native_layer_norm.default else ("weight", "running_mean")
    return tuple(bound[n].dtype if isinstance(bound.get(n), torch.Tensor) else None for n in names)


# Norm ops whose saved statistics (and, for the functional form, running statistics) are
# results 1, 2 (and 3, 4): their dtype follows the device, see norm_statistics_dtype.
_NORM_STATISTICS = frozenset({
    aten.native_layer_norm.default, aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_no_training.default,
    aten._native_batch_norm_legit_functional.default, aten._batch_norm_no_update.default,
    aten._batch_norm_with_update.default, aten._batch_norm_with_update_functional.default,
})  # fmt: skip


def _evaluates(func: torch._ops.OpOverload, bound: dict[str, Any]) -> bool:
    """Whether a batch norm call normalizes by its running statistics (eval mode)."""
    if func is aten.native_layer_norm.default:
        return False
    return not bound.get("training", True) or func in (aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default)


def _cpu_statistics(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
    x = args[0]
    if not isinstance(x, torch.Tensor) or not isinstance(out, tuple):
        return out
    bound = bound_arguments(func, args, kwargs)
    stats = norm_statistics_dtype("cpu", x.dtype, *_param_dtypes(func, args, kwargs))
    items = list(out)
    for i in (1, 2):
        # In eval mode the CPU kernels save no statistics: empty tensors (CUDA saves (C,)).
        items[i] = x.new_empty((0,), dtype=stats) if _evaluates(func, bound) else items[i].to(stats)
    if func is aten._native_batch_norm_legit_functional.default:
        for i, name in ((3, "running_mean"), (4, "running_var")):
            items[i] = items[i].to(running_statistics_dtype("cpu", x.dtype, bound[name].dtype))
    return tuple(items)


def run_meta(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device) -> Any:
    """``func`` over meta tensors ``args``, with the result layout and dtypes eager gives on ``device``."""
    out = _run_meta(func, args, kwargs, device)
    if func is aten._batch_norm_with_update_functional.default and isinstance(out, tuple):
        # Its kernel (on every device) updates clones of the running statistics in place and
        # returns them, in their own dtype; the meta kernel promotes them with float32 as
        # _native_batch_norm_legit_functional's does.
        bound = bound_arguments(func, args, kwargs)
        out = (*out[:4], out[4].to(bound["running_mean"].dtype), out[5].to(bound["running_var"].dtype))
    return out


def _run_meta(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device) -> Any:
    plain = plain_meta(func, args, kwargs)
    if func in _NORM_STATISTICS and device.type == "cpu":
        return _cpu_statistics(func, args, kwargs, func(*args, **kwargs) if plain is NOT_HANDLED else plain)
    if plain is not NOT_HANDLED:
        return plain
    kernel = func.py_kernels.get(torch._C.DispatchKey.Meta) if func in _DEVICE_LAYOUT_OPS else None
    if kernel is None or device.type in _ASSUMED:
        return func(*args, **kwargs)
    wargs, wkwargs = pytree.tree_map(lambda x: _OnDevice(x, device) if isinstance(x, torch.Tensor) else x, (args, kwargs))
    try:
        with _OnDeviceMode(device):
            out = kernel(*wargs, **wkwargs)
    except Exception:
        # The plain meta kernel gives the op's own error for bad inputs (and a layout for good ones).
        return func(*args, **kwargs)
    if isinstance(out, tuple):
        # A Python kernel returns a named tuple of its own; the op returns a plain one.
        return tuple(_unwrap_result(x) for x in out)
    return _unwrap_result(out)


def _unwrap_result(x: Any) -> Any:
    return x._inner if isinstance(x, _OnDevice) else x
