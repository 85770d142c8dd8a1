"""Memory planning: free buffers after their last use and reuse freed storage of equal size.

A kernel's output may also take the storage of an input that dies in that very kernel (in-place
reuse) when the kernel reads every element of the input only where, and before, it writes the
same element of the output: softmax over an attention-scores matmul then needs one buffer, not two.
"""

from __future__ import annotations

import collections
import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

import sympy
import torch

from .analysis import Access
from .indexing import Expr, rvar, xvar
from .ir import Buffer, ComputedNode, ExternNode
from .lowering.context import is_dense
from .lowering.graph import LoweredGraph
from .scheduler import Kernel, Schedule
from .sizes import Size, hint, normalize


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Which storage each buffer lives in, what each step allocates, and what it frees after."""

    storage: dict[str, str]
    allocate: dict[int, tuple[str, ...]]
    free_after: dict[int, tuple[str, ...]]
    peak_bytes: int
    """At the size hints, where sizes are symbolic."""
    reused: int
    local: frozenset[str] = frozenset()
    in_place: tuple[tuple[str, str], ...] = ()
    """(output, input) pairs: the kernel making the output writes it into the storage of the
    input, which dies in that kernel. Both names then point at one storage inside the kernel."""

    @property
    def aliased(self) -> frozenset[str]:
        """Buffers sharing their storage with another parameter of the same kernel."""
        return frozenset(name for pair in self.in_place for name in pair)


def _key(buf: Buffer) -> tuple[Size, torch.dtype, torch.device]:
    # Symbolic byte counts are canonical expressions: storage is reused only by a buffer of
    # provably the same size (the same expression), never one that merely matches at the hints.
    return buf.layout.nbytes, buf.layout.dtype, buf.layout.device


def kernel_local_buffers(sched: Schedule, outputs: set[str], kernels: Collection[str] | None = None) -> frozenset[str]:
    """Buffers holding one value per outer loop point and read only there: they become C++ locals.

    Only ``kernels`` (default: all) may keep locals; Triton kernels take every buffer they touch.
    """
    readers: dict[str, set[str]] = defaultdict(set)
    for step in sched.steps:
        if isinstance(step, Kernel):
            for node in step.nodes:
                for name in sched.accesses[node.name].reads():
                    readers[name].add(step.name)
        else:
            for name in step.reads:
                readers[name].add(step.name)
    found: set[str] = set()
    for kernel in sched.kernels:
        if kernels is not None and kernel.name not in kernels:
            continue
        flat = all(not n.is_reduction and n.ranges == kernel.outer for n in kernel.nodes)
        if flat:
            continue
        for node in kernel.nodes:
            if node.ranges != kernel.outer or len(node.outputs) != 1:
                continue
            name = node.outputs[0].name
            if name in outputs or readers.get(name, set()) - {kernel.name}:
                continue
            stores = {i for n, i in sched.accesses[node.name].stores if n == name}
            loads = {i for n2 in kernel.nodes for n, i in sched.accesses[n2.name].loads if n == name}
            if len(stores) == 1 and loads <= stores:
                found.add(name)
    return frozenset(found)


def _extend_aliased(sched: Schedule, last_use: dict[str, int], outputs: set[str]) -> tuple[set[str], set[str]]:
    """Make every buffer an extern output views live as long as that view; return the buffers that
    must never be freed (viewed by a graph output) and the views themselves (never reused).

    Latest step first, so a view of a view passes its last use down the chain.
    """
    kept = set(outputs)
    views: set[str] = set()
    for i in range(len(sched.steps) - 1, -1, -1):
        step = sched.steps[i]
        if not isinstance(step, ExternNode):
            continue
        for view, base in step.aliases:
            views.add(view)
            last_use[base] = max(last_use.get(base, i), last_use.get(view, i))
            if view in kept:
                kept.add(base)
    return kept, views


def inner_loops(node: ComputedNode, k: int) -> tuple[Size, ...]:
    """The loops ``node`` runs inside a kernel's ``k`` shared outer loops."""
    return node.reduction_ranges if node.is_reduction else node.ranges[k:]


def shared_index(node: ComputedNode, k: int, index: Expr) -> Expr:
    """``index`` over loop variables every node of a kernel names alike: the shared outer ``x0..``,
    then the node's own inner loops (a reduction's ``r<j>``, a pointwise node's ``x<k+j>``) as ``c<j>``."""
    inner = [rvar(j) for j in range(len(node.reduction_ranges))] if node.is_reduction else [xvar(k + j) for j in range(len(node.ranges) - k)]
    table = {v: sympy.Symbol(f"c{j}", integer=True, nonnegative=True) for j, v in enumerate(inner)}
    return sympy.expand(index.xreplace(table))


