"""The torch-dialect FX graph being built during one capture (mutable while tracing).

Every node gets its metadata by running the op on meta tensors: ``node.meta[META_KEY]`` is a
TensorMeta (or a tuple of them for multi-output ops). Inside an autocast region the dtypes come
from running the op once more on ptc-spec traced tensors, which keep their real device and so
go through autocast as eager's tensors do (meta tensors never do).

Inputs with dynamic dims have meta tensors with SymInt sizes over the graph's SymbolEnv, so ops
run on symbolic meta tensors (inside ptc-spec's ``symbolic_dispatch``) and their TensorMeta is
symbolic; sizes passed to ops become graph values (``symbolic_sizes.SizeNodes``). An op whose
meta kernel cannot take symbolic sizes but runs at the example sizes is specialized: each symbol
of its arguments is guarded to its example value, as torch.compile does.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_capture.autocast_state import AutocastState, applied
from ptc_capture.guards import Source
from ptc_capture.logs import channel
from ptc_capture.symbolic_sizes import SizeNodes, free_symbols, hinted, mentions_symbols, symbolic_index
from ptc_capture.variables import Var, size_var
from ptc_spec import (
    META_KEY,
    DispatchMode,
    PlainMetaMode,
    SymbolEnv,
    TensorMeta,
    Tracer,
    dynamic_meta,
    on_meta_device,
    record_shape_env,
    set_dialect,
    symbolic_dispatch,
)

_dynamic_log = channel("dynamic")

__all__ = ["GraphState", "MetaFailure"]


class _SymbolicFactoriesOnMeta(DispatchMode):
    """Factories of symbolic size made inside an op's meta run create meta tensors.

    torch's Python meta kernels built from references (``nll_loss``'s makes
    ``torch.arange(batch_size)``) create helper tensors on the CPU, where their size would
    have to be concrete: that would specialize a dynamic dim for nothing. Composite ops are
    decomposed with this mode still active, so the factories inside them come here too.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        flat = pytree.tree_leaves((args, kwargs))
        if not any(isinstance(a, torch.Tensor) for a in flat):
            if any(isinstance(a, (torch.SymInt, torch.SymFloat)) for a in flat) and any(a.name == "device" for a in func._schema.arguments):
                args, kwargs = on_meta_device(func, tuple(args), dict(kwargs))
            return func(*args, **kwargs)
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        return func(*args, **kwargs)


_NO_MODE = contextlib.nullcontext()


class MetaFailure(Exception):
    """Running an op on meta tensors failed (data-dependent op, or an error eager would raise)."""


def _device_hint(args: Any, kwargs: dict[str, Any], default: torch.device) -> torch.device:
    # Meta tensors forget their device, so the logical device of a result is taken from an
    # explicit device argument (factories, .to(), .cuda()) or else from the first tensor input.
    for value in list(kwargs.values()) + list(args):
        if isinstance(value, torch.device):
            return value
        if isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "meta", "xpu", "mps"):
            return torch.device(value)
    return default


