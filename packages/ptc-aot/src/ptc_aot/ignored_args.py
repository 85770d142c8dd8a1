"""Tensor arguments an op reads only in a mode its call does not use, dropped from the joint graph.

``native_batch_norm_backward`` takes the running statistics but reads them only in evaluation
mode (``train=False``); a training call uses the batch's saved mean and inverse deviation.
Functionalization hands it the *updated* running statistics, so the partition saved two tensors
per batch norm for the backward, and the forward returned each of them twice (as the input's
new value and as a saved value): ResNet-50 saved 106 tensors it never read, and no compiler
could write the new statistics into the buffers they replace. ``batch_norm_backward`` reads them
only without ``update``; cuDNN's and MIOpen's backwards never do (autograd calls them for
training-mode batch norm alone, and they take the saved mean and inverse deviation).
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

# op -> (position of the mode flag, the flag's value that leaves the arguments unread, their
# positions); no flag: the op never reads them.
_UNREAD: dict[torch._ops.OpOverload, tuple[int | None, bool, tuple[int, ...]]] = {
    aten.native_batch_norm_backward.default: (7, True, (3, 4)),
    aten.batch_norm_backward.default: (7, True, (3, 4)),
    aten.cudnn_batch_norm_backward.default: (None, True, (3, 4)),
    aten.miopen_batch_norm_backward.default: (None, True, (3, 4)),
}


def drop_ignored_arguments(gm: torch.fx.GraphModule) -> int:
    """Pass None for tensor arguments that ``gm``'s calls do not read; return how many calls changed."""
    changed = 0
    for node in gm.graph.nodes:
        rule = _UNREAD.get(node.target) if node.op == "call_function" else None
        if rule is None:
            continue
        flag, unread_when, positions = rule
        if flag is not None and (len(node.args) <= flag or node.args[flag] is not unread_when):
            continue
        if all(node.args[p] is None for p in positions):
            continue
        node.args = tuple(None if i in positions else a for i, a in enumerate(node.args))
        changed += 1
    if changed:
        gm.recompile()
    return changed
