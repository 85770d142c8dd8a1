"""cudagraphify: wrap a callable so that its calls replay CUDA graphs from the device's tree."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence

import torch
from torch.utils import _pytree as pytree

from ptc_cudagraphs.config import Config
from ptc_cudagraphs.engine import Engine, FunctionState
from ptc_cudagraphs.reasons import FallbackReason
from ptc_cudagraphs.registry import engine_for, register
from ptc_cudagraphs.training import BackwardPlan, Holder, ReplayFunction, backward_recorder
from ptc_cudagraphs.tree import Node

_IDS = itertools.count(1)


class CudaGraphed:
    """A callable replaying recorded CUDA graphs of fn; built by cudagraphify."""

    def __init__(
        self,
        fn: Callable[..., object],
        device: torch.device,
        static: frozenset[int],
        config: Config | None,
        name: str,
        fixed_layouts: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name
        self.engine: Engine = engine_for(device, config)
        self._params = (
            [p for p in fn.parameters() if p.requires_grad] if isinstance(fn, torch.nn.Module) else []
        )
        self._plans: weakref.WeakKeyDictionary[Node, BackwardPlan] = weakref.WeakKeyDictionary()
        # Per call arity: (position among the differentiable inputs, parameter), built once.
        self._param_leaves: dict[int, list[tuple[int, torch.Tensor]]] = {}
        self._infer = FunctionState(
            fn=fn, name=name, function_id=next(_IDS), static=static, config=config, fixed_layouts=fixed_layouts
        )
        # The hook holds the plans table, not self: a cycle through self would keep dead
        # callables (and their graphs) alive until the next garbage collection.
        self._train = FunctionState(
            fn=fn, name=name, function_id=next(_IDS), static=static, grad=True, config=config,
            after_record=backward_recorder(self.engine, name, self._params, self._plans), fixed_layouts=fixed_layouts,
        )
        if device.type != "cuda":
            self._infer.eager_reason = self._train.eager_reason = FallbackReason.NOT_CUDA
        for state in (self._infer, self._train):
            register(state)
            weakref.finalize(self, self.engine.drop_function, state.function_id)

    def __call__(self, *args: object) -> object:
        """Return fn(*args), computed by replaying a recorded graph when possible."""
        if torch.is_grad_enabled() and (
            self._params or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        ):
            return self._call_training(args)
        result = self.engine.call(self._infer, args)
        return pytree.tree_unflatten(result.outputs, result.spec)

    def _call_training(self, args: Sequence[object]) -> object:
        result = self.engine.call(self._train, args, track=False)
        node = result.node
        if node is None:
            return pytree.tree_unflatten(result.outputs, result.spec)
        recording = node.recording
        assert recording is not None
        plan = self._plans[node]
        flat = list(result.outputs)
        positions = [i for i, o in enumerate(flat) if isinstance(o, torch.Tensor)]
        owned = recording.owned
        tensors: list[torch.Tensor] = []
        for i in positions:
            out = flat[i]
            assert isinstance(out, torch.Tensor)
            tensors.append(out.detach() if owned[i] else out)
        diff = [a if isinstance(a, torch.Tensor) else None for a in args] + self._params
        params = self._param_leaves.get(len(args))
        if params is None:
            params = self._param_leaves[len(args)] = [(len(args) + i, p) for i, p in enumerate(self._params)]
        leaves = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad]
        holder = Holder(self.engine, node, plan, tensors, self.name, leaves + params if leaves else params)
        outs = ReplayFunction.apply(holder, *diff)  # type: ignore[no-untyped-call]
        for i, out in zip(positions, outs, strict=True):
            flat[i] = out
        self.engine.hand_out(node, [flat[i] for i in positions if owned[i]])
        return pytree.tree_unflatten(flat, result.spec)

    def __repr__(self) -> str:
        return f"CudaGraphed({self.name})"


def cudagraphify(
    fn: Callable[..., object],
    example_inputs: Sequence[object],
    static_inputs: Sequence[int | torch.Tensor] = (),
    *,
    config: Config | None = None,
    name: str | None = None,
    fixed_layouts: bool = False,
) -> CudaGraphed:
    """Return a callable like fn whose calls replay CUDA graphs recorded from fn.

    ``fixed_layouts``: the caller guarantees that every call's tensors have the example inputs'
    dtypes, devices, sizes, strides and parameter-ness (a frontend's guards do); calls are then
    told apart by the addresses of static inputs alone, not a per-tensor layout key."""
    static: set[int] = set()
    for item in static_inputs:
        if isinstance(item, torch.Tensor):
            static.update(i for i, a in enumerate(example_inputs) if a is item)
        else:
            static.add(int(item))
    device = _device_of(example_inputs)
    label = name or getattr(fn, "__qualname__", None) or type(fn).__name__
    return CudaGraphed(fn, device, frozenset(static), config, label, fixed_layouts)


def _device_of(example_inputs: Sequence[object]) -> torch.device:
    for item in example_inputs:
        if isinstance(item, torch.Tensor) and item.device.type == "cuda":
            index = item.device.index if item.device.index is not None else torch.cuda.current_device()
            return torch.device("cuda", index)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
