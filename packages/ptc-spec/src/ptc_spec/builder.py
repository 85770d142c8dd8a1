"""GraphBuilder: build aten or core/N graphs by hand, with metadata on every node."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from .dialects import _validate_name
from .errors import DialectError
from .fallback import fallback_problem, mark_fallback
from .meta import TensorMeta
from .opset import opset, overload_name
from .shapes import SymbolEnv
from .targets import is_allowed_target
from .tracer import TracedTensor, Tracer, finish


class GraphBuilder:
    """Builds one graph op by op; each ``call`` computes the node's metadata on meta tensors.

    >>> b = GraphBuilder("core/1")
    >>> x = b.input("x", TensorMeta.of((4, 8)))
    >>> y = b.call(torch.ops.aten.exp.default, x)
    >>> b.output(y)
    >>> gm = b.build()
    """

    def __init__(self, dialect: str = "core/1", shape_env: SymbolEnv | None = None) -> None:
        """``shape_env``: the SymbolEnv of inputs with symbolic sizes (see ``dynamic_meta``)."""
        _validate_name(dialect)
        if dialect == "torch":
            raise DialectError("GraphBuilder builds aten or core/N graphs; capture torch-dialect graphs with ptc_capture")
        self.dialect = dialect
        self._tracer = Tracer(shape_env)
        self._values: dict[torch.fx.Node, TracedTensor] = {}
        self._names: set[str] = set()
        self._built = False

    def input(self, name: str, meta: TensorMeta) -> torch.fx.Node:
        """Add a graph input called ``name`` and return its node."""
        if name in self._names:
            raise ValueError(f"input name {name!r} is already used")
        self._names.add(name)
        traced = self._tracer.placeholder(name, meta)
        self._values[traced._node] = traced
        return traced._node

    def constant(self, value: torch.Tensor) -> torch.fx.Node:
        """Add a tensor constant (a ``get_attr`` node) and return its node."""
        traced = self._tracer.constant(value)
        self._values[traced._node] = traced
        return traced._node

    def call(self, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
        """Add ``op(*args, **kwargs)``; node arguments are nodes this builder returned.

        Returns the new node, or a tuple of nodes for ops with several outputs.
        """
        self._require_open()
        self._require_in_dialect(op)
        return self._add(op, args, kwargs)

    def fallback(self, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
        """Add ``op`` as a fallback call (core/2 and later): the backend runs its eager kernel.

        Returns the new node, or a tuple of nodes for ops with several outputs.
        """
        self._require_open()
        if self.dialect != "aten" and not opset(self.dialect).fallbacks:
            raise DialectError(f"{self.dialect} has no fallbacks; build a core/2 graph to call {overload_name(op)} unfused")
        problem = fallback_problem(op)
        if problem is not None:
            raise DialectError(f"{overload_name(op)} cannot be a fallback: {problem}")
        before = set(self._tracer.graph.nodes)
        result = self._add(op, args, kwargs)
        for node in self._tracer.graph.nodes:
            if node not in before and node.target is op:
                mark_fallback(node)
        return result

    def _add(self, op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def to_traced(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                try:
                    return self._values[x]
                except KeyError:
                    raise ValueError(f"node {x.name} does not belong to this builder") from None
            return x

        traced_args, traced_kwargs = pytree.tree_map(to_traced, (args, kwargs))
        result = self._tracer.dispatch(op, tuple(traced_args), dict(traced_kwargs))

        def to_node(x: Any) -> Any:
            if isinstance(x, TracedTensor):
                self._values[x._node] = x
                return x._node
            return x

        return pytree.tree_map(to_node, result)

    def output(self, *values: Any) -> None:
        """Set the graph's outputs (nodes, or nested tuples/lists of nodes)."""
        self._require_open()
        self._outputs = pytree.tree_map(lambda x: self._values[x] if isinstance(x, torch.fx.Node) else x, values)

    def build(self) -> torch.fx.GraphModule:
        """Return the finished GraphModule (its dialect recorded and checked)."""
        self._require_open()
        if not hasattr(self, "_outputs"):
            raise ValueError("call output(...) before build()")
        self._built = True
        outputs = self._outputs[0] if len(self._outputs) == 1 else tuple(self._outputs)
        return finish(self._tracer, outputs, self.dialect)

    def _require_open(self) -> None:
        if self._built:
            raise ValueError("this GraphBuilder has already built its graph; start a new one")

    def _require_in_dialect(self, op: object) -> None:
        if not isinstance(op, torch._ops.OpOverload):
            raise DialectError(f"{op!r} is not an ATen overload; pass e.g. torch.ops.aten.add.Tensor")
        if self.dialect == "aten":
            if not is_allowed_target(op):
                raise DialectError(
                    f"{overload_name(op)} is not in the aten dialect; a custom op's namespace must be registered with allow_target"
                )
            return
        if not opset(self.dialect).in_set(op):
            raise DialectError(
                f"{overload_name(op)} is not in {self.dialect}; decompose it (ptc_decomp) or build an aten graph"
            )