def in_place_safe(kernel: Kernel, accesses: dict[str, Access], out: Buffer, inp: str) -> bool:
    """True when ``kernel`` computes the same values if ``out`` is written into ``inp``'s storage.

    One node writes ``out``, each element once, as that node's only output (its body loads
    everything before its one store). Every load of ``inp`` in the kernel must hit, in shared
    loop variables over the same inner loops, exactly the index that store writes, and happen
    in that node or an earlier one. Then each storage element is read only at the loop point
    that writes it, before the write: the outer point owning it runs every earlier node first
    (C++ runs a kernel's nodes in order inside the shared loops; a Triton program runs them in
    order on whole outer points), and no other outer point (thread, program) touches it. A
    Triton looped kernel re-reads the row in every node, but its storing node reads and writes
    one chunk at a time, and no later node reads ``inp``. Kernels with split column partials
    riding along (a row loop that reads rows in a different order) are left alone.
    """
    if kernel.partials or kernel.is_empty:
        return False
    k = len(kernel.outer)
    writes = [(pos, n, i) for pos, n in enumerate(kernel.nodes) for name, i in accesses[n.name].stores if name == out.name]
    if len(writes) != 1:
        return False
    at, writer, store = writes[0]
    # A dense layout stores each of the node's points to its own element.
    if len(writer.outputs) != 1 or writer.outputs[0].layout.numel != normalize(math.prod(writer.ranges)):
        return False
    target = shared_index(writer, k, store)
    inner = inner_loops(writer, k)
    for pos, node in enumerate(kernel.nodes):
        loads = [i for name, i in accesses[node.name].loads if name == inp]
        if not loads:
            continue
        if pos > at or inner_loops(node, k) != inner:
            return False
        if any(sympy.expand(shared_index(node, k, i) - target) != 0 for i in loads):
            return False
    return True


def _in_place_input(kernel: Kernel, out: Buffer, accesses: dict[str, Access], buffers: dict[str, Buffer], dying: list[str]) -> str | None:
    """The first of ``dying`` (inputs of ``kernel`` free to give their storage away) that ``out``
    can be written into: of the same byte size, dtype and device, and read only where and before
    the kernel writes ``out``."""
    if not is_dense(out.layout.size, out.layout.stride) or out.layout.offset != 0:
        return None
    for name in dying:
        if _key(buffers[name]) == _key(out) and in_place_safe(kernel, accesses, out, name):
            return name
    return None


def input_donors(graph: LoweredGraph) -> dict[str, str]:
    """Output buffer -> the graph input whose new value it is and whose storage it may take.

    Only where returning the input itself is returning that output: the output is the whole
    buffer, returned once, in the input's exact layout, and the input is not returned as well."""
    returned: collections.Counter[str] = collections.Counter(o.view.buffer for o in graph.outputs if o.view is not None)
    donors: dict[str, str] = {}
    for out_pos, in_pos in graph.input_writes:
        if not (0 <= out_pos < len(graph.outputs) and 0 <= in_pos < len(graph.inputs)):
            continue
        view, name = graph.outputs[out_pos].view, graph.inputs[in_pos]
        if view is None or not name or returned[view.buffer] != 1 or name in returned or view.buffer in donors:
            continue
        out, inp = graph.buffers[view.buffer].layout, graph.buffers[name].layout
        whole = view.size == out.size and view.stride == out.stride and view.offset == 0 and out.offset == 0
        same = (out.dtype, out.device, out.size, out.stride) == (inp.dtype, inp.device, inp.size, inp.stride)
        if whole and same and is_dense(out.size, out.stride) and name not in donors.values():
            donors[view.buffer] = name
    return donors


