# torch.ops overloads are untyped, so every aten call returns Any.
"""decompose: rewrite an aten-dialect graph into a core-dialect one by re-tracing it.

Every node is replayed through a ptc_spec Tracer. Core ops are recorded as they are; any
other op runs its decomposition on the traced tensors with a dispatch mode active, so the
aten calls inside are recorded too, and those outside the target set are decomposed in turn.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from ptc_spec import (
    FALLBACK_KEY,
    LATEST_CORE,
    META_KEY,
    SHAPE_ENV_KEY,
    DispatchMode,
    OpSet,
    SymbolEnv,
    TensorMeta,
    check,
    dialect_of,
    expr_of,
    fallback_problem,
    is_fallback,
    mark_fallback,
    opset,
    overload_name,
    roundtrip,
    set_dialect,
    shape_env_of,
    symbolic,
    symbolic_dispatch,
)
from ptc_spec.errors import DialectError
from ptc_spec.tracer import TracedTensor, Tracer, finish

from .complex_values import COMPLEX_REASON, returns_complex, touches_complex
from .config import Config, config_from_env
from .errors import DecompositionError, InPlaceOpError, NoDecompositionError, WrongDialectError
from .layouts import contiguous, dense, same_layout, same_shape
from .registry import Decomposition, declining, recording
from .registry import table as default_table

log = logging.getLogger("ptc.decomp.rewrite")
fallback_log = logging.getLogger("ptc.decomp.fallback")
aten = torch.ops.aten

SOURCE_KEY = "ptc_decomp_source"
"""``node.meta`` key naming the overload a node was decomposed from."""

KEPT_KEY = "ptc_decomp_kept"
"""``GraphModule.meta`` key listing the ops a caller's table chose to keep undecomposed."""

FALLBACKS_KEY = "ptc_fallbacks"
"""``GraphModule.meta`` key listing (sorted overload names) the ops left as fallback calls."""

# Their schemas mark running statistics as written, but they only write them in training
# mode; the decompositions raise InPlaceOpError when the write would really happen.
_CONDITIONALLY_MUTABLE = frozenset({aten.native_batch_norm.default})


class _Mode(DispatchMode):
    """Sends every ATen call made inside a decomposition back to the rewriter."""

    def __init__(self, rewriter: _Rewriter) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.rewriter = rewriter

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.rewriter.dispatch(func, tuple(args), dict(kwargs or {}))


def _returns_tensors(func: torch._ops.OpOverload) -> bool:
    return any("Tensor" in str(ret.type) for ret in func._schema.returns)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:157] + "..."


