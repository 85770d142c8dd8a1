"""The runtime wrapper: an autograd.Function around a compiled forward/backward pair.

The forward returns the graph outputs, the new values of mutated inputs and the values the
partition saved; the wrapper saves those for the backward, copies the new values into the
caller's tensors, and rebuilds outputs that alias inputs or each other as views, so autograd
and aliasing behave as in eager.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.autograd.graph import increment_version

from ptc_spec import META_KEY, SymbolEnv, TensorMeta

from .errors import DoubleBackwardError
from .partition import Tangents
from .tracing import OutputPlan
from .views import replay

Compiled = Callable[..., Any]

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class CompiledProgram:
    """Everything one call needs: compiled graphs and how to turn their results into outputs.

    ``backward`` is None for inference programs. ``differentiable`` says, per graph output,
    whether it has a tangent input in the backward; ``tangents`` describes those inputs.
    ``shape_env``: for a symbolic program, the SymbolEnv its graphs record (the guards a call's
    sizes must satisfy); None for static sizes.
    """

    forward: Compiled
    backward: Compiled | None
    num_outputs: int
    mutated_inputs: tuple[int, ...]
    differentiable: tuple[bool, ...]
    outputs: tuple[OutputPlan, ...]
    out_spec: pytree.TreeSpec
    tangents: Tangents | None = None
    shape_env: SymbolEnv | None = None

    def __call__(self, tensors: Sequence[torch.Tensor]) -> Any:
        """Run the program on the tensor inputs and return the user's output structure."""
        if torch._C._is_any_autocast_enabled():
            with torch._C._DisableAutocast():
                return self._run(tensors)
        return self._run(tensors)

    def _run(self, tensors: Sequence[torch.Tensor]) -> Any:
        if self.backward is None:
            with torch.no_grad():
                results = tuple(self.forward(*tensors))
        else:
            results = _CompiledFunction.apply(self, *tensors)  # type: ignore[no-untyped-call]
        graph_outputs = results[: self.num_outputs]
        new_values = results[self.num_outputs : self.num_outputs + len(self.mutated_inputs)]
        written = []
        with torch.no_grad():
            for i, value in zip(self.mutated_inputs, new_values):
                if value is None or value is tensors[i]:
                    written.append(tensors[i])  # the compiled graph wrote it in place
                else:
                    tensors[i].copy_(value)
        if written:
            # As an in-place op would: autograd then notices a saved tensor that was overwritten.
            increment_version(written)
        leaves = [_output(plan, tensors, graph_outputs) for plan in self.outputs]
        return pytree.tree_unflatten(leaves, self.out_spec)


def _output(plan: OutputPlan, tensors: Sequence[torch.Tensor], graph_outputs: Sequence[Any]) -> Any:
    # Symbolic view sizes and returned sizes are computed from this call's tensors, never
    # the sizes the program was traced with.
    if plan.kind == "graph":
        return graph_outputs[plan.index]
    if plan.kind == "input":
        return replay(plan.chain, tensors[plan.index], tensors if plan.sized else None)
    if plan.kind == "alias":
        return replay(plan.chain, graph_outputs[plan.index], tensors if plan.sized else None)
    if plan.kind == "size":
        return plan.value(tensors)
    return plan.value


class _CompiledFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, program: CompiledProgram, *tensors: torch.Tensor) -> Any:
        results = tuple(program.forward(*tensors))
        n_out = program.num_outputs + len(program.mutated_inputs)
        outputs, saved = results[:n_out], results[n_out:]
        if program.mutated_inputs:
            saved = _detach_from_inputs(saved, [tensors[i] for i in program.mutated_inputs])
            # A new value the graph wrote into its input comes back as the input: returned by an
            # autograd.Function, it would be wrapped in a view; None tells the caller instead.
            first = program.num_outputs
            if any(outputs[first + k] is tensors[i] for k, i in enumerate(program.mutated_inputs)):
                outputs = tuple(
                    None if first <= p and outputs[p] is tensors[program.mutated_inputs[p - first]] else out
                    for p, out in enumerate(outputs)
                )
        ctx.save_for_backward(*saved)
        ctx.program = program
        # The shapes of this call's differentiable outputs: zeros for the ones nobody
        # differentiates take them (a symbolic program has no fixed shapes).
        # A lazily compiled backward makes its zeros in the graph and needs no shapes.
        if not isinstance(program.backward, LazyBackward):
            ctx.output_shapes = [out.shape for out, d in zip(outputs, program.differentiable) if d]
        # Outputs nobody differentiates arrive in backward as None instead of zeros, so that
        # inputs reaching only those outputs get no gradient, as in eager.
        ctx.set_materialize_grads(False)
        fixed = [
            out
            for i, out in enumerate(outputs)
            if isinstance(out, torch.Tensor) and (i >= program.num_outputs or not program.differentiable[i])
        ]
        ctx.mark_non_differentiable(*fixed)
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        program: CompiledProgram = ctx.program
        assert program.backward is not None and program.tangents is not None
        given = [g for g, d in zip(grads, program.differentiable) if d]
        present = frozenset(j for j, g in enumerate(given) if g is not None)
        backward = program.backward
        if isinstance(backward, LazyBackward):
            backward = backward.without(frozenset(range(len(given))) - present)
            tangents = [g.contiguous() for g in given if g is not None]
        else:
            tangents = [
                g.contiguous() if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                for g, shape, (dtype, device) in zip(given, ctx.output_shapes, program.tangents.zeros)
            ]
        boxed = getattr(backward, "call_boxed", None)
        if boxed is not None and not torch.is_grad_enabled():
            # The compiled backward takes the list and empties it; with autograd's own saved
            # variables released too, each saved activation is freed after its last use in the
            # backward instead of when the whole backward has finished (the peak of a training step).
            args = [*ctx.saved_tensors, *tangents]
            del tangents
            ctx.maybe_clear_saved_tensors()
            with torch.no_grad(), torch._C._DisableAutocast():
                results = list(boxed(args))
            return (None, *_drop_unasked(results, program, present, len(given)))
        saved = ctx.saved_tensors
        # A backward called inside an autocast region must not cast the graph's ops again.
        with torch.no_grad(), torch._C._DisableAutocast():
            results = _drop_unasked(list(backward(*saved, *tangents)), program, present, len(given))
        if torch.is_grad_enabled():
            anchors = [t for t in (*saved, *tangents) if t.requires_grad]
            if anchors:
                results = list(_NoDoubleBackward.apply(anchors[0], *results))  # type: ignore[no-untyped-call]
        return (None, *results)


