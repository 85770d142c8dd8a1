"""The reference dispatch-level tracer: run a function over meta tensors, record ATen calls.

Inputs become ``TracedTensor`` wrappers: a tensor subclass that reports the logical device
(``cuda:0`` on a machine without a GPU, say) while its data lives in a meta tensor. A
dispatch mode sees every ATen call, runs it on the meta tensors, records one FX node with
the output's TensorMeta, and wraps the results. Autograd runs above the dispatcher, so a
backward pass traced inside ``fn`` is recorded too (ptc-aot builds joint graphs this way).

Symbolic sizes: inputs made with ``dynamic_meta`` have ``torch.SymInt`` sizes over the
tracer's SymbolEnv, so every size computed from them (by meta kernels or by the traced
Python code) is symbolic, and every decision on one is a guard of the SymbolEnv. A size that
becomes an op argument (``x.view(x.shape[0] * 2, -1)``) is recorded as ``aten.sym_size.int``
of an input plus ``operator`` arithmetic, so the graph recomputes it for any input sizes.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from .device_meta import run_meta
from .dialects import check, set_dialect
from .dispatch_mode import DispatchMode
from .errors import DataDependentError, TraceError
from .meta import META_KEY, TensorMeta
from .meta_rules import MetaRulesMode
from .opset import overload_name
from .shapes import SymbolEnv, record_shape_env
from .sym_exprs import Op, Term, UnsupportedExpression, term_value, to_term
from .symnode import expr_of

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

aten = torch.ops.aten

# Ops whose output shape or value depends on tensor contents, which meta tensors lack.
_DATA_DEPENDENT = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.equal.default,
    aten.is_nonzero.default,
    aten.repeat_interleave.Tensor,
    aten.bincount.default,
}


# Questions about a tensor's layout, answered from the traced tensor itself: they record no
# node, and aten.size.default cannot run on a meta tensor with symbolic sizes at all.
_LAYOUT_QUERIES: dict[Any, Callable[..., Any]] = {
    aten.size.default: lambda t: list(t.shape),
    aten.size.int: lambda t, d: t.shape[d],
    aten.sym_size.default: lambda t: list(t.shape),
    aten.sym_size.int: lambda t, d: t.shape[d],
    aten.stride.default: lambda t: list(t.stride()),
    aten.stride.int: lambda t, d: t.stride(d),
    aten.sym_stride.default: lambda t: list(t.stride()),
    aten.sym_stride.int: lambda t, d: t.stride(d),
    aten.numel.default: lambda t: t.numel(),
    aten.sym_numel.default: lambda t: t.numel(),
    aten.storage_offset.default: lambda t: t.storage_offset(),
    aten.sym_storage_offset.default: lambda t: t.storage_offset(),
    aten.dim.default: lambda t: t.dim(),
}


class TracedTensor(torch.Tensor):
    """A tensor being traced: logical metadata outside, a meta tensor and an FX node inside."""

    _inner: torch.Tensor
    _node: torch.fx.Node
    _tracer: Tracer

    @staticmethod
    def __new__(cls, inner: torch.Tensor, node: torch.fx.Node, device: torch.device, tracer: Tracer, requires_grad: bool = False) -> TracedTensor:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=device,
            requires_grad=requires_grad,
        )
        out._inner = inner
        out._node = node
        out._tracer = tracer
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    def __repr__(self) -> str:  # type: ignore[override]
        return f"TracedTensor({self._node.name}, shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        for a in pytree.tree_leaves((args, kwargs)):
            if isinstance(a, TracedTensor):
                return a._tracer.dispatch(func, args, kwargs or {})
        raise TraceError(f"{overload_name(func)} reached a traced tensor with no active tracer")


class _TracingMode(DispatchMode):
    def __init__(self, tracer: Tracer) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracer = tracer

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.tracer.dispatch(func, args, kwargs or {})


def _runs_autograd(device: torch.device) -> bool:
    if device.type in ("cpu", "meta"):
        return True
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    return bool(is_available()) if callable(is_available) else False


def _device_argument(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[int | str, torch.device | None] | None:
    """Where the schema's ``device`` argument is, and its value, or None when there is none."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name != "device":
            continue
        if arg.kwarg_only or i >= len(args):
            value = kwargs.get("device")
            return ("device", None if value is None else torch.device(value))
        value = args[i]
        return (i, None if value is None else torch.device(value))
    return None