class _Rewriter(Tracer):
    """A Tracer that records core ops and expands every other op through its decomposition.

    When the target allows fallbacks (and ``strict`` is off), an op with no decomposition, or
    whose decomposition fails, is recorded as itself and marked as a fallback call instead.
    """

    def __init__(
        self, ops: OpSet, decompositions: Mapping[Any, Decomposition], keep: frozenset[Any], config: Config, shape_env: SymbolEnv | None = None
    ) -> None:
        super().__init__(shape_env)
        self.ops = ops
        self.decompositions = decompositions
        self.keep = keep
        self.config = config
        self.stack: list[Any] = []
        self.fallback_reasons: dict[str, str] = {}
        self.recorded: Any = None
        """The metadata of the graph node being replayed (what its decomposition must give)."""

    def may_fall_back(self, func: Any) -> bool:
        """Whether ``func`` may be recorded as a fallback call instead of failing."""
        return self.ops.fallbacks and not self.config.strict and fallback_problem(func) is None

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Record ``func`` if it is in the target set, else trace its decomposition (or fall back)."""
        if not isinstance(func, torch._ops.OpOverload):
            return super().dispatch(func, args, kwargs)
        if not _returns_tensors(func):
            # Ops over dtypes and sizes (promote_types, result_type...) that decompositions
            # call to follow eager's promotion: the tracer computes them now, no node is made.
            return super().dispatch(func, args, kwargs)
        if touches_complex(args, kwargs) and self.may_fall_back(func):
            return self.fallback(func, args, kwargs, COMPLEX_REASON)
        if self.ops.in_set(func) or func in self.keep:
            return self.record(func, args, kwargs)
        fn = self.decompositions.get(func)
        if fn is None:
            if self.may_fall_back(func):
                return self.fallback(func, args, kwargs, "no decomposition")
            chain = " -> ".join(overload_name(f) for f in self.stack)
            raise DecompositionError(
                f"the decomposition of {chain} emitted {overload_name(func)}, which is not in {self.ops.name}"
                " and has no decomposition; decompose it into core ops instead"
            )
        if len(self.stack) >= self.config.max_depth:
            chain = " -> ".join(overload_name(f) for f in self.stack[-6:])
            raise DecompositionError(f"decompositions nest deeper than {self.config.max_depth} levels ({chain}); one of them calls itself")
        start = self.last_node()
        self.stack.append(func)
        try:
            with _Mode(self), declining(self.may_fall_back(func)), recording(self.recorded if len(self.stack) == 1 else None):
                result = fn(*args, **kwargs)
            if result is NotImplemented:
                if not self.may_fall_back(func):
                    raise DecompositionError(
                        f"the decomposition of {overload_name(func)} declined (returned NotImplemented) though it may not:"
                        " check ptc_decomp.may_decline() before declining"
                    )
                self.erase_after(start)
                return self.fallback(func, args, kwargs, "its decomposition leaves this form to the eager kernel")
            return result
        except InPlaceOpError:
            raise
        except Exception as exc:
            if not self.may_fall_back(func):
                raise
            self.erase_after(start)
            return self.fallback(func, args, kwargs, f"its decomposition failed: {_first_line(exc)}")
        finally:
            self.stack.pop()

    def record(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Record ``func`` as it is; a call making a complex value from real ones (``_to_copy``
        to complex64, ``view_as_complex``) is marked as a fallback."""
        start = self.last_node()
        result = super().dispatch(func, args, kwargs)
        if returns_complex(result) and self.may_fall_back(func):
            self.mark_calls(func, start, COMPLEX_REASON)
        return result

    def mark_calls(self, func: torch._ops.OpOverload, start: torch.fx.Node | None, reason: str) -> None:
        """Mark the calls of ``func`` recorded after ``start`` as fallbacks, for ``reason``."""
        for node in self.nodes_after(start):
            if node.op == "call_function" and node.target is func:
                mark_fallback(node)
        self.fallback_reasons.setdefault(overload_name(func), reason)

    def fallback(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], reason: str) -> Any:
        """Record ``func`` itself as a marked fallback call and return its traced results."""
        start = self.last_node()
        result = Tracer.dispatch(self, func, args, kwargs)
        self.mark_calls(func, start, reason)
        return result

    def last_node(self) -> torch.fx.Node | None:
        """The graph's last node so far (None while it is empty)."""
        return next(iter(reversed(self.graph.nodes)), None)  # torch 2.11: reversed() gives a list view, not an iterator

    def nodes_after(self, start: torch.fx.Node | None) -> list[torch.fx.Node]:
        """The nodes recorded after ``start`` (all of them when ``start`` is None)."""
        found: list[torch.fx.Node] = []
        current = start.next if start is not None else next(iter(self.graph.nodes), None)
        while current is not None and current.op != "root":
            found.append(current)
            current = current.next
        return found

    def erase_after(self, start: torch.fx.Node | None) -> None:
        """Drop what a failed decomposition recorded after ``start``.

        Constants stay: the tracer caches their get_attr nodes for later uses.
        """
        for node in reversed(self.nodes_after(start)):
            if node.op != "get_attr":
                self.graph.erase_node(node)


def decompose(
    gm: torch.fx.GraphModule,
    target: str = LATEST_CORE,
    table: Mapping[Any, Decomposition] | None = None,
    *,
    strict: bool | None = None,
    config: Config | None = None,
) -> torch.fx.GraphModule:
    """Return a new GraphModule computing ``gm`` with only ops of ``target`` (plus ops a custom ``table`` leaves out).

    ``table`` defaults to ``ptc_decomp.table(target)``; an op its default table decomposes but a
    caller's table omits is kept as it is, and the result is then recorded as an aten graph.
    When ``target`` allows fallbacks, ops that have no decomposition or whose decomposition
    fails become marked fallback calls (listed in ``meta[FALLBACKS_KEY]``) unless ``strict``
    (default: ``config.strict``) asks for the errors instead.
    """
    config = config or config_from_env()
    if strict is not None and strict != config.strict:
        config = replace(config, strict=strict)
    ops = opset(target)
    _require_aten(gm)
    if config.check_boundaries:
        gm = roundtrip(gm)
    full = default_table(target)
    decompositions = full if table is None else dict(table)
    keep = frozenset(op for op in full if op not in decompositions)
    # A symbolic graph is replayed over symbolic traced tensors of its own SymbolEnv, so the
    # decompositions' size arithmetic becomes graph nodes and any decision they make on a
    # size becomes a guard recorded with the result (``ptc_spec.shape_env_of(out)``).
    rewriter = _Rewriter(ops, decompositions, keep, config, shape_env_of(gm))
    _reject(gm, rewriter)
    with torch.no_grad(), symbolic_dispatch(rewriter.shape_env):
        result = _replay(gm, rewriter)
    out = finish(rewriter, result, "aten")
    # The result's SymbolEnv is the rewriter's: the input's guards plus any its decompositions added.
    out.meta.update({k: v for k, v in gm.meta.items() if k not in ("ptc_dialect", KEPT_KEY, FALLBACKS_KEY, SHAPE_ENV_KEY)})
    _record_fallbacks(out, rewriter)
    kept = sorted({overload_name(n.target) for n in out.graph.nodes if n.op == "call_function" and n.target in keep})
    if kept:
        out.meta[KEPT_KEY] = kept
        log.info("kept %d op(s) outside %s at the caller's request: %s", len(kept), target, ", ".join(kept))
        return out
    set_dialect(out, target)
    check(out, target)
    log.debug("decomposed %d nodes into %d", len(gm.graph.nodes), len(out.graph.nodes))
    return out