class LazyBackward:
    """A static program's backward graph, compiled at its first call for the tangents it gets.

    An output nobody differentiates (the logits beside a language model's loss) has no tangent:
    the graph it is compiled into reads zeros in its place, from a constant, where a tensor of
    zeros would have been filled and read (GPT-2's float32 logits: 1.6 GB, twice a step). Each
    set of absent tangents gets its own compiled graph, taking the present tangents only. A
    graph that fails to compile runs uncompiled, with a warning: the gradients are still eager's.
    """

    def __init__(self, graph: torch.fx.GraphModule, compile: Callable[[torch.fx.GraphModule], Compiled], num_saved: int) -> None:
        self._graph = graph
        self._compile = compile
        self._num_saved = num_saved
        self._compiled: dict[frozenset[int], Compiled] = {}

    def without(self, absent: frozenset[int]) -> Compiled:
        """The backward compiled for calls without the tangents at positions ``absent``."""
        found = self._compiled.get(absent)
        if found is None:
            graph = zero_tangents(self._graph, self._num_saved, absent) if absent else self._graph
            try:
                found = self._compile(graph)
            except Exception as exc:  # noqa: BLE001 - any compiler failure leaves the graph runnable as it is
                warnings.warn(f"ptc_aot: the backward graph failed to compile ({type(exc).__name__}: {exc}); it runs uncompiled", stacklevel=2)
                found = graph
            self._compiled[absent] = found
        return found

    def __call__(self, *args: Any) -> Any:
        return self.without(frozenset())(*args)


def zero_tangents(gm: torch.fx.GraphModule, num_saved: int, absent: frozenset[int]) -> torch.fx.GraphModule:
    """A copy of backward graph ``gm`` whose tangents at positions ``absent`` are zeros made in the graph."""
    out = copy.deepcopy(gm)
    graph = out.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    first = next(n for n in graph.nodes if n.op != "placeholder")
    for j in sorted(absent):
        node = placeholders[num_saved + j]
        meta = node.meta[META_KEY]
        with graph.inserting_before(first):
            zeros = graph.call_function(aten.full.default, (list(meta.shape), 0), {"dtype": meta.dtype, "device": meta.device, "pin_memory": False})
        zeros.meta[META_KEY] = TensorMeta.of(meta.shape, meta.dtype, meta.device)
        node.replace_all_uses_with(zeros)
        graph.erase_node(node)
    out.recompile()
    return out


def _drop_unasked(results: list[Any], program: CompiledProgram, present: frozenset[int], given: int) -> list[Any]:
    # Inputs that reach only outputs nobody differentiated get no gradient, as in eager.
    assert program.tangents is not None
    if len(present) < given:
        for i, needs in enumerate(program.tangents.of_grads):
            if not needs & present:
                results[i] = None
    return results


def _detach_from_inputs(saved: Sequence[Any], mutated: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    # The backward reads the values the forward saw; a saved tensor sharing storage with an
    # input the wrapper is about to overwrite must be copied first.
    storages = {t.untyped_storage().data_ptr() for t in mutated}
    return tuple(
        s.clone() if isinstance(s, torch.Tensor) and s.untyped_storage().data_ptr() in storages else s for s in saved
    )


class _NoDoubleBackward(torch.autograd.Function):
    """Marks gradients made with ``create_graph=True``; differentiating them again raises."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, *grads: Any) -> Any:
        return grads

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise DoubleBackwardError(
            "a gradient computed by a ptc_aot-compiled backward was differentiated again (double backward),"
            " which ptc_aot does not support; compute higher-order gradients without ptc_aot"
        )