def plan_memory(
    sched: Schedule, buffers: dict[str, Buffer], outputs: set[str], reuse: bool, local_kernels: Collection[str] | None = None,
    extra_local: frozenset[str] = frozenset(), donors: dict[str, str] | None = None,
) -> MemoryPlan:
    """Plan allocations over ``sched``: buffers named in ``outputs`` live to the end; those in
    ``extra_local`` (kept in registers by Triton kernels) are never allocated, like C++ locals.
    ``donors`` (from :func:`input_donors`) lets a kernel write an output into a graph input's
    storage when nothing reads that input after the kernel (and the kernel reads it only where,
    and before, it writes the same element)."""
    local = kernel_local_buffers(sched, outputs, local_kernels) | extra_local
    last_use: dict[str, int] = {}
    defined: dict[str, int] = {}
    for i, step in enumerate(sched.steps):
        if isinstance(step, Kernel):
            for node in step.nodes:
                for name in sched.accesses[node.name].reads():
                    last_use[name] = i
                for b in node.outputs:
                    defined[b.name] = i
        else:
            for name in step.reads:
                last_use[name] = i
            for ob in step.outputs:
                if ob is not None:
                    defined[ob.name] = i
    # A view returned by a fallback reads its input's storage: that storage stays allocated and
    # out of the reuse pool while the view lives, and the view's own storage is never reused.
    kept, views = _extend_aliased(sched, last_use, outputs)
    # Never written over in place: kept buffers, views, and buffers a fallback's view reads
    # through (their values must outlive the kernel that reads them last by name).
    barred = kept | views | {base for step in sched.steps if isinstance(step, ExternNode) for _, base in step.aliases}
    storage: dict[str, str] = {}
    allocate: dict[int, list[str]] = defaultdict(list)
    frees: dict[int, list[str]] = defaultdict(list)
    pool: dict[tuple[Size, torch.dtype, torch.device], list[str]] = defaultdict(list)
    storage_bytes: dict[str, int] = {}
    live = peak = reused = 0
    reused_storages: set[str] = set()
    free_events: list[tuple[int, str]] = []
    unread: set[str] = set()
    in_place: list[tuple[str, str]] = []
    handed_on: set[str] = set()
    for i, step in enumerate(sched.steps):
        made = [b for n in step.nodes for b in n.outputs] if isinstance(step, Kernel) else [b for b in step.outputs if b is not None]
        made = [b for b in made if b.name not in local]
        # Inputs dying in this kernel whose storage an output may take: made by an earlier step
        # (not a graph input, constant or kernel local), never seen through a view, not returned.
        dying = []
        if reuse and isinstance(step, Kernel):
            reads = dict.fromkeys(r for n in step.nodes for r in sched.accesses[n.name].reads())
            for name in reads:
                if last_use.get(name) == i and name in storage and defined[name] < i and name not in barred and name not in unread:
                    dying.append(name)
        for buf in made:
            if isinstance(step, ExternNode):
                storage[buf.name] = buf.name
                storage_bytes[buf.name] = 0 if buf.name in views else hint(buf.layout.nbytes)
                live += storage_bytes[buf.name]
                continue
            donor = donors.get(buf.name) if donors and isinstance(step, Kernel) else None
            if donor is not None and last_use.get(donor, -1) <= i and donor not in barred and in_place_safe(step, sched.accesses, buf, donor):
                # The new value of a graph input, stored over it: its old value is read by
                # nothing later, and the caller receives the input itself as this output.
                storage[buf.name] = donor
                in_place.append((buf.name, donor))
                reused += 1
                continue
            src = _in_place_input(step, buf, sched.accesses, buffers, dying) if buf.name not in kept else None
            if src is not None:
                # The storage passes from the input to the output: nothing is allocated or freed.
                storage[buf.name] = storage[src]
                dying.remove(src)
                handed_on.add(src)
                in_place.append((buf.name, src))
                reused += 1
                continue
            candidates = pool.get(_key(buf)) if reuse and buf.name not in outputs else None
            if candidates:
                s = candidates.pop()
                storage[buf.name] = s
                reused_storages.add(s)
                reused += 1
                live += storage_bytes[s]
            else:
                storage[buf.name] = buf.name
                storage_bytes[buf.name] = hint(buf.layout.nbytes)
                allocate[i].append(buf.name)
                live += storage_bytes[buf.name]
        peak = max(peak, live)
        for buf in made:
            if buf.name not in kept and buf.name not in last_use:
                last_use[buf.name] = i
                if isinstance(step, ExternNode):
                    # Nobody reads it: the wrapper takes it as the library returned it (any
                    # layout, or None for a result the kernel was not asked for), so its
                    # storage can never serve another buffer.
                    unread.add(buf.name)
        for name, last in last_use.items():
            if last != i or name in kept or name not in storage or name not in defined or name in local or name in handed_on:
                continue
            s = storage[name]
            live -= storage_bytes[s]
            buf = buffers[name]
            free_events.append((i, s))
            if name not in views and name not in unread and is_dense(buf.layout.size, buf.layout.stride) and buf.layout.offset == 0:
                pool[_key(buf)].append(s)
    # A storage that goes back to the pool and is never taken again is deleted right away.
    taken_after: dict[str, int] = {}
    for name, s in storage.items():
        if s != name:
            taken_after[s] = max(taken_after.get(s, -1), defined[name])
    for i, s in free_events:
        if taken_after.get(s, -1) <= i:
            frees[i].append(s)
    return MemoryPlan(
        storage,
        {k: tuple(v) for k, v in allocate.items()},
        {k: tuple(dict.fromkeys(v)) for k, v in frees.items()},
        peak,
        reused,
        local,
        tuple(in_place),
    )
