"""One call through a tree: generation, fallback decisions, warm-up, record or replay."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.utils import _pytree as pytree

from ptc_cudagraphs.config import Config
from ptc_cudagraphs.errors import CaptureError, PtcCudagraphsError
from ptc_cudagraphs.keys import copied_indices, fixed_layout_key, input_key, parameter_positions
from ptc_cudagraphs.liveness import Liveness
from ptc_cudagraphs.reasons import (
    PERMANENT,
    FallbackReason,
    device_reason,
    log_fallback,
    mutation_reason,
)
from ptc_cudagraphs.recording import Recorder
from ptc_cudagraphs.stats import Stats
from ptc_cudagraphs.tree import FORWARD, Node, Tree, starts_new_generation

log = logging.getLogger("ptc.cudagraphs")


def _flattened(fn: Callable[..., object]) -> tuple[Callable[..., list[object]], list[pytree.TreeSpec]]:
    """``fn`` returning its flat output leaves, and the list each call appends its output spec to."""
    specs: list[pytree.TreeSpec] = []

    def flat_fn(*a: object) -> list[object]:
        leaves, spec = pytree.tree_flatten(fn(*a))
        specs.append(spec)
        return leaves

    return flat_fn, specs


@dataclass(eq=False)
class FunctionState:
    """One cudagraphified callable as the tree sees it (mutable: its fallback state)."""

    fn: Callable[..., object]
    name: str
    function_id: int
    role: str = FORWARD
    static: frozenset[int] = frozenset()
    # Record with autograd enabled so that a backward graph can be recorded as a child.
    grad: bool = False
    # Per-callable options (warm-up runs, recording limit, mutation check); None: the engine's.
    config: Config | None = None
    # Called right after a node of this callable is recorded; returns why the recording must
    # be abandoned, or None (training uses it to record the backward at once).
    after_record: Callable[[Node], str | None] | None = None
    eager_reason: FallbackReason | None = None
    keys: set[Hashable] = field(default_factory=set)
    # The caller guarantees one layout per argument across calls (see cudagraphify): after the
    # first call has checked devices, calls are keyed by fixed_layout_key over these positions.
    fixed_layouts: bool = False
    fixed_static: frozenset[int] | None = None


class CallResult(NamedTuple):
    """Flat outputs of one call, their pytree spec, and the node that replayed (or None)."""

    # A NamedTuple rather than a frozen dataclass: it is built on every replay, and a frozen
    # dataclass's __init__ costs several times more.
    outputs: list[object]
    spec: pytree.TreeSpec
    node: Node | None


def _never(tensor: torch.Tensor) -> bool:
    return False


class Engine:
    """The per-device state: tree, liveness, stats and the recorder that makes graphs."""

    def __init__(self, recorder: Recorder, config: Config) -> None:
        self.recorder = recorder
        self.config = config
        self.tree = Tree()
        self.liveness = Liveness()
        self.stats = Stats()
        # Per backward node: (leaf, address of the gradient handed to autograd for it) pairs of
        # its latest replay.
        self._lent: dict[Node, list[tuple[torch.Tensor, int]]] = {}
        # A recording was made since the cache was last emptied (see Config.release_warmup_memory).
        self._recorded = False

    def call(self, f: FunctionState, args: Sequence[object], track: bool = True) -> CallResult:
        """Run f over args by replay, by warm-up-and-record, or eagerly; see the module doc."""
        if f.eager_reason is not None:
            return self._eager(f, args, f.eager_reason)
        self.liveness.check(args, f.name)
        tree = self.tree
        if starts_new_generation(
            pending_mark=tree.pending_mark,
            auto=self.config.auto_generations,
            current=tree.current,
            function_id=f.function_id,
            role=f.role,
        ):
            tree.begin_generation()
            if self._recorded and self.config.release_warmup_memory:
                # The step that recorded is over, and with it the eager warm-ups' tensors
                # (activations, the first eager backward's gradients) that held side-stream blocks.
                self._recorded = False
                self.recorder.release_cached()
        if f.fixed_static is not None:
            key = fixed_layout_key(args, f.fixed_static, self._is_parent_output)
        else:
            key, devices = input_key(args, f.static, self._is_parent_output)
            reason = device_reason(devices, self.recorder.device)
            if reason is not None:
                return self._eager(f, args, reason)
            if f.fixed_layouts:
                # Devices and parameters are part of the layout the caller fixes: checked once.
                f.fixed_static = f.static | parameter_positions(args)
                key = fixed_layout_key(args, f.fixed_static, self._is_parent_output)
        node = tree.child(f.function_id, key)
        if node is None:
            limit = (f.config or self.config).max_recordings_per_function
            if key not in f.keys and len(f.keys) >= limit:
                return self._eager(f, args, FallbackReason.TOO_MANY_SHAPES)
            f.keys.add(key)
            node = tree.add_child(f.function_id, f.name, f.role, key)
        if node.recording is None:
            return self._warm_up(f, node, args)
        return self._replay(node, args, track)

    def _replay(self, node: Node, args: Sequence[object], track: bool) -> CallResult:
        recording = node.recording
        assert recording is not None
        self.liveness.invalidate_from(node)
        if self._lent:
            self._reclaim_from(node)
        flat = recording.replay(args)
        node.replays += 1
        self.stats.replays += 1
        self.tree.move_to(node)
        if track:
            # Each replay hands out fresh tensor objects over the pinned memory, so that a weak
            # reference tells whether the user still holds this replay's outputs.
            flat = list(flat)
            handed: list[object] = []
            for pos in node.owned_positions:
                alias = flat[pos].detach()  # type: ignore[attr-defined]
                flat[pos] = alias
                handed.append(alias)
            self.liveness.hand_out(node, handed)
        return CallResult(flat, node.out_spec, node)

    def _warm_up(self, f: FunctionState, node: Node, args: Sequence[object]) -> CallResult:
        copied = copied_indices(node.key)  # type: ignore[arg-type]
        watched = [a for a in (args[i] for i in copied) if isinstance(a, torch.Tensor)]
        before = [t._version for t in watched]
        flat_fn, spec_box = _flattened(f.fn)
        outputs, uncapturable = self.recorder.warmup(flat_fn, args)
        node.warmups += 1
        self.stats.warmups += 1
        if uncapturable is not None:
            return self._give_up(f, node, FallbackReason.CAPTURE_FAILED, outputs,
                                 spec_box[-1], uncapturable)
        config = f.config or self.config
        if config.check_input_mutation:
            moved = mutation_reason(before, [t._version for t in watched])
            if moved is not None:
                return self._give_up(f, node, moved, outputs, spec_box[-1])
        node.out_spec = spec_box[-1]
        if node.warmups >= config.warmup_runs:
            problem = self._record(f, node, flat_fn, args, copied)
            if problem is not None:
                return self._give_up(f, node, FallbackReason.CAPTURE_FAILED, outputs,
                                     spec_box[-1], problem)
        self.tree.move_to(node)
        return CallResult(outputs, spec_box[-1], None)

    def _record(
        self,
        f: FunctionState,
        node: Node,
        flat_fn: Callable[..., list[object]],
        args: Sequence[object],
        copied: tuple[int, ...],
    ) -> str | None:
        try:
            recording = self.recorder.record(flat_fn, args, copied, f.grad)
        except CaptureError as exc:
            return str(exc.__cause__ or exc)
        node.recording = recording
        self._recorded = True
        node.owned_positions = tuple(i for i, own in enumerate(recording.owned) if own)
        self.tree.assign_index(node)
        self.stats.recordings += 1
        self.stats.pool_bytes += recording.pool_bytes
        self.stats.pinned_output_bytes += recording.nbytes
        self.stats.input_buffer_bytes += recording.input_bytes
        log.debug("cudagraphs: recorded %s as node #%d", f.name, node.index)
        if f.after_record is not None:
            return f.after_record(node)
        return None

    def record_child(self, parent: Node, f: FunctionState, args: Sequence[object]) -> Node | str:
        """Warm up and record f over example args as a child of parent now; return the node,
        or why it could not be recorded. The current position does not move."""
        key, _ = input_key(args, f.static, _never)
        node = self.tree.add_child_under(parent, f.function_id, f.name, f.role, key)
        flat_fn, spec_box = _flattened(f.fn)
        _, uncapturable = self.recorder.warmup(flat_fn, args)
        node.warmups += 1
        self.stats.warmups += 1
        node.out_spec = spec_box[-1]
        problem = uncapturable or self._record(f, node, flat_fn, args, copied_indices(key))
        if problem is not None:
            self.tree.remove(node)
            return problem
        return node

    def replay_node(self, node: Node, args: Sequence[object]) -> CallResult:
        """Replay a node reached without a path lookup (a recorded backward); outputs untracked."""
        self.liveness.check(args, node.name)
        key, _ = input_key(args, frozenset(), _never)
        if key != node.key:
            raise PtcCudagraphsError(
                f"{node.name} was recorded for inputs {node.key} but received {key}; "
                f"pass gradients of the recorded shapes and dtypes"
            )
        return self._replay(node, args, track=False)

    def _give_up(
        self,
        f: FunctionState,
        node: Node,
        reason: FallbackReason,
        outputs: list[object],
        spec: pytree.TreeSpec,
        detail: str = "",
    ) -> CallResult:
        # The warm-up already ran this call eagerly; its outputs are the call's result.
        self.tree.remove(node)
        f.eager_reason = reason
        if self.stats.fallback(f.name, reason):
            log_fallback(f.name, reason, detail)
        return CallResult(outputs, spec, None)

    def _eager(self, f: FunctionState, args: Sequence[object], reason: FallbackReason) -> CallResult:
        if reason in PERMANENT:
            f.eager_reason = reason
        if self.stats.fallback(f.name, reason):
            log_fallback(f.name, reason)
        leaves, spec = pytree.tree_flatten(f.fn(*args))
        return CallResult(leaves, spec, None)

    def lend(self, node: Node, pairs: Sequence[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
        """Remember the gradients node's replay gave autograd for these leaves: autograd may
        make them the leaves' .grad, which then lives in the pool. Only addresses are kept:
        a reference to a gradient would stop autograd from adopting it."""
        self._lent[node] = [(leaf, grad.data_ptr()) for leaf, grad in pairs if grad is not None]

    def _reclaim_from(self, node: Node) -> None:
        # Replaying node may overwrite the outputs of node and of every later node. A leaf
        # whose .grad is still one of them (gradient accumulation, zero_grad(set_to_none=False))
        # gets its own copy first, so that the next backward adds to the old values.
        for other in [n for n in self._lent if n.index >= node.index]:
            for leaf, address in self._lent.pop(other):
                held = leaf.grad
                if held is not None and held.data_ptr() == address:
                    leaf.grad = held.clone()

    def _is_parent_output(self, tensor: torch.Tensor) -> bool:
        # Outputs of nodes on the current path stay put while the path is followed, so a
        # child reads them where they are instead of copying them.
        producer = self.liveness.producer(tensor)
        if producer is None:
            return False
        return any(node is producer for node in self.tree.current.path())

    def mark_step_begin(self) -> None:
        """Make the next call start a new generation."""
        self.tree.pending_mark = True

    def hand_out(self, node: Node, outputs: Sequence[object]) -> None:
        """Track outputs given to the user as produced by node's latest replay."""
        self.liveness.hand_out(node, outputs)

    def reset(self) -> None:
        """Drop the tree and its recordings; the recorder starts a new pool."""
        for node in self.tree.nodes():
            self.liveness.invalidate_from_exactly(node)
        self.tree = Tree()
        self._lent = {}
        self.recorder.reset()
        self.stats = Stats()

    def drop_function(self, function_id: int) -> None:
        """Forget every recording of a callable that died."""
        removed = self.tree.drop_function(function_id)
        self.liveness.forget_nodes(removed)
        for node in removed:
            self._lent.pop(node, None)
