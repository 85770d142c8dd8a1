"""Side effects of a traced region, replayed in order after its graph runs.

Attribute stores on objects the frame can reach and global stores are logged in order;
mutated lists and dicts that came from the frame are rewritten with their final contents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ptc_capture.variables import Var

__all__ = ["Effect", "SideEffects", "contents_box"]


@dataclass(frozen=True, slots=True)
class Effect:
    """One mutation: ``kind`` is setattr (target.name = value), raw_setattr (object.__setattr__, past a
    class's own __setattr__), global (G[name] = value), contents, or call (a deferred call run for its effect)."""

    kind: str
    target: Var | None
    name: Any
    value: Var | None


@dataclass(slots=True)
class SideEffects:
    """The ordered log of one capture (mutable while tracing)."""

    log: list[Effect] = field(default_factory=list)
    attrs: dict[tuple[int, str], Var] = field(default_factory=dict)

    def store_attr(self, target: Var, name: str, value: Var, raw: bool = False) -> None:
        """Record ``target.name = value`` (``raw``: through object.__setattr__); later reads in the trace see ``value``."""
        self.log.append(Effect("raw_setattr" if raw else "setattr", target, name, value))
        self.attrs[(id(target.value), name)] = value

    def load_attr(self, target: Var, name: str) -> Var | None:
        """The value stored earlier in this trace, if any."""
        return self.attrs.get((id(target.value), name))

    def replay_store(self, target: Var, name: str, value: Var) -> None:
        """Record ``object.__setattr__(target, name, value)`` for an object the trace models itself
        (a userobj from the frame, whose later reads come from its box, not from here)."""
        self.log.append(Effect("raw_setattr", target, name, value))

    def has_stores(self, target: Var) -> bool:
        """Whether this trace stored any attribute on ``target``'s object."""
        return any(key[0] == id(target.value) for key in self.attrs)

    def store_global(self, name: str, value: Var) -> None:
        """Record ``G[name] = value``."""
        self.log.append(Effect("global", None, name, value))
        self.attrs[(0, name)] = value

    def load_global(self, name: str) -> Var | None:
        """The global stored earlier in this trace, if any."""
        return self.attrs.get((0, name))

    def mutate_contents(self, target: Var) -> None:
        """Mark a list or dict from the frame, or the dict storage of a userobj from the frame, as
        changed (its final contents are replayed once)."""
        box = contents_box(target)
        if box.mutated:
            return
        box.mutated = True
        self.log.append(Effect("contents", target, None, None))

    def call_after(self, call: Var) -> None:
        """Run ``call`` (a deferred Var) after the graph even if nothing uses its result (a check that raises)."""
        self.log.append(Effect("call", None, None, call))

    def values(self) -> list[Var]:
        """Every Var the replay needs."""
        found: list[Var] = []
        for effect in self.log:
            if effect.value is not None:
                found.append(effect.value)
            if effect.kind == "contents" and effect.target is not None:
                box = contents_box(effect.target)
                found.extend(box.items if isinstance(box.items, list) else box.items.values())
        return found


def contents_box(target: Var) -> Any:
    """The ListBox or DictBox holding ``target``'s contents (a userobj's storage is in its ObjBox)."""
    return target.box.items if target.kind == "userobj" else target.box
