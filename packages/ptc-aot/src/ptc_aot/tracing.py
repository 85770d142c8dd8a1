"""Tracing a torch-level function into a faithful aten graph, forward-only or joint.

The joint trace runs the function over ptc-spec's traced tensors with grad enabled, then
calls ``torch.autograd.grad`` on its outputs with tangent placeholders, so the autograd
engine drives the backward and every backward ATen call lands in the same graph. Outputs
that alias an input or another output are not graph outputs: the runtime regenerates them
from their base with the recorded view chain, so aliasing matches eager.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from ptc_spec import DispatchMode, SymbolEnv, TensorMeta, TracedTensor, symbolic_dispatch
from ptc_spec.tracer import Tracer, finish

from .errors import UnsupportedMutationError
from .sizes import bind_sizes, size_fn
from .views import ViewStep, alias_roots

log = logging.getLogger("ptc.aot.trace")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How the runtime produces one output leaf of the user's function.

    ``kind``: ``"graph"`` (graph output ``index``), ``"input"`` (view ``chain`` of tensor input
    ``index``), ``"alias"`` (view ``chain`` of graph output ``index``), ``"constant"`` (``value``)
    or ``"size"`` (``value``, a :class:`SizeFn` of the inputs: a symbolic size the function returned).
    ``sized``: the chain has symbolic sizes, computed from the call's tensors.
    """

    kind: str
    index: int = -1
    chain: tuple[ViewStep, ...] = ()
    value: Any = None
    sized: bool = False


@dataclass(frozen=True, slots=True)
class TracedProgram:
    """A faithful aten graph returning ``((graph outputs...), (input grads...))`` and its output plan."""

    gm: torch.fx.GraphModule
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[OutputPlan, ...]
    out_spec: pytree.TreeSpec
    differentiable: tuple[bool, ...]
    joint: bool