class Tracer:
    """Mutable state of one trace: the graph being built, the constants it captured, and its
    SymbolEnv (the symbols of symbolic input sizes and the guards the trace decided)."""

    def __init__(self, shape_env: SymbolEnv | None = None) -> None:
        self.graph = torch.fx.Graph()
        self.constants: dict[str, torch.Tensor] = {}
        self.shape_env = shape_env if shape_env is not None else SymbolEnv()
        self._constant_nodes: dict[int, tuple[torch.Tensor, TracedTensor]] = {}
        # Where the graph reads each size symbol: (placeholder, dim) of the first input with it.
        self._size_sources: dict[sympy.Symbol, tuple[torch.fx.Node, int]] = {}
        self._size_nodes: dict[Term, torch.fx.Node] = {}

    # -- inputs and constants -------------------------------------------------------------
    def placeholder(self, name: str, meta: TensorMeta) -> TracedTensor:
        """Add a graph input with metadata ``meta`` and return its traced tensor."""
        env = self.shape_env
        unknown = sorted(s.name for s in meta.symbols if s not in env.hints)
        if unknown:
            raise TraceError(
                f"input {name} has symbolic sizes {meta.shape}, but the tracer's SymbolEnv has no symbol {', '.join(unknown)};"
                " make the input with ptc_spec.dynamic_meta(meta, dims, env) and trace with shape_env=env"
            )
        if meta.requires_grad and not _runs_autograd(meta.device):
            # The autograd engine needs the device's runtime even for meta data; without it
            # torch aborts the process instead of raising.
            raise TraceError(
                f"input {name} requires grad on {meta.device}, which this torch build cannot run autograd for;"
                " trace gradients on a machine with that device, or trace on cpu"
            )
        node = self.graph.placeholder(name)
        node.meta[META_KEY] = meta
        for dim, size in enumerate(meta.shape):
            if isinstance(size, sympy.Symbol):
                self._size_sources.setdefault(size, (node, dim))
        inner = meta.replace(requires_grad=False).to_meta_tensor(env=env)
        return TracedTensor(inner, node, meta.device, self, meta.requires_grad)

    def constant(self, value: torch.Tensor) -> TracedTensor:
        """Return the traced tensor standing for a real tensor captured by the function."""
        cached = self._constant_nodes.get(id(value))
        if cached is not None:
            return cached[1]
        name = f"_tensor_constant{len(self.constants)}"
        self.constants[name] = value.detach()
        node = self.graph.get_attr(name)
        node.meta[META_KEY] = TensorMeta.from_tensor(value).replace(requires_grad=False)
        inner = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        traced = TracedTensor(inner, node, value.device, self)
        self._constant_nodes[id(value)] = (value, traced)
        return traced

    # -- one ATen call --------------------------------------------------------------------
    def dispatch(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Record ``func(*args, **kwargs)`` as a node and return traced results."""
        if func in _DATA_DEPENDENT:
            raise DataDependentError(
                f"{overload_name(func)} needs the values of a tensor, which tracing over meta tensors does not"
                " have; keep this computation outside the traced function"
            )
        if func is aten.lift_fresh.default:
            return self._traced(args[0])
        query = _LAYOUT_QUERIES.get(func)
        if query is not None and isinstance(args[0], TracedTensor):
            return query(args[0]._inner, *args[1:])

        def to_traced(x: Any) -> Any:
            return self._traced(x) if isinstance(x, torch.Tensor) else x

        args, kwargs = pytree.tree_map(to_traced, (args, kwargs))
        device = self._output_device(func, args, kwargs)
        meta_args, meta_kwargs = self._meta_arguments(func, args, kwargs)
        try:
            with symbolic_dispatch(self.shape_env):
                out = run_meta(func, meta_args, meta_kwargs, device)
        except NotImplementedError as exc:
            raise TraceError(
                f"{overload_name(func)} cannot run on meta tensors: its result depends on tensor values"
                " (e.g. boolean-mask indexing) or it has no meta kernel in this torch, so it cannot be traced"
            ) from exc

        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(out)):
            # Results that are Python values (sizes, flags) are known now and baked in.
            return out
        node_args, node_kwargs = pytree.tree_map(self._graph_value, (args, kwargs))
        node = self.graph.call_function(func, tuple(node_args), dict(node_kwargs))
        return self._wrap_outputs(func, node, out, device, args, kwargs)

    def _graph_value(self, x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return x._node
        if isinstance(x, _SYM_TYPES):
            return self.size_value(x)
        return x

    # -- sizes as graph values ------------------------------------------------------------
    def size_value(self, value: torch.SymInt | torch.SymFloat | torch.SymBool) -> Any:
        """The graph value of a symbolic size: a node computing it from the inputs, or a constant."""
        pytype = bool if isinstance(value, torch.SymBool) else float if isinstance(value, torch.SymFloat) else int
        expr = self.shape_env.simplify(expr_of(value))
        if expr.is_number or expr in (sympy.true, sympy.false):
            return pytype(expr)
        try:
            term = to_term(expr, pytype)
        except UnsupportedExpression as exc:
            raise TraceError(f"the size {expr} is an op argument, but {exc}") from exc
        return self._emit(term)

    def _emit(self, term: Term) -> Any:
        if not isinstance(term, (Op, sympy.Symbol)):
            return term
        found = self._size_nodes.get(term)
        if found is not None:
            return found
        if isinstance(term, sympy.Symbol):
            source = self._size_sources.get(term)
            if source is None:
                raise TraceError(
                    f"the graph needs size {term}, which is not the size of any dim of its inputs, so it cannot compute it"
                )
            node = self.graph.call_function(aten.sym_size.int, source)
        else:
            node = self.graph.call_function(term.fn, tuple(self._emit(a) for a in term.args))
        node.meta[META_KEY] = self.shape_env.simplify(term_value(term))
        self._size_nodes[term] = node
        return node

    def _traced(self, x: torch.Tensor) -> TracedTensor:
        if isinstance(x, TracedTensor):
            if x._tracer is not self:
                raise TraceError("a tensor from another trace leaked into this one")
            return x
        return self.constant(x)

    def _output_device(self, func: torch._ops.OpOverload, args: Any, kwargs: Any) -> torch.device:
        found = _device_argument(func, args, kwargs)
        if found is not None and found[1] is not None:
            return found[1]
        tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, TracedTensor)]
        if not tensors:
            return torch.get_default_device()
        # A 0-dim CPU tensor mixes with tensors of any device and does not decide the result's.
        for t in tensors:
            if not (t.device.type == "cpu" and t.dim() == 0):
                return t.device
        return tensors[0].device

    def _meta_arguments(self, func: torch._ops.OpOverload, args: Any, kwargs: Any) -> tuple[Any, Any]:
        meta_args, meta_kwargs = pytree.tree_map(lambda x: x._inner if isinstance(x, TracedTensor) else x, (args, kwargs))
        found = _device_argument(func, args, kwargs)
        if found is not None and found[1] is not None:
            where = found[0]
            if isinstance(where, int):
                meta_args = (*meta_args[:where], torch.device("meta"), *meta_args[where + 1 :])
            else:
                meta_kwargs = {**meta_kwargs, "device": torch.device("meta")}
        elif found is not None and found[1] is None and not any(isinstance(x, TracedTensor) for x in pytree.tree_leaves(args)):
            meta_kwargs = {**meta_kwargs, "device": torch.device("meta")}
        return tuple(meta_args), meta_kwargs

    def _wrap_outputs(self, func: torch._ops.OpOverload, node: torch.fx.Node, out: Any, device: torch.device, args: Any, kwargs: Any) -> Any:
        written = _written_arguments(func, args, kwargs)
        returns = func._schema.returns
        if isinstance(out, torch.Tensor):
            node.meta[META_KEY] = TensorMeta.from_tensor(out, device=device)
            return self._result(out, node, device, written.get(0))
        if isinstance(out, (tuple, list)):
            metas = tuple(TensorMeta.from_tensor(o, device=device) if isinstance(o, torch.Tensor) else None for o in out)
            node.meta[META_KEY] = metas if isinstance(out, tuple) else list(metas)
            results = []
            for i, item in enumerate(out):
                if not isinstance(item, torch.Tensor):
                    results.append(item)
                    continue
                getter = self.graph.call_function(operator.getitem, (node, i))
                getter.meta[META_KEY] = metas[i]
                slot = i if len(returns) > 1 else 0
                results.append(self._result(item, getter, device, written.get(slot) if len(returns) > 1 else None))
            return type(out)(results) if isinstance(out, tuple) else results
        raise TraceError(f"{overload_name(func)} returned {type(out).__name__}, which the tracer cannot record")

    def _result(self, inner: torch.Tensor, node: torch.fx.Node, device: torch.device, written: Any) -> TracedTensor:
        if isinstance(written, TracedTensor):
            # In-place and out= ops return the tensor they wrote: keep the caller's object,
            # and let later uses depend on the mutating node.
            written._node = node
            if _layout(written) != _layout(inner):
                # An in-place view op (transpose_, unsqueeze_...) re-viewed the meta tensor;
                # the wrapper's own sizes, which autograd reads, must follow.
                with torch._C._DisableTorchDispatch():
                    written.as_strided_(inner.shape, inner.stride(), inner.storage_offset())
            return written
        return TracedTensor(inner, node, device, self)


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    """Sizes, strides and offset compared as expressions: comparing SymInts would record guards."""
    return tuple(expr_of(v) for v in (*t.shape, *t.stride(), t.storage_offset()))


def _written_arguments(func: torch._ops.OpOverload, args: Any, kwargs: Any) -> dict[int, Any]:
    """Map each return slot that aliases a written argument (in-place/out=) to that argument."""
    by_set: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if (not arg.kwarg_only and i < len(args)) else kwargs.get(arg.name)
        for alias in info.before_set:
            by_set[alias] = value
    found: dict[int, Any] = {}
    for j, ret in enumerate(func._schema.returns):
        info = ret.alias_info
        if info is not None and info.is_write:
            for alias in info.before_set:
                if alias in by_set:
                    found[j] = by_set[alias]
    return found


def _input_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(count)]


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        candidate = f"{name}_{n}"
        n += 1
    taken.add(candidate)
    return candidate


def _leaves_to_traced(tracer: Tracer, value: Any, name: str, taken: set[str]) -> Any:
    leaves, spec = pytree.tree_flatten(value)
    traced = []
    for i, leaf in enumerate(leaves):
        label = name if len(leaves) == 1 else f"{name}_{i}"
        if isinstance(leaf, TensorMeta):
            traced.append(tracer.placeholder(_unique(label, taken), leaf))
        elif isinstance(leaf, torch.Tensor):
            traced.append(tracer.placeholder(_unique(label, taken), TensorMeta.from_tensor(leaf)))
        else:
            traced.append(leaf)
    return pytree.tree_unflatten(traced, spec)


def trace(
    fn: Callable[..., Any],
    *inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    dialect: str = "aten",
    shape_env: SymbolEnv | None = None,
) -> torch.fx.GraphModule:
    """Trace ``fn`` over meta tensors into a GraphModule of ATen calls (``dialect`` is checked).

    Inputs with symbolic sizes need the SymbolEnv their symbols belong to (``shape_env``); the
    graph then records that environment's symbols and guards (``shape_env_of(gm)``).
    """
    tracer = Tracer(shape_env)
    taken: set[str] = set()
    names = _input_names(fn, len(inputs))
    traced_args = [_leaves_to_traced(tracer, value, names[i], taken) for i, value in enumerate(inputs)]
    traced_kwargs = {k: _leaves_to_traced(tracer, v, k, taken) for k, v in (kwargs or {}).items()}
    with _TracingMode(tracer), symbolic_dispatch(tracer.shape_env):
        result = fn(*traced_args, **traced_kwargs)
    return finish(tracer, result, dialect)


def symbolic_dispatch(shape_env: SymbolEnv) -> contextlib.AbstractContextManager[Any]:
    """The context to run torch ops on tensors with sizes of ``shape_env`` in: torch's Python
    dispatcher when it has symbols, else nothing.

    Many C++ kernels read concrete sizes: on meta tensors with SymInt sizes they fail
    (``view``, ``expand``, slicing), and C++ composites (``upsample_nearest2d.vec``) would
    specialize every dynamic size. With the Python dispatcher, torch runs its Python meta
    kernels and decompositions, written for SymInts, instead.
    """
    if shape_env.symbols:
        stack = contextlib.ExitStack()
        stack.enter_context(torch._C._EnablePythonDispatcher())
        # Pointwise ops, norms, matmuls and views skip the reference kernels where a rule applies (see meta_rules).
        stack.enter_context(MetaRulesMode())
        return stack
    return contextlib.nullcontext()


def finish(tracer: Tracer, result: Any, dialect: str = "aten") -> torch.fx.GraphModule:
    """Close ``tracer``'s graph with ``result`` as its output and return the GraphModule."""

    def to_node(x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return x._node
        if isinstance(x, torch.Tensor):
            return tracer.constant(x)._node
        if isinstance(x, _SYM_TYPES):
            return tracer.size_value(x)
        return x

    tracer.graph.output(pytree.tree_map(to_node, result))
    gm = torch.fx.GraphModule(dict(tracer.constants), tracer.graph)
    if tracer.shape_env.symbols:
        record_shape_env(gm, tracer.shape_env)
    set_dialect(gm, dialect)
    check(gm, dialect)
    return gm


def traced_nodes(values: Any) -> Iterator[torch.fx.Node]:
    """The FX nodes behind the traced tensors in a pytree."""
    for leaf in pytree.tree_leaves(values):
        if isinstance(leaf, TracedTensor):
            yield leaf._node
