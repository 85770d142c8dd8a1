"""Which handed-out outputs the user still holds, and which of those a replay overwrote."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import torch

from ptc_cudagraphs.errors import OverwrittenOutputError
from ptc_cudagraphs.tree import Node


class Liveness:
    """Weak references to the outputs of each node's last replay (one per tree).

    Every recording keeps its outputs' memory pinned, so a capture never places data in
    the outputs of an earlier recording. It may place data in an earlier recording's
    temporaries, hence: replaying node N can overwrite the outputs of N itself and of
    every node recorded after N (index >= N.index), never of earlier ones.
    """

    def __init__(self) -> None:
        self._live: dict[int, tuple[weakref.ref[torch.Tensor], Node]] = {}
        self._by_node: dict[Node, list[int]] = {}
        self._stale: dict[int, tuple[weakref.ref[torch.Tensor], str, str]] = {}

    def hand_out(self, node: Node, outputs: Sequence[object]) -> None:
        """Remember outputs (given to the user) as produced by node's latest replay."""
        ids: list[int] = []
        for out in outputs:
            if isinstance(out, torch.Tensor):
                key = id(out)
                self._live[key] = (weakref.ref(out, self._forget_live(key)), node)
                ids.append(key)
        self._by_node[node] = ids

    def producer(self, tensor: torch.Tensor) -> Node | None:
        """Return the node whose latest replay handed out tensor, or None."""
        entry = self._live.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    def invalidate_from(self, node: Node) -> int:
        """Mark held outputs that node's replay overwrites as stale; return how many."""
        marked = 0
        for other in [n for n in self._by_node if n.index >= node.index]:
            for key in self._by_node.pop(other):
                entry = self._live.pop(key, None)
                if entry is None:
                    continue
                tensor = entry[0]()
                if tensor is None:
                    continue
                ref = weakref.ref(tensor, self._forget_stale(key))
                self._stale[key] = (ref, other.name, node.name)
                marked += 1
        return marked

    def forget_nodes(self, nodes: Sequence[Node]) -> None:
        """Drop bookkeeping of removed nodes; their outputs count as overwritten."""
        for node in nodes:
            if node.index >= 0:
                self.invalidate_from_exactly(node)

    def invalidate_from_exactly(self, node: Node) -> None:
        """Mark only node's own held outputs stale (its memory is about to be released)."""
        for key in self._by_node.pop(node, []):
            entry = self._live.pop(key, None)
            tensor = entry[0]() if entry is not None else None
            if tensor is not None:
                ref = weakref.ref(tensor, self._forget_stale(key))
                self._stale[key] = (ref, node.name, "reset()")

    def is_overwritten(self, tensor: torch.Tensor) -> bool:
        """Return True when tensor is an output that a later replay overwrote."""
        entry = self._stale.get(id(tensor))
        return entry is not None and entry[0]() is tensor

    def check(self, args: Sequence[object], consumer: str) -> None:
        """Raise OverwrittenOutputError when an argument is an overwritten output."""
        if not self._stale:
            return
        for arg in args:
            entry = self._stale.get(id(arg))
            if entry is not None and entry[0]() is arg:
                _, producer, overwriter = entry
                raise OverwrittenOutputError(
                    f"{consumer} received an output of {producer} that a later run of "
                    f"{overwriter} overwrote; clone outputs you keep across calls "
                    f"(out.clone()) or call ptc_cudagraphs.mark_step_begin() between steps"
                )

    def live_count(self) -> int:
        """Return how many handed-out outputs are still held and not overwritten."""
        return sum(1 for ref, _ in self._live.values() if ref() is not None)

    def _forget_live(self, key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
        def forget(ref: weakref.ref[torch.Tensor]) -> None:
            entry = self._live.get(key)
            if entry is not None and entry[0] is ref:
                del self._live[key]

        return forget

    def _forget_stale(self, key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
        def forget(ref: weakref.ref[torch.Tensor]) -> None:
            entry = self._stale.get(key)
            if entry is not None and entry[0] is ref:
                del self._stale[key]

        return forget
