"""Training: a replayed forward hands autograd a backward that is itself a recorded child node.

The backward graph is recorded right after the forward graph, before anything touches the
forward's buffers or parameters: autograd checks the version counters of saved tensors when
it runs eagerly, and every later replay (input copies, optimizer steps) moves them. Once
recorded, the backward only ever replays, which autograd does not check.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import torch

from ptc_cudagraphs.engine import Engine, FunctionState
from ptc_cudagraphs.errors import OverwrittenOutputError
from ptc_cudagraphs.tree import BACKWARD, Node

_BACKWARD_IDS = itertools.count(1 << 40)


class BackwardPlan:
    """What the backward of one forward node differentiates, and its recorded node."""

    def __init__(self, node: Node, name: str, diff_targets: Sequence[torch.Tensor | None]) -> None:
        recording = node.recording
        assert recording is not None
        outs = [o for o in recording.static_outputs if isinstance(o, torch.Tensor)]
        # Positions (among the tensor outputs / differentiable inputs) autograd connects.
        self.out_positions = tuple(i for i, o in enumerate(outs) if o.requires_grad)
        self.target_positions = tuple(
            i for i, t in enumerate(diff_targets) if t is not None and t.requires_grad
        )
        self.n_targets = len(diff_targets)
        self.grad_outs = [outs[i] for i in self.out_positions]
        grad_outs = self.grad_outs
        targets = [t for t in (diff_targets[i] for i in self.target_positions) if t is not None]
        self.node: Node | None = None

        def backward(*grads: torch.Tensor) -> list[object]:
            found = torch.autograd.grad(
                grad_outs, targets, grads, retain_graph=True, allow_unused=True
            )
            return [
                g if g is not None else torch.zeros_like(t)
                for g, t in zip(found, targets, strict=True)
            ]

        self.state = FunctionState(
            fn=backward, name=f"{name} (backward)", function_id=next(_BACKWARD_IDS), role=BACKWARD
        )


def backward_recorder(
    engine: Engine, name: str, params: Sequence[torch.Tensor], plans: MutableMapping[Node, BackwardPlan]
) -> Callable[[Node], str | None]:
    """Return the after_record hook of a training forward: it records the backward child."""

    def record(node: Node) -> str | None:
        recording = node.recording
        assert recording is not None
        targets = [a if isinstance(a, torch.Tensor) else None for a in recording.graph_args]
        plan = BackwardPlan(node, name, [*targets, *params])
        plans[node] = plan
        if not plan.out_positions or not plan.target_positions:
            return None
        # Saved activations hold garbage until the forward graph first runs, and an index
        # among them would send the backward out of bounds: run the forward graph once.
        recording.launch()
        examples = [torch.zeros_like(o, memory_format=torch.contiguous_format) for o in plan.grad_outs]
        child = engine.record_child(node, plan.state, examples)
        if isinstance(child, str):
            return f"its backward cannot be recorded: {child}"
        plan.node = child
        return None

    return record


class Holder:
    """The non-tensor argument of ReplayFunction: one forward replay's outputs and context."""

    __slots__ = ("engine", "leaves", "name", "node", "outputs", "plan", "replay_id")

    def __init__(self, engine: Engine, node: Node, plan: BackwardPlan, outputs: list[torch.Tensor],
                 name: str, leaves: Sequence[tuple[int, torch.Tensor]]) -> None:
        self.engine = engine
        self.node = node
        self.plan = plan
        self.replay_id = node.replays
        self.outputs = outputs
        self.name = name
        # (position among the differentiable inputs, tensor) of those whose .grad autograd sets.
        self.leaves = leaves

    def backward(self, grads: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Replay the backward node; return one gradient per differentiable input."""
        if self.node.replays != self.replay_id:
            raise OverwrittenOutputError(
                f"backward of {self.name} ran after a later call of {self.name} overwrote the "
                f"activations it needs; run backward before calling {self.name} again"
            )
        out: list[torch.Tensor | None] = [None] * self.plan.n_targets
        if self.plan.node is None:
            return out
        wanted = [grads[i].contiguous() for i in self.plan.out_positions]
        result = self.engine.replay_node(self.plan.node, wanted)
        for pos, grad in zip(self.plan.target_positions, result.outputs, strict=True):
            assert isinstance(grad, torch.Tensor)
            # A fresh alias that nothing else references: autograd then adopts it as the
            # leaf's .grad instead of cloning it, so gradients are not held twice (pool + .grad).
            out[pos] = grad.detach()
        if self.leaves:
            self.engine.lend(self.plan.node, [(leaf, out[pos]) for pos, leaf in self.leaves])
        return out


class ReplayFunction(torch.autograd.Function):
    """Connects a graph replay's outputs to autograd; backward replays the backward node."""

    @staticmethod
    def forward(ctx: Any, holder: Holder, *diff_inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Return the replay's (already computed) tensor outputs."""
        ctx.holder = holder
        outs = tuple(holder.outputs)
        wanted = set(holder.plan.out_positions)
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in wanted])
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Return gradients of the differentiable inputs from the backward node."""
        return (None, *ctx.holder.backward(grads))
