"""The objects a generated wrapper's namespace may hold, and how a manifest names them.

The compiler half writes a recipe per namespace entry (``encode`` lives with it, in
``ptc_inductor.artifact``); this module turns recipes back into objects with nothing but torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .errors import ArtifactError
from .recycle import OutputRecycler


def restride(t: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """A copy of ``t`` with the strides the kernels were compiled for (what a wrapper calls on other layouts)."""
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "torch.empty_strided": torch.empty_strided,
    "torch.as_strided": torch.as_strided,
    "ptc_inductor.restride": restride,
    "torch.mm": torch.mm,
    "torch.addmm": torch.addmm,
    "torch.bmm": torch.bmm,
    "torch.baddbmm": torch.baddbmm,
    "torch.convolution": torch.convolution,
    "torch.nn.functional.linear": torch.nn.functional.linear,
}
"""Plain functions a wrapper's namespace may hold, by the name the manifest gives them."""

aten = torch.ops.aten

DIRECT_CALLS: dict[Any, Callable[..., Any]] = {
    aten.mm.default: torch.mm,
    aten.addmm.default: torch.addmm,
    aten.bmm.default: torch.bmm,
    aten.baddbmm.default: torch.baddbmm,
    aten.convolution.default: torch.convolution,
}
"""Extern ops a wrapper calls through torch's own binding: the same kernel, reached without the
overload object's boxed call (1 us less a matmul on a CPU, 2 us an addmm; ResNet-50 in bf16 on
the H200 took 3.707 ms a step with its 53 convolutions called this way, 4.684 ms through the
overload). Attention kernels are added below where this torch has their bindings."""

for _name in (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
):
    _binding = getattr(torch._C._VariableFunctions, _name, None)
    _overload = getattr(getattr(aten, _name, None), "default", None)
    if _binding is not None and _overload is not None:
        DIRECT_CALLS[_overload] = _binding
        FUNCTIONS[f"torch.{_name}"] = _binding
del _name, _binding, _overload

DTYPES: dict[str, torch.dtype] = {str(dt): dt for dt in vars(torch).values() if isinstance(dt, torch.dtype)}


def decode(recipe: Mapping[str, Any]) -> Any:
    """The object a namespace recipe describes (tensors and kernels are rebuilt by the loader)."""
    kind = recipe["kind"]
    if kind == "module":
        return torch
    if kind == "dtype":
        return DTYPES[recipe["name"]]
    if kind == "device":
        return torch.device(recipe["name"])
    if kind == "op":
        packet = getattr(getattr(torch.ops, recipe["namespace"]), recipe["name"])
        return getattr(packet, recipe["overload"])
    if kind == "float":
        return float(recipe["repr"])
    if kind == "recycler":
        return OutputRecycler(recipe["size"] or (), recipe["stride"] or (), DTYPES[recipe["dtype"]], recipe["nbytes"])
    if kind == "function":
        return FUNCTIONS[recipe["name"]]
    if kind == "value":
        return recipe["value"]
    raise ArtifactError(f"unknown namespace entry kind {kind!r}")


def build_namespace(recipes: Mapping[str, Mapping[str, Any]], tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The wrapper's namespace from its recipes and its constant tensors (CPU copies, by name)."""
    namespace: dict[str, Any] = {"torch": torch}
    for name, recipe in recipes.items():
        if recipe["kind"] == "tensor":
            raw = tensors[name].to(recipe["device"])
            namespace[name] = torch.as_strided(raw, recipe["size"], recipe["stride"]) if raw.numel() else raw
        elif recipe["kind"] != "data_ptr":
            namespace[name] = decode(recipe)
    # Pointers last: they are read from the tensors placed on their devices above.
    for name, recipe in recipes.items():
        if recipe["kind"] == "data_ptr":
            namespace[name] = namespace[recipe["of"]].data_ptr()
    return namespace
