"""Mutating ATen ops and the functional ops that replace them.

Every mutating call ``op(..., w!, ...)`` becomes a call of a functional op that returns the
new value of each written argument ``w`` alongside the op's own results. The table is
derived from schemas (``foo_`` -> ``foo``, ``foo.out`` -> ``foo``, ``foo`` -> ``foo_functional``)
with a few explicit entries where the names do not follow the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import sympy
import torch

from ptc_spec import META_KEY

from .errors import UnsupportedMutationError

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class FunctionalForm:
    """How to replace one mutating call.

    ``new_values[j]`` is where the functional op's result holds the new value of written
    argument ``written[j]`` (None: the result is that single tensor); ``results[i]`` is where
    it holds the mutating op's own result ``i``, or the name of the written argument that
    result aliases.
    """

    target: torch._ops.OpOverload
    written: tuple[str, ...]
    new_values: tuple[int | None, ...]
    results: tuple[int | str | None, ...]


def bind(schema: torch._C.FunctionSchema, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Map argument names to the values a call passed (defaults left out)."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if not arg.kwarg_only and i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
    return bound


def with_defaults(schema: torch._C.FunctionSchema, bound: Mapping[str, Any]) -> dict[str, Any]:
    """``bound`` plus the schema's defaults for what the call left out (``bernoulli_(x)`` means p=0.5),
    so that the functional op, whose defaults may differ or be missing, gets them explicitly."""
    full = dict(bound)
    for arg in schema.arguments:
        if arg.name not in full and arg.has_default_value():
            full[arg.name] = arg.default_value
    return full


def call_arguments(schema: torch._C.FunctionSchema, bound: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword arguments that pass ``bound`` to an op of ``schema``."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    pending: list[Any] = []
    for arg in schema.arguments:
        if arg.kwarg_only:
            if arg.name in bound:
                kwargs[arg.name] = bound[arg.name]
            continue
        if arg.name in bound:
            args.extend(pending)
            pending.clear()
            args.append(bound[arg.name])
        elif arg.has_default_value():
            pending.append(arg.default_value)
        else:
            raise UnsupportedMutationError(f"{schema.name} needs argument {arg.name}, which the mutating call did not pass")
    return tuple(args), kwargs


def _batch_norm_writes(bound: Mapping[str, Any]) -> tuple[str, ...]:
    # native_batch_norm updates running_mean/running_var in place in training mode, but its
    # schema carries no (a!) annotation, so the schema-derived rule cannot see it.
    if bound.get("training") and bound.get("running_mean") is not None and bound.get("running_var") is not None:
        return ("running_mean", "running_var")
    return ()


# Ops that write arguments their schema does not mark as written.
IMPLICIT_WRITES: dict[torch._ops.OpOverload, Callable[[Mapping[str, Any]], tuple[str, ...]]] = {
    aten.native_batch_norm.default: _batch_norm_writes,
    aten.cudnn_batch_norm.default: _batch_norm_writes,
}

Emit = Callable[..., Any]
Rewrite = Callable[[Emit, Mapping[str, Any]], tuple[Any, ...]]
"""Emits a functional replacement given the call's bound (new-graph) arguments; returns the
results followed by the new values of the written arguments."""


def _cudnn_batch_norm(emit: Emit, bound: Mapping[str, Any]) -> tuple[Any, ...]:
    # cudnn_batch_norm has no functional variant: run it without running stats and apply
    # the running-stat update it would have made (momentum blend of the batch mean and the
    # unbiased batch variance, recovered from the saved inverse std) as separate ops.
    x = bound["input"]
    factor = float(bound["exponential_average_factor"])
    eps = float(bound["epsilon"])
    out = emit(
        aten.cudnn_batch_norm.default, x, bound["weight"], bound.get("bias"), None, None, True, factor, eps
    )
    shape = x.meta[META_KEY].shape
    count = _product([shape[0], *shape[2:]])
    mean, invstd = out[1], out[2]
    var = emit(aten.sub.Tensor, emit(aten.reciprocal.default, emit(aten.mul.Tensor, invstd, invstd)), eps)
    # Symbolic sizes stay a sympy expression (emit makes it the graph's size arithmetic).
    bessel = count / max(count - 1, 1) if isinstance(count, int) else count / sympy.Max(count - 1, 1)
    unbiased = emit(aten.mul.Tensor, var, bessel)
    new_mean = emit(aten.add.Tensor, emit(aten.mul.Tensor, bound["running_mean"], 1 - factor), emit(aten.mul.Tensor, mean, factor))
    new_var = emit(aten.add.Tensor, emit(aten.mul.Tensor, bound["running_var"], 1 - factor), emit(aten.mul.Tensor, unbiased, factor))
    return (*out, new_mean, new_var)


def _product(sizes: Any) -> Any:
    total = 1
    for s in sizes:
        total = total * s
    return total


# Mutating ops replaced by several functional ops rather than one.
REWRITES: dict[torch._ops.OpOverload, tuple[Rewrite, int]] = {
    aten.cudnn_batch_norm.default: (_cudnn_batch_norm, 4),
}

# Functional replacements whose names do not follow the schema rule.
RENAMED: dict[torch._ops.OpOverload, torch._ops.OpOverload] = {
    aten.native_batch_norm.default: aten._native_batch_norm_legit_functional.default,
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.bernoulli_.Tensor: aten.bernoulli.Tensor,
    aten.normal_.default: aten.normal_functional.default,
}

# Ops whose mutation changes metadata or storage, which no functional op expresses.
REFUSED = frozenset({aten.resize_.default, aten.resize_as_.default, aten.set_.source_Tensor, aten.set_.default})


def inplace_view_counterpart(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """For an op that re-views its input in place (``transpose_``, ``t_``, ``unsqueeze_``...:
    tagged ``inplace_view``), the view op giving the tensor's new metadata; else None."""
    if torch.Tag.inplace_view not in target.tags or target in REFUSED:
        return None
    packet = getattr(aten, target._schema.name.split("::")[1].removesuffix("_"), None)
    if packet is None:
        return None
    wanted = [a.name for a in target._schema.arguments]
    for name in packet.overloads():
        candidate = getattr(packet, name)
        # A view op of the same arguments: transpose_.default's counterpart is transpose.int.
        if not candidate._schema.is_mutable and [a.name for a in candidate._schema.arguments] == wanted:
            return cast(torch._ops.OpOverload, candidate)
    return None


