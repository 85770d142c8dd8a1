"""Graph dialects (torch, aten, core/N) and the check that a graph stays inside one."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable

import torch
import torch.fx

from .errors import DialectError, SerializationError, UnsupportedDialectError
from .fallback import fallback_problem, is_fallback
from .opset import OPSETS, opset, overload_name
from .targets import is_allowed_method, is_allowed_target, target_name

DIALECT_KEY = "ptc_dialect"
"""Key of ``GraphModule.meta`` holding the graph's dialect name."""

BASE_DIALECTS = ("torch", "aten")

# Python-level functions an aten/core graph may call: unpacking multi-output ops, and
# arithmetic on symbolic sizes between sym_size nodes and view/expand arguments.
_SIZE_ARITHMETIC = frozenset(
    {
        operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
        operator.mod, operator.neg, operator.truediv, operator.eq, operator.ne, operator.lt,
        operator.le, operator.gt, operator.ge, operator.pow, operator.and_, operator.or_,
        operator.not_, torch.sym_max, torch.sym_min, torch.sym_float,
    }
)

_FIX_HINT = {
    "torch": "capture it again with ptc_capture",
    "aten": "trace it to aten first (ptc_spec.trace or ptc_aot)",
}


def known_dialects() -> list[str]:
    """Every dialect name this ptc-spec understands."""
    return [*BASE_DIALECTS, *sorted(OPSETS)]


def _validate_name(dialect: str) -> None:
    if dialect not in BASE_DIALECTS and dialect not in OPSETS:
        if dialect.startswith("core/"):
            opset(dialect)  # raises the versioned message
        raise UnsupportedDialectError(f"unknown dialect {dialect!r}: expected one of {', '.join(known_dialects())}")


def dialect_of(gm: torch.fx.GraphModule) -> str | None:
    """The dialect recorded on ``gm``, or None when it has none."""
    value = getattr(gm, "meta", {}).get(DIALECT_KEY)
    return value if isinstance(value, str) else None


def set_dialect(gm: torch.fx.GraphModule, dialect: str) -> torch.fx.GraphModule:
    """Record ``dialect`` on ``gm`` and return it."""
    _validate_name(dialect)
    gm.meta[DIALECT_KEY] = dialect
    return gm


def _node_label(node: torch.fx.Node) -> str:
    if is_fallback(node) and isinstance(node.target, torch._ops.OpOverload):
        return f"fallback {overload_name(node.target)} ({fallback_problem(node.target) or 'fallbacks need core/2 or later'})"
    if node.op == "call_method":
        return f"method {node.target}"
    if node.op == "call_module":
        return f"module {node.target}"
    if isinstance(node.target, torch._ops.OpOverload):
        return overload_name(node.target)
    try:
        return target_name(node.target)
    except SerializationError:
        return f"{getattr(node.target, '__module__', '?')}.{getattr(node.target, '__qualname__', node.target)}"


def _is_aten_target(target: object) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        # aten and ptc ops, and custom ops of namespaces registered with allow_target (a user's
        # torch.library ops), which the aten dialect carries as they are and core/N as fallbacks.
        return is_allowed_target(target)
    return target in _SIZE_ARITHMETIC


def _offends(node: torch.fx.Node, dialect: str) -> bool:
    if node.op in ("placeholder", "output", "get_attr"):
        return False
    if node.op == "call_module":
        return True
    if dialect == "torch":
        if node.op == "call_method":
            return not isinstance(node.target, str) or not is_allowed_method(node.target)
        try:
            target_name(node.target)
        except SerializationError:
            return True
        return False
    if node.op != "call_function" or not _is_aten_target(node.target):
        return True
    if dialect == "aten":
        return False
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    ops = opset(dialect)
    if ops.in_set(node.target):
        return False
    return not (ops.fallbacks and is_fallback(node) and fallback_problem(node.target) is None)


def offending_nodes(gm: torch.fx.GraphModule, dialect: str) -> list[torch.fx.Node]:
    """The nodes of ``gm`` that are not allowed in ``dialect``."""
    _validate_name(dialect)
    return [n for n in gm.graph.nodes if _offends(n, dialect)]


def _summary(labels: Iterable[str]) -> str:
    counts = Counter(labels)
    parts = [f"{label} (x{n})" if n > 1 else label for label, n in counts.items()]
    return ", ".join(parts)


def check(gm: torch.fx.GraphModule, dialect: str) -> None:
    """Raise DialectError listing every node of ``gm`` outside ``dialect``."""
    bad = offending_nodes(gm, dialect)
    if not bad:
        return
    noun = "node is" if len(bad) == 1 else "nodes are"
    where = f"in {dialect}" if dialect.startswith("core/") else f"in the {dialect} dialect"
    hint = _FIX_HINT.get(dialect, "run ptc_decomp.decompose first")
    raise DialectError(f"{len(bad)} {noun} not {where}: {_summary(_node_label(n) for n in bad)} — {hint}")


def require_dialect(gm: torch.fx.GraphModule, accepted: Iterable[str], consumer: str) -> str:
    """Return ``gm``'s dialect if ``consumer`` accepts it, else raise UnsupportedDialectError."""
    allowed = list(accepted)
    found = dialect_of(gm)
    if found in allowed:
        return found
    if found is None:
        raise UnsupportedDialectError(
            f"{consumer} needs a graph in {' or '.join(allowed)}, but this graph records no dialect;"
            " set one with ptc_spec.set_dialect after checking it"
        )
    raise UnsupportedDialectError(
        f"{consumer} supports {', '.join(allowed)}, but the graph is in {found};"
        f" upgrade {consumer} or produce {allowed[-1]} instead"
    )
