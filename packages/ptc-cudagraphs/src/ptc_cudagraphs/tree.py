"""The tree of recordings of one device: nodes keyed by execution path, and generations."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ptc_cudagraphs.recording import Recording

FORWARD = "forward"
BACKWARD = "backward"
ROOT = "root"

ChildKey = tuple[int, Hashable]


@dataclass(eq=False)
class Node:
    """One recording (or one still warming up) reached by one path from the root."""

    function_id: int
    name: str
    role: str
    key: Hashable
    parent: Node | None
    # Order of recording within the tree's pool; -1 until recorded. A replay can only
    # overwrite memory of nodes recorded after it (see liveness.py).
    index: int = -1
    recording: Recording | None = None
    out_spec: Any = None
    owned_positions: tuple[int, ...] = ()
    warmups: int = 0
    replays: int = 0
    children: dict[ChildKey, Node] = field(default_factory=dict)

    def path(self) -> Iterator[Node]:
        """Yield this node and its ancestors up to (excluding) the root."""
        node: Node | None = self
        while node is not None and node.role != ROOT:
            yield node
            node = node.parent


def starts_new_generation(
    *, pending_mark: bool, auto: bool, current: Node, function_id: int, role: str
) -> bool:
    """Return True when a call of function_id must start again from the root."""
    if pending_mark:
        return True
    if not auto or current.role == ROOT:
        return False
    # The previous step's backward finished: whatever comes next is a new step.
    if current.role == BACKWARD and role == FORWARD:
        return True
    # A forward already on the path is called again: the program started its next step.
    if role == FORWARD:
        return any(node.function_id == function_id for node in current.path())
    return False


class Tree:
    """All nodes of one device, the current position and the generation counter."""

    def __init__(self) -> None:
        self.root = Node(function_id=-1, name="<root>", role=ROOT, key=None, parent=None)
        self.current = self.root
        self.generation = 0
        self.pending_mark = False
        self._next_index = 0

    def begin_generation(self) -> None:
        """Move back to the root: outputs of the previous generation may be overwritten."""
        self.current = self.root
        self.generation += 1
        self.pending_mark = False

    def child(self, function_id: int, key: Hashable) -> Node | None:
        """Return the current node's child for this call, or None when the path is new."""
        return self.current.children.get((function_id, key))

    def add_child(self, function_id: int, name: str, role: str, key: Hashable) -> Node:
        """Create an unrecorded child of the current node for this call."""
        return self.add_child_under(self.current, function_id, name, role, key)

    def add_child_under(
        self, parent: Node, function_id: int, name: str, role: str, key: Hashable
    ) -> Node:
        """Create an unrecorded child of parent (which need not be the current node)."""
        node = Node(function_id=function_id, name=name, role=role, key=key, parent=parent)
        parent.children[(function_id, key)] = node
        return node

    def assign_index(self, node: Node) -> None:
        """Give node its place in the pool's recording order."""
        node.index = self._next_index
        self._next_index += 1

    def move_to(self, node: Node) -> None:
        """Make node the end of the current path."""
        self.current = node

    def remove(self, node: Node) -> None:
        """Detach node and its subtree (a path that will not be recorded)."""
        if node.parent is not None:
            node.parent.children.pop((node.function_id, node.key), None)
        if self._contains(node, self.current):
            self.current = node.parent or self.root

    def drop_function(self, function_id: int) -> list[Node]:
        """Remove every node of function_id (with its subtree); return the removed nodes."""
        removed: list[Node] = []
        for node in list(self.nodes()):
            parent = node.parent
            if node.function_id == function_id and parent is not None and (
                (node.function_id, node.key) in parent.children
            ):
                removed.extend(_subtree(node))
                self.remove(node)
        return removed

    def nodes(self) -> Iterator[Node]:
        """Yield every node except the root, parents before children."""
        stack = list(reversed(self.root.children.values()))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))

    def dump(self) -> str:
        """Return the tree as indented text, the current node marked with '*'."""
        lines = [f"tree generation={self.generation}"]
        self._dump(self.root, 0, lines)
        return "\n".join(lines)

    def _dump(self, node: Node, depth: int, lines: list[str]) -> None:
        for child in node.children.values():
            state = f"#{child.index}" if child.recording is not None else "warming"
            mark = " *" if child is self.current else ""
            nbytes = child.recording.nbytes if child.recording is not None else 0
            lines.append(
                f"{'  ' * (depth + 1)}{child.name} [{child.role}] {state} "
                f"replays={child.replays} out_bytes={nbytes}{mark}"
            )
            self._dump(child, depth + 1, lines)

    @staticmethod
    def _contains(ancestor: Node, node: Node) -> bool:
        probe: Node | None = node
        while probe is not None:
            if probe is ancestor:
                return True
            probe = probe.parent
        return False


def _subtree(node: Node) -> list[Node]:
    out = [node]
    for child in node.children.values():
        out.extend(_subtree(child))
    return out