def written_arguments(target: torch._ops.OpOverload, bound: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the arguments a call writes (schema ``(a!)`` plus ``IMPLICIT_WRITES``)."""
    names = [a.name for a in target._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    implicit = IMPLICIT_WRITES.get(target)
    if implicit is not None:
        names.extend(implicit(bound))
    return tuple(n for n in names if bound.get(n) is not None)


def _overload(packet_name: str, overload: str) -> torch._ops.OpOverload | None:
    packet = getattr(aten, packet_name, None)
    if packet is None:
        return None
    found = getattr(packet, overload, None) if overload in packet.overloads() else None
    return cast(torch._ops.OpOverload, found) if isinstance(found, torch._ops.OpOverload) else None


def _alias_sets(target: torch._ops.OpOverload) -> dict[str, str]:
    sets: dict[str, str] = {}
    for arg in target._schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            for alias in arg.alias_info.before_set:
                sets[alias] = arg.name
    return sets


def result_aliases(target: torch._ops.OpOverload) -> list[str | None]:
    """Per return of ``target``, the name of the written argument it aliases, or None."""
    sets = _alias_sets(target)
    found: list[str | None] = []
    for ret in target._schema.returns:
        name = None
        if ret.alias_info is not None:
            for alias in ret.alias_info.before_set:
                name = sets.get(alias, name)
        found.append(name)
    return found


def _out_variant_functional(target: torch._ops.OpOverload, written: tuple[str, ...]) -> torch._ops.OpOverload | None:
    wanted = [a.name for a in target._schema.arguments if a.name not in written]
    packet = getattr(aten, target._schema.name.split("::")[1])
    for name in packet.overloads():
        candidate: torch._ops.OpOverload = getattr(packet, name)
        if candidate._schema.is_mutable:
            continue
        if [a.name for a in candidate._schema.arguments] == wanted:
            return candidate
    return None


def functional_form(target: torch._ops.OpOverload, bound: Mapping[str, Any]) -> FunctionalForm:
    """Return how to replace a call of mutating ``target`` with a functional op."""
    if target in REFUSED:
        raise UnsupportedMutationError(f"{target} changes a tensor's size or storage, which functionalization cannot express")
    written = written_arguments(target, bound)
    if target in REWRITES:
        own = REWRITES[target][1]
        return FunctionalForm(target, written, tuple(own + j for j in range(len(written))), tuple(range(own)))
    packet_name = target._schema.name.split("::")[1]
    aliases = result_aliases(target)
    functional = RENAMED.get(target)
    if functional is None and packet_name.endswith("_") and written == (target._schema.arguments[0].name,):
        functional = _overload(packet_name[:-1], target._overloadname)
    if functional is None and all(a.kwarg_only for a in target._schema.arguments if a.name in written):
        functional = _out_variant_functional(target, written)
    if functional is None:
        functional = _overload(packet_name + "_functional", target._overloadname) or _overload(packet_name + "_functional", "default")
    if functional is None:
        raise UnsupportedMutationError(
            f"{target} mutates {', '.join(written)} and has no functional counterpart; rewrite it out of place"
        )
    n_returns = len(functional._schema.returns)
    if aliases and all(alias is not None for alias in aliases):
        # In-place and out= ops: the functional op returns exactly the new values, in the
        # order of the written arguments.
        new_values: tuple[int | None, ...] = (None,) if n_returns == 1 else tuple(range(len(written)))
        return FunctionalForm(functional, written, new_values, tuple(aliases))
    own = len(target._schema.returns)
    if n_returns != own + len(written):
        raise UnsupportedMutationError(f"{functional} does not return the new values of {', '.join(written)} written by {target}")
    return FunctionalForm(functional, written, tuple(own + j for j in range(len(written))), tuple(range(own)))
