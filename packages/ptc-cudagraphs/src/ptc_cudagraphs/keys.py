"""The signature of one call's inputs: what selects (or creates) a recording."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch

# One entry per argument. Static tensors contribute their address (a moved static input
# must not replay a graph that reads the old memory); copied tensors only their layout,
# because their values are copied into the graph's own buffer on every replay.
STATIC = "s"
COPIED = "c"
VALUE = "v"


def input_key(
    args: Sequence[object],
    static: frozenset[int],
    is_pool_output: Callable[[torch.Tensor], bool],
) -> tuple[tuple[Hashable, ...], frozenset[object]]:
    """Return (signature of args, set of devices of their tensors)."""
    key: list[Hashable] = []
    devices: set[object] = set()
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            devices.add(arg.device)
            if i in static or _is_parameter(arg) or is_pool_output(arg):
                key.append((STATIC, arg.data_ptr(), arg.shape, arg.stride(), arg.dtype))
            else:
                key.append((COPIED, arg.shape, arg.stride(), arg.dtype, arg.requires_grad))
        else:
            key.append((VALUE, _hashable(arg)))
    return tuple(key), frozenset(devices)


_COPIED_ENTRY = (COPIED,)


def fixed_layout_key(
    args: Sequence[object],
    static: frozenset[int],
    is_pool_output: Callable[[torch.Tensor], bool],
) -> tuple[Hashable, ...]:
    """input_key's signature for a callable whose every call has one layout per argument (the
    caller guarantees dtypes, devices, sizes and strides, as a frontend's guards do): only the
    addresses of static inputs and pool outputs, and each other value, tell calls apart.
    ``static`` must hold the parameters' positions too (see :func:`parameter_positions`)."""
    key: list[Hashable] = []
    for i, arg in enumerate(args):
        if i in static:
            key.append((STATIC, arg.data_ptr()))  # type: ignore[attr-defined]
        elif isinstance(arg, torch.Tensor):
            key.append((STATIC, arg.data_ptr()) if is_pool_output(arg) else _COPIED_ENTRY)
        else:
            key.append((VALUE, _hashable(arg)))
    return tuple(key)


def parameter_positions(args: Sequence[object]) -> frozenset[int]:
    """Positions of the parameters among ``args``: static inputs, as input_key treats them."""
    return frozenset(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and _is_parameter(a))


def _is_parameter(tensor: torch.Tensor) -> bool:
    # Parameter's isinstance goes through a Python-level metaclass hook; a plain tensor, the
    # common argument, is answered by its exact type without it.
    return type(tensor) is not torch.Tensor and isinstance(tensor, torch.nn.Parameter)


def copied_indices(key: tuple[Hashable, ...]) -> tuple[int, ...]:
    """Return the positions of arguments a recording must copy into its own buffers."""
    return tuple(i for i, entry in enumerate(key) if isinstance(entry, tuple) and entry[0] == COPIED)


def _hashable(value: object) -> Hashable:
    # Plain values are baked into the recording, so they are part of the key; an unhashable
    # one can only be told apart by identity.
    try:
        hash(value)
    except TypeError:
        return ("id", type(value).__name__, id(value))
    return value