def _record_fallbacks(out: torch.fx.GraphModule, rewriter: _Rewriter) -> None:
    # Read from the final graph: a fallback made inside a decomposition that later failed
    # as a whole was erased with it.
    names = sorted({overload_name(n.target) for n in out.graph.nodes if n.op == "call_function" and is_fallback(n)})
    if not names:
        return
    out.meta[FALLBACKS_KEY] = names
    reasons = ", ".join(f"{name} ({rewriter.fallback_reasons.get(name, 'marked in the input')})" for name in names)
    fallback_log.info("%d op(s) run unfused as eager fallbacks in %s: %s", len(names), rewriter.ops.name, reasons)


def _require_aten(gm: torch.fx.GraphModule) -> None:
    found = dialect_of(gm)
    if found == "aten" or (found is not None and found.startswith("core/")):
        return
    if found is None:
        try:
            check(gm, "aten")
        except DialectError as exc:
            raise WrongDialectError(
                f"decompose needs an aten-dialect graph, but this graph records no dialect and is not aten ({exc})"
            ) from exc
        return
    raise WrongDialectError(
        f"decompose needs an aten-dialect graph, but this graph is in the {found} dialect;"
        " trace it to aten first (ptc_aot or ptc_spec.trace)"
    )


def _summary(labels: Iterable[str]) -> str:
    return ", ".join(f"{label} (x{n})" if n > 1 else label for label, n in sorted(Counter(labels).items()))


def _reject(gm: torch.fx.GraphModule, rewriter: _Rewriter) -> None:
    ops = rewriter.ops
    mutating: list[str] = []
    missing: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = overload_name(node.target)
        if node.target._schema.is_mutable and node.target not in _CONDITIONALLY_MUTABLE:
            mutating.append(f"{name} at node {node.name}")
        elif ops.in_set(node.target) or node.target in rewriter.decompositions or node.target in rewriter.keep:
            continue
        elif rewriter.may_fall_back(node.target):
            continue
        elif ops.fallbacks and not rewriter.config.strict:
            missing.append(f"{name} ({fallback_problem(node.target)})")
        else:
            missing.append(name)
    if mutating:
        raise InPlaceOpError(
            f"decompose takes functional graphs, but {len(mutating)} node(s) mutate a tensor: "
            f"{', '.join(mutating)}; functionalize the graph first (ptc_aot does)"
        )
    if missing and ops.fallbacks and not rewriter.config.strict:
        raise NoDecompositionError(
            f"{len(missing)} node(s) use ops that are not in {ops.name}, have no decomposition and cannot run as fallbacks: "
            f"{_summary(missing)}; register a decomposition with @ptc_decomp.register_decomposition"
        )
    if missing:
        raise NoDecompositionError(
            f"{len(missing)} node(s) use ops that are not in {ops.name} and have no decomposition: "
            f"{_summary(missing)}; register one with @ptc_decomp.register_decomposition"
        )


def _replay(gm: torch.fx.GraphModule, rewriter: _Rewriter) -> Any:
    env: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = rewriter.placeholder(node.name, node.meta[META_KEY])
        elif node.op == "get_attr":
            env[node] = rewriter.constant(_attribute(gm, str(node.target)))
        elif node.op == "call_function":
            env[node] = _replay_call(node, env, rewriter)
        elif node.op == "output":
            return torch.fx.map_arg(node.args[0], lambda n: env[n])
        else:
            raise WrongDialectError(f"node {node.name} is a {node.op}, which aten graphs do not have; trace the graph to aten first")
    raise WrongDialectError("the graph has no output node")


