"""Versioned op sets: which ATen overloads a backend must accept.

An op set is data: a name like ``core/1``, and one entry per overload with its category, the
version it entered the set and a one-line note. Op sets are never edited once published;
adding ops makes the next version (``core/2`` = ``core/1`` + additions), built with
:meth:`OpSet.extend`. ``docs/opset.md`` is generated from this table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from . import random_ops as _random_ops  # noqa: F401  (registers torch.ops.ptc.*)
from .core1 import CORE1_TABLE
from .core2 import CORE2_ADDITIONS
from .errors import UnsupportedDialectError

CATEGORIES = (
    "pointwise",
    "comparison",
    "logical",
    "cast",
    "reduction",
    "scan",
    "view",
    "indexing",
    "creation",
    "random",
    "extern",
    "symbolic",
)
"""The categories an op-set entry can have, in the order docs list them."""


@dataclass(frozen=True, slots=True)
class OpEntry:
    """One overload in an op set: its qualified name, category, since-version and a note."""

    name: str
    category: str
    since: int
    note: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.name}: unknown category {self.category!r}")


def resolve_overload(name: str) -> torch._ops.OpOverload:
    """Return the OpOverload for a name like ``aten.add.Tensor`` or ``ptc.rand.default``."""
    namespace, op, overload = name.split(".")
    packet = getattr(getattr(torch.ops, namespace), op)
    found: torch._ops.OpOverload = getattr(packet, overload)
    return found


def overload_name(op: object) -> str:
    """Return the qualified name (``aten.add.Tensor``) of an OpOverload."""
    if isinstance(op, torch._ops.OpOverload):
        namespace = op.namespace
        return f"{namespace}.{op._schema.name.split('::', 1)[1]}.{op._overloadname}"
    return getattr(op, "__qualname__", repr(op))


@dataclass(frozen=True)
class OpSet:
    """A named, versioned set of overloads (``core/1``)."""

    family: str
    version: int
    entries: Mapping[str, OpEntry]
    fallbacks: bool = False
    """Whether nodes marked as fallbacks may call aten overloads outside ``entries``."""
    ops: frozenset[torch._ops.OpOverload] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))
        object.__setattr__(self, "ops", frozenset(resolve_overload(n) for n in self.entries))

    @property
    def name(self) -> str:
        """``family/version``, e.g. ``core/1``."""
        return f"{self.family}/{self.version}"

    def in_set(self, target: object) -> bool:
        """True when ``target`` is one of this set's overloads."""
        return target in self.ops

    def entry(self, target: object) -> OpEntry | None:
        """The entry of an overload, or None when it is not in the set."""
        return self.entries.get(overload_name(target))

    def category(self, target: object) -> str | None:
        """The category of an overload, or None when it is not in the set."""
        found = self.entry(target)
        return found.category if found else None

    def extend(self, additions: Iterable[tuple[str, str, str]], fallbacks: bool | None = None) -> OpSet:
        """Return the next version: this set plus ``(name, category, note)`` additions.

        ``fallbacks`` turns fallback nodes on for the new version (default: as this one).
        """
        version = self.version + 1
        merged = dict(self.entries)
        for name, category, note in additions:
            if name in merged:
                raise ValueError(f"{name} is already in {self.name}")
            merged[name] = OpEntry(name, category, version, note)
        return OpSet(self.family, version, merged, self.fallbacks if fallbacks is None else fallbacks)


def _build_core1() -> OpSet:
    entries = {name: OpEntry(name, category, 1, note) for name, category, note in CORE1_TABLE}
    if len(entries) != len(CORE1_TABLE):
        raise ValueError("core/1 lists an overload twice")
    return OpSet("core", 1, entries)


CORE1 = _build_core1()
CORE2 = CORE1.extend(CORE2_ADDITIONS, fallbacks=True)
OPSETS: Mapping[str, OpSet] = MappingProxyType({CORE1.name: CORE1, CORE2.name: CORE2})
"""Every published op set by name. Published sets are never edited."""

LATEST_CORE = CORE2.name


def opset(name: str) -> OpSet:
    """Return the op set called ``name`` (``core/1``, ``core/2``)."""
    try:
        return OPSETS[name]
    except KeyError:
        known = ", ".join(sorted(OPSETS))
        raise UnsupportedDialectError(
            f"unknown op set {name!r}: this ptc-spec knows {known}; upgrade ptc-spec if the graph is newer"
        ) from None