class _RecordingTracer(Tracer):
    """ptc-spec's tracer, also remembering the traced tensor object behind each node."""

    def __init__(self, shape_env: SymbolEnv | None) -> None:
        super().__init__(shape_env)
        self.objects: dict[torch.fx.Node, TracedTensor] = {}

    def dispatch(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = super().dispatch(func, args, kwargs)
        for leaf in pytree.tree_leaves(out):
            if isinstance(leaf, TracedTensor):
                self.objects.setdefault(leaf._node, leaf)
        return out


class _Recording(DispatchMode):
    def __init__(self, tracer: Tracer) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracer = tracer

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.tracer.dispatch(func, args, kwargs or {})


def _same(t: Any) -> Any:
    return t


@contextlib.contextmanager
def _own_saved_tensors() -> Iterator[None]:
    """Tracing keeps the values autograd saves as they are, whatever saved-tensor hooks the
    caller has active (``saved_tensors_hooks``, ``save_on_cpu``): theirs would run on traced
    tensors, fail or be recorded into the graph. At run time they see the compiled program's
    saved values, as with any autograd.Function."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(_same, _same))
        except RuntimeError:  # hooks are disabled here (functorch transforms): none can run
            pass
        yield


def _differentiable(x: Any) -> bool:
    return isinstance(x, TracedTensor) and x.requires_grad and (x.dtype.is_floating_point or x.dtype.is_complex)


def trace_program(fn: Callable[..., Any], inputs: Sequence[Any], joint: bool, shape_env: SymbolEnv | None = None) -> TracedProgram:
    """Trace ``fn`` over ``inputs`` (TensorMeta for tensors, other values baked in); with ``joint``, its backward too.

    Inputs with symbolic sizes need ``shape_env``, the SymbolEnv of their symbols; the trace
    records in it every decision ``fn`` (or an op) makes on a size, and the graph records it.
    """
    tracer = _RecordingTracer(shape_env)
    args: list[Any] = []
    metas: list[TensorMeta] = []
    primals: list[TracedTensor] = []
    for value in inputs:
        if isinstance(value, TensorMeta):
            traced = tracer.placeholder(f"primals_{len(metas)}", value)
            tracer.objects[traced._node] = traced
            metas.append(value)
            primals.append(traced)
            args.append(traced)
        else:
            args.append(value)
    mode = _Recording(tracer)
    with _own_saved_tensors(), torch.enable_grad() if joint else torch.no_grad(), mode, symbolic_dispatch(tracer.shape_env):
        result = fn(*args)
    for i, (primal, meta) in enumerate(zip(primals, metas)):
        if primal.requires_grad and not meta.requires_grad:
            raise UnsupportedMutationError(
                f"the function writes a value that requires grad into tensor input {i}, which does not;"
                " ptc_aot applies input mutations outside autograd, so compute the value under torch.no_grad()"
            )
    leaves, spec = pytree.tree_flatten(result)
    plans, graph_outputs = _plan_outputs(tracer, leaves, primals)
    differentiable = tuple(_differentiable(x) for x in graph_outputs)
    wrt = [p for p in primals if p.requires_grad]
    grads: list[Any] = []
    if joint and wrt and any(differentiable):
        grads = _trace_backward(tracer, mode, graph_outputs, differentiable, primals)
    else:
        joint = False
    gm = finish(tracer, (tuple(graph_outputs), tuple(grads)), "aten")
    log.debug("traced %s graph with %d nodes", "joint" if joint else "forward", len(gm.graph.nodes))
    return TracedProgram(gm, tuple(metas), tuple(plans), spec, differentiable if joint else (False,) * len(graph_outputs), joint)


def _trace_backward(
    tracer: _RecordingTracer, mode: _Recording, outputs: list[Any], differentiable: tuple[bool, ...], primals: list[TracedTensor]
) -> list[Any]:
    # Tangent placeholders are made outside the mode (making their meta tensors must not be
    # recorded) and moved up to sit with the primals, so the graph's inputs come first.
    last = [n for n in tracer.graph.nodes if n.op == "placeholder"][-1]
    tangents: list[TracedTensor] = []
    for i, out in enumerate(o for o, d in zip(outputs, differentiable) if d):
        # Read back as sympy (TensorMeta.from_tensor): symbolic sizes, no guards.
        meta = TensorMeta.of(TensorMeta.from_tensor(out).shape, out.dtype, out.device)
        tangent = tracer.placeholder(f"tangents_{i}", meta)
        last.append(tangent._node)
        last = tangent._node
        tangents.append(tangent)
    wrt = [p for p in primals if p.requires_grad]
    with _own_saved_tensors(), torch.enable_grad(), mode, symbolic_dispatch(tracer.shape_env):
        found = torch.autograd.grad(
            [o for o, d in zip(outputs, differentiable) if d], wrt, tangents, allow_unused=True
        )
    by_primal = dict(zip((id(p) for p in wrt), found))
    return [by_primal.get(id(p)) for p in primals]


def _plan_outputs(tracer: _RecordingTracer, leaves: list[Any], primals: list[TracedTensor]) -> tuple[list[OutputPlan], list[Any]]:
    roots = alias_roots(tracer.graph)
    # Primals' ``_node`` moves to the latest in-place op on them; the placeholders come first.
    placeholder_index = {n: i for i, n in enumerate(n for n in tracer.graph.nodes if n.op == "placeholder")}
    groups: dict[torch.fx.Node, list[int]] = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, TracedTensor):
            groups.setdefault(roots.get(leaf._node, (leaf._node, ()))[0], []).append(i)
    plans: list[OutputPlan | None] = [None] * len(leaves)
    graph_outputs: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            plans[i] = _size_plan(tracer, leaf, placeholder_index)
        elif not isinstance(leaf, torch.Tensor):
            plans[i] = OutputPlan("constant", value=leaf)
        elif not isinstance(leaf, TracedTensor):
            plans[i] = OutputPlan("graph", len(graph_outputs))
            graph_outputs.append(leaf)
    for root, members in groups.items():
        chains: dict[int, tuple[ViewStep, ...]] = {}
        sized: dict[int, bool] = {}
        for i in members:
            chains[i], sized[i] = _bound_chain(roots.get(leaves[i]._node, (root, ()))[1], placeholder_index)
        if root in placeholder_index:
            for i in members:
                plans[i] = OutputPlan("input", placeholder_index[root], chains[i], sized=sized[i])
            continue
        if len(members) == 1:
            plans[members[0]] = OutputPlan("graph", len(graph_outputs))
            graph_outputs.append(leaves[members[0]])
            continue
        # Several outputs share one storage: return the base once and rebuild each output
        # as a view of it, so they alias each other as they do in eager.
        whole = [i for i in members if not chains[i]]
        base = leaves[whole[0]] if whole else tracer.objects[root]
        index = len(graph_outputs)
        graph_outputs.append(base)
        for i in members:
            plans[i] = OutputPlan("alias", index, chains[i], sized=sized[i])
    return [p for p in plans if p is not None], graph_outputs


def _bound_chain(chain: tuple[ViewStep, ...], inputs: dict[torch.fx.Node, int]) -> tuple[tuple[ViewStep, ...], bool]:
    """``chain`` with its size nodes made SizeFns of the inputs (the runtime replays it on real tensors)."""
    bound: list[ViewStep] = []
    sized = False
    for step in chain:
        (args, kwargs), found = bind_sizes((step.args, step.kwargs), inputs)
        sized = sized or found
        bound.append(replace(step, args=args, kwargs=kwargs))
    return tuple(bound), sized


def _size_plan(tracer: _RecordingTracer, value: torch.SymInt | torch.SymFloat | torch.SymBool, inputs: dict[torch.fx.Node, int]) -> OutputPlan:
    # A size the function returns (x.shape[0] * 2): its graph computation, as a SizeFn of the
    # inputs; a size the guards fix is a constant.
    node = tracer.size_value(value)
    if not isinstance(node, torch.fx.Node):
        return OutputPlan("constant", value=node)
    return OutputPlan("size", value=size_fn(node, inputs))