def _attribute(gm: torch.fx.GraphModule, target: str) -> torch.Tensor:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _replay_call(node: torch.fx.Node, env: dict[torch.fx.Node, Any], rewriter: _Rewriter) -> Any:
    args = torch.fx.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.map_arg(node.kwargs, lambda n: env[n])
    if not isinstance(node.target, torch._ops.OpOverload):
        # operator.getitem on multi-output ops and arithmetic on (concrete) sizes.
        return node.target(*args, **kwargs)  # type: ignore[operator]
    last = rewriter.last_node()
    decomposed = not rewriter.ops.in_set(node.target) and node.target not in rewriter.keep
    rewriter.recorded = node.meta.get(META_KEY)
    try:
        result = rewriter.dispatch(node.target, tuple(args), dict(kwargs))
    except (DecompositionError, InPlaceOpError):
        raise
    except Exception as exc:
        raise DecompositionError(f"decomposing node {node.name} ({overload_name(node.target)}) failed: {exc}") from exc
    if decomposed:
        try:
            result = _match_metadata(node, result, rewriter)
        except DecompositionError as exc:
            if not rewriter.may_fall_back(node.target) or _fell_back(rewriter, last, node.target):
                raise
            # A decomposition whose result disagrees with the op's metadata is wrong for this
            # form; the op itself is right by definition, so run it unfused.
            rewriter.erase_after(last)
            result = rewriter.fallback(node.target, tuple(args), dict(kwargs), f"its decomposition is wrong here: {_first_line(exc)}")
            result = _match_metadata(node, result, rewriter)
    _annotate(node, last, rewriter.graph, decomposed)
    return result


def _fell_back(rewriter: _Rewriter, last: torch.fx.Node | None, target: Any) -> bool:
    return any(n.target is target and is_fallback(n) for n in rewriter.nodes_after(last))


def _match_metadata(node: torch.fx.Node, result: Any, rewriter: _Rewriter) -> Any:
    expected = node.meta.get(META_KEY)
    if expected is None:
        return result
    if isinstance(expected, TensorMeta):
        return _match_tensor(node, result, expected, rewriter)
    if isinstance(expected, (tuple, list)) and isinstance(result, (tuple, list)) and len(expected) == len(result):
        items = [_match_tensor(node, r, e, rewriter) if isinstance(e, TensorMeta) else r for r, e in zip(result, expected)]
        return type(result)(items) if isinstance(result, tuple) else items
    raise DecompositionError(f"the decomposition of node {node.name} ({overload_name(node.target)}) returned {_describe(result)}, expected {_describe(expected)}")


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{len(value)} values"
    return type(value).__name__


def _match_tensor(node: torch.fx.Node, value: Any, expected: TensorMeta, rewriter: _Rewriter) -> Any:
    if not isinstance(value, TracedTensor):
        raise DecompositionError(f"the decomposition of node {node.name} ({overload_name(node.target)}) returned {_describe(value)}, expected a tensor")
    env = rewriter.shape_env
    if not same_shape(env, tuple(value.shape), expected.shape) or value.dtype != expected.dtype:
        raise DecompositionError(
            f"the decomposition of node {node.name} ({overload_name(node.target)}) returned shape {_shape_text(value.shape)}"
            f" {value.dtype}, but the op gives {_shape_text(expected.shape)} {expected.dtype}; the decomposition is wrong"
        )
    if not rewriter.config.restride or same_layout(env, value, expected):
        return value
    return _restride(value, expected, rewriter)


def _shape_text(shape: Any) -> str:
    return "(" + ", ".join(str(expr_of(s) if not isinstance(s, int) else s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _restride(value: TracedTensor, expected: TensorMeta, rewriter: _Rewriter) -> Any:
    env = rewriter.shape_env
    if not dense(env, expected):
        log.debug("cannot restride to %s", expected.stride)
        return value
    shape = [symbolic(s, env) for s in expected.shape]
    stride = [symbolic(s, env) for s in expected.stride]
    with _Mode(rewriter):
        if contiguous(env, expected):
            return aten.clone.default(value, memory_format=torch.contiguous_format)
        buffer = aten.empty_strided.default(shape, stride, dtype=value.dtype, device=value.device)
        return aten.as_strided_scatter.default(buffer, value, shape, stride, 0)


def _annotate(node: torch.fx.Node, last: torch.fx.Node | None, graph: torch.fx.Graph, decomposed: bool) -> None:
    """Copy the source node's metadata (stack trace, module path...) onto every node made for it."""
    # The fallback mark belongs to the node that calls the op, never to what it became.
    inherited = {k: v for k, v in node.meta.items() if k not in (META_KEY, FALLBACK_KEY)}
    current = last.next if last is not None else next(iter(graph.nodes), None)
    while current is not None and current.op != "root":
        for key, value in inherited.items():
            current.meta.setdefault(key, value)
        if decomposed and not (current.target is node.target and is_fallback(current)):
            current.meta.setdefault(SOURCE_KEY, overload_name(node.target))
        current = current.next

