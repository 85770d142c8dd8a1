"""The OpInfo cross-check's symbolic half: each sampled call decomposed again over symbolic sizes.

Every tensor dim of size 2 or more becomes a size symbol, one symbol per distinct size (as
tangents share their outputs' sizes in real graphs), so the one-op graph is what a symbolic
trace would hold. Its decomposition must give eager's values on the sample and must not
specialize a size: no guard it adds may fix a size expression to a constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from ptc_decomp import decompose
from ptc_spec import GraphBuilder, SymbolEnv, TensorMeta, dynamic_meta, shape_env_of

aten = torch.ops.aten

# Ops whose samples force a specialization that is no decomposition's doing, each with why.
SPECIALIZED_BY_SAMPLE = {
    # input_sizes is a list of constants in the one-op graph while the gradient's length is a
    # symbol: the scatter's bounds relate the two (in a traced graph both are symbolic).
    aten.diagonal_backward.default: "constant input sizes against a symbolic gradient",
    # OpInfo pools 2x2..5x5 images: pooled sizes are 1 at the hints, and the core view and
    # reduction meta kernels branch on size-1 dims (as torch's do), so they specialize them.
    aten.max_pool2d_with_indices.default: "pooled sizes of 1 at the sample's hints",
    aten.max_pool2d_with_indices_backward.default: "pooled sizes of 1 at the sample's hints",
    aten.avg_pool2d.default: "pooled sizes of 1 at the sample's hints",
    aten.avg_pool2d_backward.default: "pooled sizes of 1 at the sample's hints",
}


def _duck_sized(meta: TensorMeta, env: SymbolEnv, by_size: dict[int, sympy.Symbol]) -> TensorMeta:
    try:
        dynamic = dynamic_meta(meta, range(meta.ndim), env)
    except ValueError:
        return meta  # a layout that is not dense keeps static sizes
    same = {s: by_size.setdefault(env.hints[s], s) for s in dynamic.symbols}
    return dynamic.replace(
        shape=tuple(sympy.sympify(x).xreplace(same) for x in dynamic.shape),
        stride=tuple(sympy.sympify(x).xreplace(same) for x in dynamic.stride),
    )


def symbolic_call(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, list[sympy.Basic]] | None:
    """Decompose a symbolic one-op graph of the call (strict) and run it on the call's tensors.

    Returns the result and the guards the decomposition added, or None when torch's own meta
    kernel cannot run the op over symbolic sizes (nothing of ours to check).
    """
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    tensors = [x.detach() for x in leaves if isinstance(x, torch.Tensor)]
    env = SymbolEnv()
    builder = GraphBuilder("aten", shape_env=env)
    by_size: dict[int, sympy.Symbol] = {}
    inputs = iter([builder.input(f"t{i}", _duck_sized(TensorMeta.from_tensor(t).replace(requires_grad=False), env, by_size)) for i, t in enumerate(tensors)])
    node_args, node_kwargs = pytree.tree_unflatten([next(inputs) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
    try:
        builder.output(builder.call(func, *node_args, **node_kwargs))
        gm = builder.build()
    except Exception:  # noqa: BLE001 - torch's meta kernels reject some ops on symbolic sizes
        return None
    before = shape_env_of(gm)
    out = decompose(gm, "core/1", strict=True)
    after = shape_env_of(out)
    added = [g for g in (after.guards if after else ()) if before is None or g not in before.guards]
    return out(*tensors), added


def specializations(func: Any, added: list[sympy.Basic]) -> list[sympy.Basic]:
    """The added guards that fix a size to a constant (unless the sample forces them)."""
    if func in SPECIALIZED_BY_SAMPLE:
        return []
    return [g for g in added if isinstance(g, sympy.Eq) and (g.lhs.is_number or g.rhs.is_number)]
