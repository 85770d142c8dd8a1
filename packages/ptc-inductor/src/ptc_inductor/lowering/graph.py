"""Walks a core-dialect FX graph and lowers every node through the lowering table."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from ptc_spec import TensorMeta, is_fallback, shape_env_of

from .. import sizes
from ..config import Config
from ..errors import LoweringError, UnsupportedOpError
from ..ir import Buffer, BufferArg, FloatSize, Layout, Node, TensorValue
from ..online_softmax import fuse_softmax_sums
from ..sizes import Size, SizeEnv
from .context import LoweringContext, is_dense
from .extern import bias_apart
from .fallback import computes_on_complex, lower_fallback, op_name
from .layout import CONVOLUTION, LayoutPlan, channels_last_strides, cross_channels_last, lower_convolution, plan_layout
from .registry import LOWERINGS

META_KEY = "ptc_meta"

SIZE_OPS = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
    operator.neg, operator.pow, torch.sym_max, torch.sym_min, torch.sym_float, torch.sym_int,
    torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
})
"""Size arithmetic the tracer records to recompute sizes from the inputs: each node is a scalar
value (its metadata's expression), computed where it is used, never a kernel."""
FLOAT_SIZE_OPS = frozenset({operator.truediv, torch.sym_float})


INPUT_WRITES_KEY = "ptc_input_writes"
"""``GraphModule.meta`` key (set by ptc-aot): ``(output, input)`` position pairs, each output the new
value of that input, which the caller copies into it after the call unless the call returns the
input itself there (then the compiled graph stored the value into the input's storage)."""


@dataclass(frozen=True, slots=True)
class GraphOutput:
    """One graph output: a view of a buffer, or a plain Python value."""

    view: BufferArg | None
    value: Any = None


@dataclass(frozen=True, slots=True)
class LoweredGraph:
    """The result of lowering: IR nodes in order, buffers, inputs, constants and outputs."""

    nodes: tuple[Node, ...]
    buffers: dict[str, Buffer]
    inputs: tuple[str, ...]
    constants: dict[str, torch.Tensor]
    outputs: tuple[GraphOutput, ...]
    output_is_tuple: bool
    storage_offsets: dict[str, Size]
    fallbacks: tuple[str, ...] = ()
    """Qualified names of the ops run as fallbacks (eager kernels), once each, in graph order."""
    sizes: SizeEnv = field(default_factory=SizeEnv)
    """The graph's symbolic sizes (a static SizeEnv for a graph of static sizes)."""
    input_metas: tuple[Any, ...] = ()
    """Each input's simplified metadata (a TensorMeta, a size, or None): where symbols are read."""
    input_writes: tuple[tuple[int, int], ...] = ()
    """``(output, input)`` positions: that output is the new value of that input, which the caller
    writes into the input after the call (``INPUT_WRITES_KEY``), so it may be stored there directly."""

    @property
    def output_buffers(self) -> set[str]:
        """Names of the buffers the graph's outputs view."""
        return {o.view.buffer for o in self.outputs if o.view is not None}


def _meta(node: torch.fx.Node) -> Any:
    if META_KEY not in node.meta:
        raise LoweringError(f"node '{node.name}' has no meta['{META_KEY}']: build graphs with ptc_spec (trace or GraphBuilder)")
    return node.meta[META_KEY]


def _simplified(meta: Any) -> Any:
    """``meta`` with every size in canonical form under the current SizeEnv (guarded substitutions applied)."""
    env = sizes.current()
    if not env.dynamic:
        return meta
    if isinstance(meta, TensorMeta):
        return dataclasses.replace(
            meta,
            shape=tuple(env.simplify(v) for v in meta.shape),
            stride=tuple(env.simplify(v) for v in meta.stride),
            storage_offset=env.simplify(meta.storage_offset),
        )
    if isinstance(meta, (tuple, list)):
        return type(meta)(_simplified(m) for m in meta)
    if isinstance(meta, sympy.Expr):
        return env.simplify(meta)
    return meta


def _check_symbols(env: SizeEnv, where: str, values: Any) -> None:
    unknown = {s for v in values if isinstance(v, sympy.Basic) for s in v.free_symbols if not env.is_symbol(s)}
    if unknown:
        names = ", ".join(sorted(s.name for s in unknown))
        raise LoweringError(f"{where} has sizes over {names}, which the graph's shape env (gm.meta['ptc_shape_env']) does not define")


def _dead_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Side-effect-free calls whose values reach no output (the unused index half of a max pool).

    The scheduler drops their kernels anyway; left in, they would count as readers of the values
    they use and make those look worth storing rather than inlining."""
    dead: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op == "call_function" and all(u in dead for u in node.users) and not node.is_impure():
            dead.add(node)
    return dead


def _op_name(target: Any) -> str:
    return str(getattr(target, "_name", None) or getattr(target, "__name__", target)).replace("::", ".") + (
        f".{target._overloadname}" if hasattr(target, "_overloadname") else ""
    )


def lower_graph(gm: torch.fx.GraphModule, config: Config) -> LoweredGraph:
    """Lower every node of ``gm`` to loop IR and extern kernels (sizes may be symbolic)."""
    env = SizeEnv(shape_env_of(gm))
    with sizes.use(env):
        return _lower_graph(gm, config, env)


def _lower_graph(gm: torch.fx.GraphModule, config: Config, env: SizeEnv) -> LoweredGraph:
    plan = plan_layout(gm, config)
    ctx = LoweringContext(triton=config.backend == "triton", channels_last=plan.enabled)
    input_metas: list[Any] = []
    values: dict[torch.fx.Node, Any] = {}
    inputs: list[str] = []
    constants: dict[str, torch.Tensor] = {}
    outputs: list[GraphOutput] = []
    fallbacks: list[str] = []
    output_is_tuple = True

    def fetch(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return values[a]
        if isinstance(a, (list, tuple)):
            return type(a)(fetch(x) for x in a)
        return a

    dead = _dead_nodes(gm)
    for node in gm.graph.nodes:
        if node in dead:
            continue
        ctx.origin = node.name
        if node.op == "placeholder":
            meta = _simplified(_meta(node))
            input_metas.append(meta)
            if not hasattr(meta, "shape"):
                if isinstance(meta, sympy.Basic):
                    _check_symbols(env, f"input '{node.name}'", [meta])
                values[node] = meta
                inputs.append("")
                continue
            _check_symbols(env, f"input '{node.name}'", [*meta.shape, *meta.stride, meta.storage_offset])
            # A saved value the forward stored channels-last arrives so (layout.py).
            stride = channels_last_strides(meta.shape) if node.name in plan.channels_last else tuple(meta.stride)
            layout = Layout(meta.dtype, meta.device, tuple(meta.shape), stride, 0, False)
            buf = ctx.add_buffer(f"arg{len(inputs)}", layout, "input")
            ctx.storage_offsets[buf.name] = meta.storage_offset
            inputs.append(buf.name)
            values[node] = ctx.value_of_buffer(buf)
        elif node.op == "get_attr":
            tensor = _fetch_attr(gm, str(node.target))
            if not isinstance(tensor, torch.Tensor):
                values[node] = tensor
                continue
            name = f"const{len(constants)}"
            constants[name] = tensor
            layout = Layout(tensor.dtype, tensor.device, tuple(tensor.shape), tuple(tensor.stride()), 0, False)
            values[node] = ctx.value_of_buffer(ctx.add_buffer(name, layout, "constant"))
        elif node.op == "call_function" and (is_fallback(node) or computes_on_complex(node, fetch(node.args), fetch(node.kwargs))):
            values[node] = _lower_fallback(ctx, node, fetch)
            fallbacks.append(op_name(node.target))
        elif node.op == "call_function":
            values[node] = _lower_call(ctx, node, fetch, config, plan)
        elif node.op == "output":
            result = node.args[0]
            output_is_tuple = isinstance(result, (tuple, list))
            items = result if output_is_tuple else [result]
            first_saved = len(items) - plan.saved_outputs
            for i, item in enumerate(items):
                ctx.origin = item.name if isinstance(item, torch.fx.Node) else "output"
                outputs.append(_lower_output(ctx, item, values, i >= first_saved))
        else:
            raise LoweringError(f"node '{node.name}' is a {node.op}; core graphs hold only call_function nodes")
    ctx.realize_recomputed(config.inline_max_ops // 4)
    writes = tuple((int(o), int(i)) for o, i in gm.meta.get(INPUT_WRITES_KEY, ()))
    # A softmax's row sum joins its row max's loop (Triton kernels only).
    nodes = fuse_softmax_sums(ctx.nodes, config) if config.fuse else tuple(ctx.nodes)
    return LoweredGraph(
        nodes, dict(ctx.buffers), tuple(inputs), constants, tuple(outputs), output_is_tuple,
        dict(ctx.storage_offsets), tuple(dict.fromkeys(fallbacks)), env, tuple(input_metas), writes,
    )


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _lower_fallback(ctx: LoweringContext, node: torch.fx.Node, fetch: Any) -> Any:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise UnsupportedOpError(f"node '{node.name}' is marked as a fallback but calls {target!r}, which is not an aten overload")
    try:
        return lower_fallback(ctx, target, fetch(node.args), {k: fetch(v) for k, v in node.kwargs.items()}, _simplified(_meta(node)))
    except LoweringError:
        raise
    except Exception as exc:
        raise LoweringError(f"lowering fallback node '{node.name}' ({op_name(target)}) failed: {exc}") from exc


def _lower_call(ctx: LoweringContext, node: torch.fx.Node, fetch: Any, config: Config, plan: LayoutPlan) -> Any:
    target = node.target
    meta = _simplified(node.meta.get(META_KEY))
    if target in SIZE_OPS and isinstance(meta, (int, sympy.Expr)) and not isinstance(meta, bool):
        return _size_value(target, meta, fetch(node.args))
    # A value computed from channels-last ones is stored channels-last, not in eager's layout.
    stride = channels_last_strides(meta.shape) if node.name in plan.channels_last else _meta_stride(meta)
    if target is operator.getitem:
        base, idx = node.args
        item = fetch(base)[idx]
        if isinstance(item, TensorValue) and item.view is None:
            ctx.define(item, stride)
        return item
    fn = LOWERINGS.get(target)
    if node.name in plan.convs:
        fn = _channels_last_conv(target)
    if fn is None:
        if target in SIZE_OPS and meta is None and callable(target):
            return target(*fetch(node.args))
        raise UnsupportedOpError(
            f"node '{node.name}' calls {_op_name(target)}, which ptc-inductor cannot lower and which is not "
            "marked as a fallback: run ptc_decomp.decompose(gm) first"
        )
    ctx.meta = meta
    ctx.reduction_stride = stride if node.name in plan.channels_last else None
    try:
        value = fn(ctx, *fetch(node.args), **{k: fetch(v) for k, v in node.kwargs.items()})
    except LoweringError:
        raise
    except NotImplementedError as exc:
        raise LoweringError(f"node '{node.name}' ({_op_name(target)}) uses a form ptc-inductor does not support: {exc}") from exc
    except Exception as exc:
        raise LoweringError(f"lowering node '{node.name}' ({_op_name(target)}) failed: {exc}") from exc
    finally:
        ctx.reduction_stride = None
    if isinstance(value, TensorValue) and value.view is None:
        ctx.define(value, stride)
        # Past this size an expression is not worth inlining even once; whether a cheaper value
        # is recomputed in each reader is decided when all readers are known.
        if ctx.cost(value) > 4 * config.inline_max_ops:
            value = ctx.realize(value, stride)
    return value


def _size_value(target: Any, meta: Size, args: Any) -> Any:
    """A size-arithmetic node's value: its expression; a float one (``s1 / 2``) stays a float."""
    floats = target in FLOAT_SIZE_OPS or any(isinstance(a, (float, FloatSize)) for a in args if not isinstance(a, bool))
    if target is torch.sym_int:
        floats = False
    return FloatSize(sympy.sympify(meta)) if floats else meta


def _lower_output(ctx: LoweringContext, item: Any, env: dict[torch.fx.Node, Any], saved: bool) -> GraphOutput:
    if not isinstance(item, torch.fx.Node):
        return GraphOutput(None, item)
    value = env[item]
    if not isinstance(value, TensorValue):
        return GraphOutput(None, value)
    meta = item.meta.get(META_KEY)
    stride = _meta_stride(meta)
    if ctx.channels_last:
        # Outputs the user sees keep eager's strides exactly, even where the value was stored
        # channels-last; a saved value crosses to the backward channels-last (layout.py).
        want = channels_last_strides(value.size) if saved and cross_channels_last(meta) else stride
        if want is not None and len(want) == value.ndim and is_dense(value.size, want):
            return GraphOutput(ctx.as_strided_arg(value, want, exact=True))
    if not saved and stride is not None:
        # A value already stored with longer rows (a padded product) is returned as it is.
        stored = ctx.stored_view(value, stride)
        if stored is not None:
            return GraphOutput(stored)
    real = ctx.realize(value, stride)
    assert real.view is not None
    return GraphOutput(real.view)


def _channels_last_conv(op: Any) -> Any:
    def lower(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
        return lower_convolution(ctx, op, args, kwargs)

    return bias_apart(lower) if op is CONVOLUTION else lower


def _meta_stride(meta: Any) -> tuple[Size, ...] | None:
    stride = getattr(meta, "stride", None)
    env = sizes.current()
    return None if stride is None else tuple(env.simplify(s) for s in stride)
