"""Functionalization: rewrite a faithfully traced aten graph into one without mutation.

The pass walks the traced graph once, keeping per storage (a *root*: a graph input, a
constant or a fresh op result) its current functional value and a version number, and per
traced value its root, its view chain from the root and the version it was read at:

- a mutating call becomes its functional counterpart (``mutations.functional_form``); the
  new value of a written view is scattered back into its root, which gets a new version;
- a read of a value whose root has moved on regenerates it by replaying its view chain on
  the root's current value, so a base sees writes made through its views and vice versa;
- graph inputs whose root changed are returned as extra outputs (the caller copies them back).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_spec import META_KEY, GraphBuilder, SymbolEnv, TensorMeta, integer_valued, shape_env_of, symbolic

from .errors import UnsupportedMutationError
from .mutations import (
    IMPLICIT_WRITES,
    REWRITES,
    bind,
    call_arguments,
    functional_form,
    inplace_view_counterpart,
    with_defaults,
    written_arguments,
)
from .sizes import is_size_node
from .views import INVERSES, ViewStep, invertible, returns_list, view_source

log = logging.getLogger("ptc.aot.functionalize")
aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class FunctionalGraph:
    """A functional aten graph; its outputs are ``(*outputs, *new values of mutated_inputs, *extra)``.

    ``mutated_inputs`` are placeholder positions whose tensors the graph wrote; ``num_outputs``
    and ``num_extra`` count the leading and trailing output groups the caller asked for.
    """

    gm: torch.fx.GraphModule
    num_outputs: int
    mutated_inputs: tuple[int, ...]
    num_extra: int


@dataclass(slots=True)
class _Root:
    """Mutable state of one storage during the pass: its current value and version."""

    current: torch.fx.Node
    meta: TensorMeta | None
    placeholder: int | None = None
    version: int = 0


@dataclass(slots=True)
class _Value:
    """A traced value: the storage it lives in, its view chain, and its node at ``version``."""

    root: _Root
    chain: tuple[ViewStep, ...]
    version: int
    node: torch.fx.Node


@dataclass(slots=True)
class _Pass:
    """Mutable state of one functionalization pass.

    ``sizes`` maps the traced graph's size nodes to their values in the new graph (SymInts of
    ``env``, which the builder records as size nodes of its own when an op takes them).
    """

    env: SymbolEnv | None = None
    builder: GraphBuilder = field(init=False)
    values: dict[torch.fx.Node, _Value] = field(default_factory=dict)
    multi: dict[torch.fx.Node, list[_Value | None]] = field(default_factory=dict)
    sizes: dict[torch.fx.Node, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.builder = GraphBuilder("aten", shape_env=self.env)

    def emit(self, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
        """Add ``op``; sizes given as sympy expressions (from metadata) become the graph's sizes."""
        if self.env is not None:
            args, kwargs = pytree.tree_map(self._size, (args, kwargs))
        return self.builder.call(op, *args, **kwargs)

    def _size(self, x: Any) -> Any:
        if isinstance(x, sympy.Basic) and self.env is not None:
            return symbolic(x, self.env, _pytype(x))
        return x

    def size(self, node: torch.fx.Node) -> Any:
        """The new graph's value of a size node of the traced graph (recorded on first use)."""
        found = self.sizes.get(node)
        if found is None:
            expr = node.meta.get(META_KEY)
            if not isinstance(expr, sympy.Basic) or self.env is None:
                raise UnsupportedMutationError(f"size node {node.name} has no symbolic value in its metadata")
            found = self.sizes[node] = symbolic(expr, self.env, _pytype(expr))
        return found

    def fresh(self, node: torch.fx.Node, placeholder: int | None = None) -> _Value:
        meta = node.meta.get(META_KEY)
        return _Value(_Root(node, meta if isinstance(meta, TensorMeta) else None, placeholder), (), 0, node)

    def read(self, old: torch.fx.Node) -> Any:
        """The new graph's node holding ``old``'s value now, regenerated if its storage changed
        (for a size node: its value)."""
        if is_size_node(old):
            return self.size(old)
        value = self.values.get(old)
        if value is None:
            raise UnsupportedMutationError(f"node {old.name} is used but was never produced by the traced graph")
        if value.version == value.root.version:
            return value.node
        node = value.root.current
        for step in value.chain:
            node = step.emit(self.emit, node)
        self.values[old] = _Value(value.root, value.chain, value.root.version, node)
        return node

    def write(self, old: torch.fx.Node, new: torch.fx.Node) -> _Value:
        """Make ``new`` the value of ``old`` (a view of some root) and update the root."""
        value = self.values[old]
        root = value.root
        written, made = old.meta.get(META_KEY), new.meta.get(META_KEY)
        if isinstance(written, TensorMeta) and isinstance(made, TensorMeta) and made.dtype != written.dtype:
            # The in-place op stores into the written tensor's dtype (CUDA's functional batch
            # norm returns bf16 running statistics as float32): the graph holds the stored
            # value, so later reads and the new value handed back are what eager's tensor holds.
            new = cast(torch.fx.Node, self.emit(aten._to_copy.default, new, dtype=written.dtype))
        root.current = self._scatter(root, value.chain, new, old)
        root.version += 1
        updated = _Value(root, value.chain, root.version, new)
        self.values[old] = updated
        return updated

    def _scatter(self, root: _Root, chain: tuple[ViewStep, ...], new: torch.fx.Node, old: torch.fx.Node) -> torch.fx.Node:
        if not chain:
            return new
        if invertible(chain):
            bases = [root.current]
            for step in chain[:-1]:
                bases.append(step.emit(self.emit, bases[-1]))
            for step, base in zip(reversed(chain), reversed(bases)):
                new = INVERSES[step.target](self.emit, base, new, step)
            return new
        view_meta = old.meta.get(META_KEY)
        if root.meta is not None and root.meta.is_contiguous() and root.meta.storage_offset == 0 and isinstance(view_meta, TensorMeta):
            # Strides and offsets of a view of a contiguous, offset-0 root are positions in
            # the root's own element order, which is what as_strided_scatter takes.
            scattered = self.emit(
                aten.as_strided_scatter.default, root.current, new,
                list(view_meta.shape), list(view_meta.stride), view_meta.storage_offset,
            )
            return cast(torch.fx.Node, scattered)
        names = ", ".join(str(step.target) for step in chain)
        raise UnsupportedMutationError(
            f"node {old.name} writes through the views {names} of a non-contiguous tensor, which functionalization cannot invert"
        )