@dataclass(slots=True)
class GraphState:
    """The graph under construction plus the sources of its placeholders."""

    graph: torch.fx.Graph = field(default_factory=torch.fx.Graph)
    input_sources: list[Source] = field(default_factory=list)
    input_vars: list[Var] = field(default_factory=list)
    op_count: int = 0
    autocast: AutocastState | None = None
    """The autocast state of the ops recorded next, when some device type casts (else None)."""
    shape_env: SymbolEnv = field(default_factory=SymbolEnv)
    """The symbols of the dynamic input dims and the guards the trace decided on them."""
    sizes: SizeNodes = field(init=False)

    def __post_init__(self) -> None:
        self.sizes = SizeNodes(self.graph, self.shape_env)

    def placeholder(self, tensor: torch.Tensor, source: Source, dims: tuple[int, ...] = ()) -> Var:
        """Add a graph input read from ``source`` and return its Var; ``dims`` become symbolic.

        Raises ValueError when ``dims`` are asked of a layout that is not dense (its strides
        would not follow the sizes).
        """
        meta = TensorMeta.from_tensor(tensor)
        if dims:
            meta = dynamic_meta(meta, dims, self.shape_env)
        name = _placeholder_name(source, len(self.input_sources))
        if any(v.node is not None and v.node.target == name for v in self.input_vars):
            # Two sources that read alike (d['s'] through the subclass's __getitem__ and
            # through dict's own) are two parameters of the generated forward.
            name = f"{name}_{len(self.input_sources)}"
        node = self.graph.placeholder(name)
        node.meta[META_KEY] = meta
        example = meta.to_meta_tensor(env=self.shape_env)
        self.sizes.add_input(node, meta)
        var = Var("tensor", type(tensor), node=node, meta=meta, example=example, source=source)
        self.input_sources.append(source)
        self.input_vars.append(var)
        return var

    def size_sources(self) -> dict[str, tuple[Source, int | None]]:
        """Each size symbol -> the input (its source) and dim it is read from at run time (None: an int argument)."""
        by_node = {id(v.node): s for v, s in zip(self.input_vars, self.input_sources)}
        found: dict[str, tuple[Source, int | None]] = {sym.name: (src, None) for sym, src in self.sizes.int_sources.items()}
        for sym, (node, dim) in self.sizes.sources.items():
            found.setdefault(sym.name, (by_node[id(node)], dim))
        return found

    def call(
        self, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grad: bool, mutates: bool = False,
        factory: bool = False,
    ) -> Var:
        """Record ``target(*args, **kwargs)`` (op is call_function or call_method) and return the result Var.

        Calls without a tensor result are folded to constants unless ``mutates`` says the call
        changes a tensor in place (``x[i] = v``), which must stay in the graph.
        """
        fx_args, meta_args, device = _lower(args, self.sizes)
        fx_kwargs, meta_kwargs, kdevice = _lower(kwargs, self.sizes)
        device = _device_hint(meta_args, meta_kwargs, device or kdevice or torch.device("cpu"))
        if factory or (op == "call_method" and str(target).startswith("new_") and "device" in meta_kwargs):
            # (x.new_ones(..., device=d) is a factory too: on a real device its meta run would
            # allocate, and need concrete sizes.)
            meta_kwargs = {**meta_kwargs, "device": "meta"}
        if op == "call_method" and target in _DEVICE_MOVES:
            # A meta tensor cannot be copied to a real device; the move is run meta to meta and
            # the logical device comes from the hint above.
            target_meta, meta_args, meta_kwargs = _meta_move(target, meta_args, meta_kwargs)
        else:
            target_meta = target
        result = self._run_meta(op, target, target_meta, meta_args, meta_kwargs, grad)
        if factory and not isinstance(result, torch.Tensor):
            raise MetaFailure(f"{_label(op, target)} is not a tensor factory")
        if self.autocast is not None and not factory and not (op == "call_method" and target in _DEVICE_MOVES):
            with torch.set_grad_enabled(grad), symbolic_dispatch(self.shape_env):
                result = _recast(result, self._autocast_result(op, target, args, kwargs))
        if not _has_tensor(result):
            if mutates:
                self.graph.create_node(op, target, tuple(fx_args), dict(fx_kwargs)).meta[META_KEY] = None
                self.op_count += 1
            return _constant_result(result)
        node = self.graph.create_node(op, target, tuple(fx_args), dict(fx_kwargs))
        self.op_count += 1
        return self._wrap_result(node, result, device)

    def constant_call(self, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], value: torch.Tensor) -> Var:
        """Record a call of Python values alone whose real result, ``value``, the trace computed
        (it takes no device argument, so it cannot run on the meta device as factories do)."""
        fx_args, _, _ = _lower(args, self.sizes)
        fx_kwargs, _, _ = _lower(kwargs, self.sizes)
        node = self.graph.create_node(op, target, tuple(fx_args), dict(fx_kwargs))
        self.op_count += 1
        return self._wrap_result(node, value.to("meta"), value.device)

    def _run_meta(self, op: str, target: Any, target_meta: Any, meta_args: Any, meta_kwargs: dict[str, Any], grad: bool) -> Any:
        """Run the op on meta tensors (symbolic ones under ptc-spec's symbolic_dispatch)."""
        env = self.shape_env

        def run(call_args: Any, call_kwargs: dict[str, Any]) -> Any:
            fn: Callable[..., Any] = getattr(call_args[0], target_meta) if op == "call_method" else target
            # PlainMetaMode, outermost, answers pointwise ops on meta tensors without torch's
            # Python reference kernels, whose wrapper would import torch's Dynamo compiler (a second).
            with torch.set_grad_enabled(grad), PlainMetaMode(), symbolic_dispatch(env), _SymbolicFactoriesOnMeta() if env.symbols else _NO_MODE:
                if target in _INDEXING:
                    found = _symbolic_indexing(target, call_args)
                    if found is not _NOT_HANDLED:
                        return found
                return fn(*(call_args[1:] if op == "call_method" else call_args), **call_kwargs)

        try:
            return run(meta_args, meta_kwargs)
        except Exception as exc:
            failure = MetaFailure(f"{_label(op, target)} failed on meta tensors: {exc}")
            if not mentions_symbols((meta_args, meta_kwargs)):
                raise failure from exc
            try:
                result = run(hinted(meta_args, env), hinted(meta_kwargs, env))
            except Exception:
                raise failure from exc
        # The kernel runs at the example sizes but not over symbols: specialize them (guarded).
        symbols = sorted(free_symbols((meta_args, meta_kwargs)), key=str)
        for sym in symbols:
            env.guard_int(sym)
        _dynamic_log.debug("%s cannot take symbolic sizes; specialized %s", _label(op, target), ", ".join(map(str, symbols)))
        return result

    def _autocast_result(self, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the op on traced tensors under the traced autocast state (its outputs carry autocast's dtypes)."""
        assert self.autocast is not None
        # Only the result's dtypes are read, and autocast picks them without looking at sizes:
        # the op runs at the example sizes (a symbolic slice bound would need a graph input dim).
        env = self.shape_env
        tracer = Tracer()
        traced: dict[int, torch.Tensor] = {}

        # Inputs that do not require grad are never put in autocast's weight-cast cache, so
        # nothing traced outlives this call.
        def lift(var: Var) -> torch.Tensor:
            found = traced.get(id(var.node))
            if found is None:
                assert var.meta is not None
                meta = var.meta.replace(requires_grad=False)
                if meta.is_symbolic:
                    meta = TensorMeta.from_tensor(meta.to_meta_tensor(hints=env.hints), device=meta.device)
                found = tracer.placeholder(f"input{len(traced)}", meta)
                traced[id(var.node)] = found
            return found

        try:
            call_args = hinted(_map_vars(args, lift), env)
            call_kwargs = hinted(_map_vars(kwargs, lift), env)
            fn: Callable[..., Any] = getattr(call_args[0], target) if op == "call_method" else target
            with applied(self.autocast), torch.no_grad():
                return fn(*(call_args[1:] if op == "call_method" else call_args), **call_kwargs)
        except Exception as exc:
            raise MetaFailure(f"{_label(op, target)} failed under autocast on traced tensors: {exc}") from exc

    def _wrap_result(self, node: torch.fx.Node, result: Any, device: torch.device) -> Var:
        if isinstance(result, torch.Tensor):
            meta = TensorMeta.from_tensor(result, device=device)
            node.meta[META_KEY] = meta
            return Var("tensor", node=node, meta=meta, example=result)
        if isinstance(result, (tuple, list)):
            items = []
            metas: list[TensorMeta | None] = []
            for i, item in enumerate(result):
                if isinstance(item, torch.Tensor):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    meta = TensorMeta.from_tensor(item, device=device)
                    sub.meta[META_KEY] = meta
                    metas.append(meta)
                    items.append(Var("tensor", node=sub, meta=meta, example=item))
                else:
                    metas.append(None)
                    items.append(size_var(item))
            node.meta[META_KEY] = tuple(metas)
            ty = type(result) if type(result) is not list else tuple
            return Var("tuple", ty, items=tuple(items))
        raise MetaFailure(f"unsupported result type {type(result).__name__} of {node.target}")

    def output(self, values: list[Var]) -> None:
        """Make the graph return the nodes of ``values`` (tensor Vars) as a tuple."""
        self.graph.output(tuple(v.node for v in values))

    def module(self, root: torch.nn.Module | None = None) -> torch.fx.GraphModule:
        """Return the finished GraphModule in the torch dialect."""
        gm = torch.fx.GraphModule(root if root is not None else torch.nn.Module(), self.graph)
        set_dialect(gm, "torch")
        if self.shape_env.symbols:
            record_shape_env(gm, self.shape_env)
        return gm


_INDEXING = (operator.getitem, operator.setitem)
_NOT_HANDLED = object()


def _symbolic_indexing(target: Any, args: Any) -> Any:
    """``x[i]`` / ``x[i] = v`` on meta tensors with symbolic int indices, kept symbolic (else _NOT_HANDLED)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return _NOT_HANDLED
    view = symbolic_index(args[0], args[1])
    if view is None:
        return _NOT_HANDLED
    if target is operator.getitem:
        return view
    value = args[2]
    if isinstance(value, torch.Tensor):
        view.copy_(value)
    else:
        view.fill_(value)
    return None


def _placeholder_name(source: Source, index: int) -> str:
    parts: list[str] = []
    s: Source | None = source
    while s is not None:
        if s.name not in _MODULE_TABLES:  # self._modules['fc']._parameters['w'] reads as self.fc.w
            parts.append(str(s.name))
        s = s.base
    text = "_".join(reversed(parts))
    clean = "".join(c if c.isalnum() else "_" for c in text).strip("_") or f"input{index}"
    name = "l_" + clean
    # A placeholder's name is a parameter of the generated forward: cut ones must stay distinct.
    return name if len(name) <= 60 else f"{name[:50]}_{index}"


_MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules"})


_DEVICE_MOVES = ("to", "cpu", "cuda")


def _is_device(value: Any) -> bool:
    return isinstance(value, torch.device) or (
        isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "meta", "xpu", "mps")
    )


def _meta_move(target: str, args: Any, kwargs: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """The meta-tensor stand-in of ``tensor.to(device, ...)``, ``.cpu()`` and ``.cuda()``: devices become meta."""
    if target in ("cpu", "cuda"):
        return "to", [args[0], "meta"], {k: v for k, v in kwargs.items() if k != "device"}
    args = [args[0], *("meta" if _is_device(a) else a for a in args[1:])]
    if "device" in kwargs:
        kwargs = {**kwargs, "device": "meta"}
    return target, args, kwargs


def _label(op: str, target: Any) -> str:
    if op == "call_method":
        return f"Tensor.{target}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)


def _recast(result: Any, traced: Any) -> Any:
    """``result`` (meta tensors) with each tensor in the dtype of its counterpart in ``traced``.

    Autocast only changes dtypes, and only of ops that return fresh tensors, so a cast copy
    of the meta result stands for the real one.
    """
    if isinstance(result, torch.Tensor) and isinstance(traced, torch.Tensor):
        return result if result.dtype == traced.dtype else result.to(traced.dtype)
    if isinstance(result, (tuple, list)) and isinstance(traced, (tuple, list)) and len(result) == len(traced):
        items = [_recast(r, t) for r, t in zip(result, traced)]
        if all(a is b for a, b in zip(items, result)):
            return result
        return list(items) if isinstance(result, list) else type(result)(items)
    return result


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_tensor(v) for v in value)
    return False


def _constant_result(result: Any) -> Var:
    # Sizes of symbolic meta tensors (x.size(), x.numel()) are SymInts: sym Vars, not constants.
    if isinstance(result, torch.Size):
        return Var("tuple", torch.Size, items=tuple(size_var(s) for s in result))
    if isinstance(result, (tuple, list)) and type(result) in (tuple, list):
        return Var("tuple", tuple, items=tuple(_constant_result(r) for r in result))
    return size_var(result)


def _lower(value: Any, sizes: SizeNodes) -> tuple[Any, Any, torch.device | None]:
    """Map a structure of Vars to (fx argument, meta-tensor argument, first tensor device)."""
    found: list[torch.device] = []

    def fx(v: Any) -> Any:
        if isinstance(v, Var):
            if v.kind == "tensor":
                return v.node
            if v.kind == "sym":
                return sizes.value(v.value)
            if v.kind == "slice":
                return slice(*(fx(i) for i in v.items))
            if v.kind == "tuple":
                return tuple(fx(i) for i in v.items)
            if v.kind == "list":
                return [fx(i) for i in v.box.items]
            if v.kind == "const":
                return v.value
            raise MetaFailure(f"a {v.kind} value cannot be a graph argument")
        if isinstance(v, tuple):
            return tuple(fx(i) for i in v)
        if isinstance(v, list):
            return [fx(i) for i in v]
        if isinstance(v, dict):
            return {k: fx(i) for k, i in v.items()}
        if isinstance(v, slice):
            return slice(fx(v.start), fx(v.stop), fx(v.step))
        return v

    def example(v: Var) -> Any:
        assert v.meta is not None
        found.append(v.meta.device)
        return v.example

    return fx(value), _map_vars(value, example), (found[0] if found else None)


def _map_vars(v: Any, tensor: Callable[[Var], Any]) -> Any:
    """Replace the Vars in a structure by their values, each tensor Var by ``tensor(var)``."""
    if isinstance(v, Var):
        if v.kind == "tensor":
            return tensor(v)
        if v.kind == "tuple":
            return tuple(_map_vars(i, tensor) for i in v.items)
        if v.kind == "list":
            return [_map_vars(i, tensor) for i in v.box.items]
        if v.kind == "slice":
            return slice(*(_map_vars(i, tensor) for i in v.items))
        return v.value
    if isinstance(v, tuple):
        return tuple(_map_vars(i, tensor) for i in v)
    if isinstance(v, list):
        return [_map_vars(i, tensor) for i in v]
    if isinstance(v, dict):
        return {k: _map_vars(i, tensor) for k, i in v.items()}
    if isinstance(v, slice):
        return slice(_map_vars(v.start, tensor), _map_vars(v.stop, tensor), _map_vars(v.step, tensor))
    return v
