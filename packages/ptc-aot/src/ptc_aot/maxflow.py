"""Maximum flow / minimum cut on a small directed graph (Dinic's algorithm)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

INF = math.inf


@dataclass(slots=True)
class FlowNetwork:
    """A mutable flow network: vertices are ints, ``add_edge`` adds capacity."""

    size: int
    heads: list[list[int]] = field(default_factory=list)
    to: list[int] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.heads = [[] for _ in range(self.size)]

    def add_vertex(self) -> int:
        """Add a vertex and return its number."""
        self.heads.append([])
        self.size += 1
        return self.size - 1

    def add_edge(self, u: int, v: int, capacity: float) -> None:
        """Add an edge ``u -> v`` (and its residual twin)."""
        self.heads[u].append(len(self.to))
        self.to.append(v)
        self.capacity.append(capacity)
        self.heads[v].append(len(self.to))
        self.to.append(u)
        self.capacity.append(0.0)

    def _levels(self, source: int, sink: int) -> list[int] | None:
        level = [-1] * self.size
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for e in self.heads[u]:
                v = self.to[e]
                if self.capacity[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[sink] >= 0 else None

    def _augment(self, source: int, sink: int, level: list[int], cursor: list[int]) -> float:
        # Iterative depth-first search along the level graph: deep graphs (long chains of
        # layers) would overflow Python's recursion limit.
        path: list[int] = []
        u = source
        while True:
            if u == sink:
                pushed = min(self.capacity[e] for e in path)
                if pushed == INF:
                    return INF
                for e in path:
                    self.capacity[e] -= pushed
                    self.capacity[e ^ 1] += pushed
                return pushed
            advanced = False
            while cursor[u] < len(self.heads[u]):
                e = self.heads[u][cursor[u]]
                v = self.to[e]
                if self.capacity[e] > 0 and level[v] == level[u] + 1:
                    path.append(e)
                    u = v
                    advanced = True
                    break
                cursor[u] += 1
            if not advanced:
                if u == source:
                    return 0.0
                level[u] = -1  # a dead end stays dead for the rest of this phase
                e = path.pop()
                u = self.to[e ^ 1]
                cursor[u] += 1

    def min_cut(self, source: int, sink: int) -> tuple[float, set[int]]:
        """Return the max-flow value and the source side of a minimum cut."""
        total = 0.0
        while (level := self._levels(source, sink)) is not None:
            cursor = [0] * self.size
            while (pushed := self._augment(source, sink, level, cursor)) > 0:
                if pushed == INF:
                    return INF, set(range(self.size))
                total += pushed
        reached = {source}
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for e in self.heads[u]:
                v = self.to[e]
                if self.capacity[e] > 0 and v not in reached:
                    reached.add(v)
                    queue.append(v)
        return total, reached