def _pytype(expr: sympy.Basic) -> type[int] | type[float] | type[bool]:
    # (A sympy Symbol is also a Boolean: conditions are recognised by their own classes.)
    if isinstance(expr, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction, sympy.logic.boolalg.BooleanAtom)):
        return bool
    return int if integer_valued(expr) else float


def functionalize(gm: torch.fx.GraphModule) -> FunctionalGraph:
    """Rewrite a traced graph returning ``(outputs, extra)`` into a FunctionalGraph (recording its SymbolEnv)."""
    state = _Pass(shape_env_of(gm))
    placeholders: list[_Value] = []
    output_node: torch.fx.Node | None = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            new = state.builder.input(node.name, node.meta[META_KEY])
            value = state.fresh(new, len(placeholders))
            placeholders.append(value)
            state.values[node] = value
        elif node.op == "get_attr":
            state.values[node] = state.fresh(state.builder.constant(getattr(gm, str(node.target))))
        elif is_size_node(node):
            continue  # computed where an op takes it (_Pass.size), by the builder's own size nodes
        elif node.op == "call_function" and node.target is operator.getitem:
            item = state.multi[cast(torch.fx.Node, node.args[0])][cast(int, node.args[1])]
            if item is None:
                raise UnsupportedMutationError(f"node {node.name} picks a non-tensor result")
            state.values[node] = item
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            _call(state, node)
        elif node.op == "output":
            output_node = node
        else:
            raise UnsupportedMutationError(f"node {node.name} ({node.op} {node.target}) is not an aten call")
    if output_node is None:
        raise UnsupportedMutationError("the traced graph has no output")
    outputs, extra = cast(tuple[Sequence[Any], Sequence[Any]], output_node.args[0])
    new_outputs = [_read_optional(state, x) for x in outputs]
    new_extra = [_read_optional(state, x) for x in extra]
    mutated = tuple(v.root.placeholder for v in placeholders if v.root.version > 0)
    mutations = [placeholders[i].root.current for i in mutated if i is not None]
    if mutated:
        log.debug("graph inputs %s are mutated; their new values become outputs", mutated)
    state.builder.output(tuple([*new_outputs, *mutations, *new_extra]))
    new_gm = state.builder.build()
    new_gm.graph.eliminate_dead_code()
    new_gm.recompile()
    return FunctionalGraph(new_gm, len(new_outputs), tuple(i for i in mutated if i is not None), len(new_extra))


def _read_optional(state: _Pass, x: Any) -> Any:
    if isinstance(x, torch.fx.Node):
        return state.read(x)
    return x


