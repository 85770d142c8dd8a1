"""Which compiled program a call selects, when programs are symbolic.

A program traced over symbolic sizes serves every call whose inputs have its dtypes, devices,
ranks and static sizes, whose sizes give each symbol one value, whose strides and offsets
are what the program's layout expressions say at those values, and whose symbol values
satisfy the program's guards. Checking that costs microseconds per expression, so the
wrapper does it once per distinct input layout and remembers the answer (``AotFunction``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ptc_spec import SymbolEnv, SymSize, TensorMeta, dynamic_meta


@dataclass(frozen=True, slots=True)
class Signature:
    """The calls a symbolic program accepts: grad mode, input metadata (TensorMeta or a baked-in
    ``(type, value)``) and the SymbolEnv whose guards the compiled graphs rely on."""

    training: bool
    inputs: tuple[Any, ...]
    env: SymbolEnv

    def matches(self, training: bool, args: Sequence[Any]) -> bool:
        """True when the program traced for this signature is valid for a call with ``args``."""
        if training != self.training or len(args) != len(self.inputs):
            return False
        values: dict[sympy.Symbol, int] = {}
        for meta, arg in zip(self.inputs, args):
            if isinstance(meta, TensorMeta):
                if not _same_kind(meta, arg) or not _bind(meta.shape, arg.shape, values):
                    return False
            elif isinstance(arg, torch.Tensor) or meta != (type(arg), arg):
                return False
        for meta, arg in zip(self.inputs, args):
            if isinstance(meta, TensorMeta) and not _layout_holds(meta, arg, values):
                return False
        try:
            return self.env.guards_hold({s.name: v for s, v in values.items()})
        except KeyError:
            # A guard on a symbol no input has as a dim: this call cannot show it holds.
            return False


def _same_kind(meta: TensorMeta, arg: Any) -> bool:
    return (
        isinstance(arg, torch.Tensor)
        and arg.dtype == meta.dtype
        and arg.device == meta.device
        and arg.requires_grad == meta.requires_grad
        and arg.dim() == meta.ndim
    )


def _bind(shape: Sequence[SymSize], actual: Sequence[int], values: dict[sympy.Symbol, int]) -> bool:
    """Check static sizes and read each symbol's value (False when a symbol would take two values)."""
    for size, value in zip(shape, actual):
        if isinstance(size, int):
            if size != value:
                return False
        elif isinstance(size, sympy.Symbol):
            if values.setdefault(size, value) != value:
                return False
    return True


def _layout_holds(meta: TensorMeta, arg: torch.Tensor, values: dict[sympy.Symbol, int]) -> bool:
    expected = (*meta.shape, *meta.stride, meta.storage_offset)
    actual = (*arg.shape, *arg.stride(), arg.storage_offset())
    for size, value in zip(expected, actual):
        if isinstance(size, int):
            if size != value:
                return False
            continue
        found = sympy.sympify(size.xreplace(values))  # a bare symbol becomes the int itself
        if not found.is_Integer or int(found) != value:
            return False
    return True


def dynamic_dims(metas: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """Per input position, the dims whose size is a symbol (the dims a function was made dynamic in)."""
    found: dict[int, tuple[int, ...]] = {}
    for i, meta in enumerate(metas):
        if isinstance(meta, TensorMeta):
            dims = tuple(d for d, s in enumerate(meta.shape) if isinstance(s, sympy.Symbol))
            if dims:
                found[i] = dims
    return found


def make_dynamic(metas: Sequence[Any], dims: dict[int, tuple[int, ...]]) -> tuple[list[Any], SymbolEnv]:
    """``metas`` with a fresh symbol for each dim in ``dims`` (in a new SymbolEnv, which it returns)."""
    env = SymbolEnv()
    out = list(metas)
    for i, chosen in dims.items():
        meta = out[i]
        if isinstance(meta, TensorMeta) and meta.ndim > max(chosen, default=-1):
            try:
                out[i] = dynamic_meta(meta, chosen, env)
            except ValueError:
                continue  # a layout that is not dense keeps static sizes
    return out, env