def _call(state: _Pass, node: torch.fx.Node) -> None:
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    bound = bind(target._schema, node.args, node.kwargs)
    view = inplace_view_counterpart(target)
    if view is not None:
        _inplace_view(state, node, view)
        return
    written = written_arguments(target, bound) if target._schema.is_mutable or target in IMPLICIT_WRITES else ()
    if written:
        _mutating_call(state, node, target, bound)
        return
    args, kwargs = pytree.tree_map(lambda x: state.read(x) if isinstance(x, torch.fx.Node) else x, (node.args, node.kwargs))
    out = state.emit(target, *args, **kwargs)
    source = view_source(target)
    if source is None:
        _record_results(state, node, out, lambda new, index: state.fresh(new))
        return
    base = state.values[node.args[source]]  # type: ignore[index]
    rest, kwargs = _view_arguments(state, node, tuple(a for i, a in enumerate(node.args) if i != source), node.kwargs)
    kw = tuple(sorted(kwargs.items()))

    def view_of_base(new: torch.fx.Node, index: int | None) -> _Value:
        step = ViewStep(target, rest, kw, index if returns_list(target) else None)
        return _Value(base.root, (*base.chain, step), base.root.version, new)

    _record_results(state, node, out, view_of_base)


def _inplace_view(state: _Pass, node: torch.fx.Node, view: torch._ops.OpOverload) -> None:
    """``x.transpose_(...)`` changes no data: from here on ``x`` (and the call's result) is the
    view ``transpose(x, ...)`` of the same storage, so later writes through it reach the root."""
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    if source.op == "placeholder":
        raise UnsupportedMutationError(
            f"{node.target} changes the shape or strides of graph input {source.name}, which the caller would see; "
            "apply it to a view (x = x.transpose(...)) instead"
        )
    base = state.values[source]
    rest, kwargs = _view_arguments(state, node, tuple(node.args[1:]), node.kwargs)
    out = state.emit(view, state.read(source), *rest, **kwargs)
    value = _Value(base.root, (*base.chain, ViewStep(view, rest, tuple(sorted(kwargs.items())))), base.root.version, out)
    state.values[source] = value
    state.values[node] = value


def _view_arguments(state: _Pass, node: torch.fx.Node, args: tuple[Any, ...], kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A view's arguments besides the viewed tensor, sizes made the new graph's (a view chain is
    replayed later on a new base, so tensor arguments, which would need remapping, are refused)."""

    def convert(x: Any) -> Any:
        if not isinstance(x, torch.fx.Node):
            return x
        if is_size_node(x):
            return state.size(x)
        raise UnsupportedMutationError(f"view {node.name} takes tensor arguments besides the viewed tensor")

    new_args, new_kwargs = pytree.tree_map(convert, (args, dict(kwargs)))
    return tuple(new_args), dict(new_kwargs)


def _record_results(state: _Pass, node: torch.fx.Node, out: Any, make: Any) -> None:
    if isinstance(out, torch.fx.Node):
        state.values[node] = make(out, None)
        return
    items: list[_Value | None] = []
    for i, item in enumerate(out):
        items.append(make(item, i) if isinstance(item, torch.fx.Node) else None)
    state.multi[node] = items


def _mutating_call(state: _Pass, node: torch.fx.Node, target: torch._ops.OpOverload, bound: dict[str, Any]) -> None:
    form = functional_form(target, bound)
    new_bound = {
        k: pytree.tree_map(lambda x: state.read(x) if isinstance(x, torch.fx.Node) else x, v)
        for k, v in with_defaults(target._schema, bound).items()
    }
    out: Any
    if target in REWRITES:
        out = REWRITES[target][0](state.emit, new_bound)
    else:
        args, kwargs = call_arguments(form.target._schema, new_bound)
        out = state.emit(form.target, *args, **kwargs)
    log.debug("%s: %s -> %s", node.name, target, form.target)
    written_values: dict[str, _Value] = {}
    for name, where in zip(form.written, form.new_values):
        old_arg = bound[name]
        if not isinstance(old_arg, torch.fx.Node):
            raise UnsupportedMutationError(f"{target} writes {name}, which is not a single traced tensor")
        new = out if where is None else out[where]
        written_values[name] = state.write(old_arg, new)
    results: list[_Value | None] = []
    for result in form.results:
        if isinstance(result, str):
            results.append(written_values[result])
        elif result is None:
            results.append(state.fresh(out))
        else:
            results.append(state.fresh(out[result]))
    if len(target._schema.returns) == 1 and not returns_list(target):
        state.values[node] = results[0]  # type: ignore[assignment]
    else:
        state.multi[node] = results
