"""ptc under torch.distributed: collectives captured in graphs, and DDP training, on 2 gloo processes.

Each test spawns two ranks that meet through a file store; a rank's failed assertion fails
the test with that rank's traceback. Every check compares with eager on the same ranks.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")

WORLD = 2

# The newer names where this torch has them (2.11 on the GPU machine may not).
ALL_GATHER = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
REDUCE_SCATTER = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor


def _run(rank: int, store: str, body: Callable[[int], None], backend: str) -> None:
    os.environ.setdefault("PTC_CHECK_BOUNDARIES", "1")
    if os.environ.get("PTC_TEST_RANK_TIMEOUT"):
        # A rank stuck in a collective prints where it is and exits, instead of hanging the run.
        faulthandler.dump_traceback_later(float(os.environ["PTC_TEST_RANK_TIMEOUT"]), exit=True)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        body(rank)
        # No rank tears its connections down while the other still uses them (gloo may abort).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(body: Callable[[int], None], tmp_path: Path, backend: str = "gloo") -> None:
    """Run ``body(rank)`` on 2 ranks (gloo on the CPU, or nccl with a GPU each); raises what any rank raised."""
    store = tempfile.mkstemp(dir=tmp_path)[1]
    os.unlink(store)  # a fresh name: the file store creates it
    mp.spawn(_run, args=(store, body, backend), nprocs=WORLD, join=True)


def _breaks(fn: Callable[..., Any], *args: Any) -> tuple[int, int]:
    import ptc

    report = ptc.explain(fn)(*args)
    return report.graph_count, report.graph_break_count


# Collectives: each function is run eagerly and compiled, on inputs that differ per rank.


def _all_reduce_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def _all_reduce_input_max(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.sin()


def _all_gather_into_tensor(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(WORLD * x.shape[0], *x.shape[1:], dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.cos())
    return out * 3


def _reduce_scatter_tensor(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0] // WORLD, *x.shape[1:], dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, x + 1)
    return out.exp()


def _broadcast_from_rank_1(x: torch.Tensor) -> torch.Tensor:
    y = x - 1
    dist.broadcast(y, src=1)
    return y * y


def _functional_collectives(x: torch.Tensor) -> torch.Tensor:
    a = funcol.all_reduce(x, "sum", dist.group.WORLD)
    b = ALL_GATHER(x, 1, dist.group.WORLD)
    c = REDUCE_SCATTER(x, "sum", 0, dist.group.WORLD)
    d = funcol.broadcast(x, 0, dist.group.WORLD)
    return a.sum() + b.sum(1, keepdim=True)[: c.shape[0]] * c + d[: c.shape[0]]


def _c10d_functional_ops(x: torch.Tensor) -> torch.Tensor:
    issued = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)
    independent = x.tanh() * 2
    return torch.ops._c10d_functional.wait_tensor(issued) + independent


COLLECTIVES = [
    _all_reduce_intermediate, _all_reduce_input_max, _all_gather_into_tensor, _reduce_scatter_tensor, _broadcast_from_rank_1,
]  # fmt: skip


def _device(rank: int, cuda: bool) -> torch.device:
    return torch.device("cuda", rank) if cuda else torch.device("cpu")


def _check_collectives(rank: int, cuda: bool = False) -> None:
    import ptc
    from ptc_spec.testing import compare_with_eager

    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.arange(24, dtype=torch.float32).reshape(4, 6) / 10 + rank).to(_device(rank, cuda), dtype)
        for fn in COLLECTIVES:
            assert _breaks(fn, x.clone()) == (1, 0), fn.__name__
            for backend in ("aot_eager", "inductor"):
                ptc.reset()
                compare_with_eager(ptc.compile(fn, backend=backend), fn, x)


def test_collectives_are_captured_in_one_graph_and_match_eager(tmp_path: Path) -> None:
    spawn(_check_collectives, tmp_path)


def _check_functional_collectives(rank: int, cuda: bool = False) -> None:
    import ptc
    from ptc_spec.testing import compare_with_eager

    x = torch.randn(4, 6, device=_device(rank, cuda)) + rank
    for fn in (_functional_collectives, _c10d_functional_ops):
        assert _breaks(fn, x) == (1, 0), fn.__name__
        ptc.reset()
        compare_with_eager(ptc.compile(fn, backend="inductor"), fn, x)


def test_functional_collectives_are_captured_and_match_eager(tmp_path: Path) -> None:
    spawn(_check_functional_collectives, tmp_path)


TWO_GPUS = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < WORLD, reason="needs 2 GPUs")


@pytest.mark.gpu
@TWO_GPUS
@pytest.mark.parametrize("check", [_check_collectives, _check_functional_collectives], ids=["c10d", "functional"])
def test_collectives_on_two_gpus_with_nccl_are_captured_and_match_eager(check: Callable[..., None], tmp_path: Path) -> None:
    spawn(functools.partial(check, cuda=True), tmp_path, backend="nccl")


def _check_group_made_outside(rank: int) -> None:
    import ptc
    from ptc_spec.testing import compare_with_eager

    group = dist.new_group([0, 1])

    def fn(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        dist.all_reduce(x, group=group)
        return x * 2

    x = torch.randn(5) + rank
    assert _breaks(fn, x.clone(), group) == (1, 0)
    compiled = ptc.compile(fn, backend="inductor")
    compare_with_eager(compiled, fn, x, group)
    # Another group object is another graph (guarded by identity), with its own result.
    other = dist.new_group([0, 1])
    compare_with_eager(compiled, fn, x, other)


def test_collective_on_a_group_made_outside_the_frame(tmp_path: Path) -> None:
    spawn(_check_group_made_outside, tmp_path)


# DDP training of a small GPT.


class GPT(torch.nn.Module):
    """ptc.demo's small GPT with a cross-entropy loss; ``unused`` is a layer forward never calls."""

    def __init__(self, vocab: int = 64, unused: bool = False) -> None:
        from ptc.demo import GPT as DemoGPT

        super().__init__()
        self.gpt = DemoGPT(vocab=vocab, dim=32, layers=2, heads=2, seq=16)
        self.unused = torch.nn.Linear(32, 32) if unused else None

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.gpt(idx).flatten(0, 1), targets.flatten())


def _batches(rank: int, steps: int, vocab: int = 64, seq: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 + rank)
    return [(torch.randint(vocab, (4, seq), generator=gen), torch.randint(vocab, (4, seq), generator=gen)) for _ in range(steps)]


def _train(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], accumulate: int = 1) -> list[float]:
    """SGD steps on ``batches``; with ``accumulate`` > 1, all but the last micro-batch of a step run under no_sync."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for start in range(0, len(batches), accumulate):
        for i, (idx, targets) in enumerate(batches[start : start + accumulate]):
            last = i == accumulate - 1
            ctx = model.no_sync() if not last and hasattr(model, "no_sync") else _nothing()
            with ctx:
                loss = model(idx, targets)
                loss.backward()
            losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
    return losses


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _ddp_matches_eager(
    rank: int, order: str, accumulate: int = 1, unused: bool = False, static_graph: bool = False, dtype: torch.dtype = torch.float32,
    cuda: bool = False,
) -> None:  # fmt: skip
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ptc
    from ptc.pipeline import STATS

    device = _device(rank, cuda)
    batches = [(idx.to(device), targets.to(device)) for idx, targets in _batches(rank, 4 if accumulate == 1 else 2 * accumulate)]
    # bucket_cap_mb small enough that the model's ~110 kB of parameters fill several buckets.
    kw: dict[str, Any] = {"bucket_cap_mb": 0.015, "find_unused_parameters": unused, "static_graph": static_graph}
    if cuda:
        kw["device_ids"] = [rank]
    torch.manual_seed(0)
    eager = DDP(GPT(unused=unused).to(device, dtype), **kw)
    torch.manual_seed(0)
    model = GPT(unused=unused).to(device, dtype)
    compiled = ptc.compile(DDP(model, **kw)) if order == "outside" else DDP(ptc.compile(model), **kw)
    expected = _train(eager, batches, accumulate)
    STATS.reset()
    actual = _train(compiled, batches, accumulate)
    # GPU kernels (Triton's, cuBLAS's) sum in other orders than the CPU's: a looser float32 bound.
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype != torch.float32 else ({"rtol": 1e-3, "atol": 1e-4} if cuda else {"rtol": 1e-4, "atol": 1e-5})
    torch.testing.assert_close(actual, expected, **tol)
    for p, q in zip(model.parameters(), eager.module.parameters()):
        torch.testing.assert_close(p, q, **tol)
    # The captured graph was split at bucket boundaries: more than one piece, each its own
    # autograd node, so DDP's hooks see each bucket's gradients as soon as its piece is done.
    assert STATS.ddp_pieces > 1, STATS
    idx, targets = batches[0]
    loss = compiled(idx, targets)
    assert _compiled_backward_nodes(loss) == STATS.ddp_pieces
    loss.backward()  # DDP expects each forward's backward before the next forward


def _compiled_backward_nodes(loss: torch.Tensor) -> int:
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return sum("CompiledFunction" in type(node).__name__ for node in seen)


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_ddp_training_matches_eager_ddp(order: str, tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order=order), tmp_path)


@pytest.mark.gpu
@TWO_GPUS
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("order", ["outside", "inside"])
def test_ddp_training_on_two_gpus_with_nccl_matches_eager_ddp(order: str, dtype: torch.dtype, tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order=order, dtype=dtype, cuda=True), tmp_path, backend="nccl")


def test_ddp_training_in_bfloat16_matches_eager_ddp(tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order="outside", dtype=torch.bfloat16), tmp_path)


def test_ddp_no_sync_accumulation_matches_eager(tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order="outside", accumulate=2), tmp_path)


def test_ddp_find_unused_parameters_matches_eager(tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order="inside", unused=True), tmp_path)


def test_ddp_static_graph_matches_eager(tmp_path: Path) -> None:
    spawn(functools.partial(_ddp_matches_eager, order="outside", static_graph=True), tmp_path)


def _ddp_is_captured_without_breaks(rank: int) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ptc

    ddp = DDP(GPT(), bucket_cap_mb=0.015)
    idx, targets = _batches(rank, 1)[0]
    ddp(idx, targets)  # the first forward imports what DDP needs; those imports are not the model
    report = ptc.explain(ddp)(idx, targets)
    assert (report.graph_count, report.graph_break_count) == (1, 0), report
    # DDP.forward ran as it is: the graph holds the model's ops, no DDP bookkeeping.
    assert any("linear" in op for op in report.ops_per_graph[0])


def test_ddp_forward_runs_eagerly_around_one_captured_graph(tmp_path: Path) -> None:
    spawn(_ddp_is_captured_without_breaks, tmp_path)


def test_ddp_split_can_be_switched_off() -> None:
    from ptc.config import make_options

    assert make_options(None, None, {}).ddp_split
    assert not make_options(None, {"ddp_split": False}, {}).ddp_split
    assert not make_options(None, None, {"PTC_DDP_SPLIT": "0"}).ddp_split


def test_split_by_parameters_cuts_where_buckets_fill() -> None:
    import ptc_capture
    from ptc.distributed import split_by_parameters

    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(4)))
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def keep(gm: torch.fx.GraphModule, examples: list[Any]) -> Any:
        graphs.append((gm, list(examples)))
        return gm

    x = torch.randn(2, 16)
    ptc_capture.optimize(keep)(model)(x)
    gm, examples = graphs[0]
    per_layer = (16 * 16 + 16) * 4
    pieces = split_by_parameters(gm, examples, cap=2 * per_layer)
    assert pieces is not None and len(pieces) == 2
    # Each piece owns two layers' parameters; running the pieces in order is the whole graph.
    env = dict(zip([n for n in gm.graph.nodes if n.op == "placeholder"], examples))
    for piece in pieces:
        assert sum(isinstance(env.get(n), torch.nn.Parameter) for n in piece.inputs) == 4
        env.update(zip(piece.outputs, piece.module(*[env[n] for n in piece.inputs])))
    torch.testing.assert_close(env[gm.graph.output_node().args[0][0]], model(x))
    assert split_by_parameters(gm, examples, cap=10 * per_layer) is None


def test_independent_compute_moves_between_a_collective_and_its_wait() -> None:
    from ptc.distributed import sink_waits

    ops = torch.ops._c10d_functional
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    issued = graph.call_function(ops.all_reduce.default, (x, "sum", "0"))
    waited = graph.call_function(ops.wait_tensor.default, (issued,))
    independent = graph.call_function(torch.ops.aten.mm.default, (y, y))
    used = graph.call_function(torch.ops.aten.add.Tensor, (waited, independent))
    graph.output((used,))
    gm = sink_waits(torch.fx.GraphModule(torch.nn.Module(), graph))
    order = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    assert order == [issued.name, independent.name, waited.name, used.name]


class _Block(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln, self.fc, self.proj = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 2 * dim), torch.nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln(x))))


class BlockStack(torch.nn.Module):
    """A small residual language model written here, in user code, as a user's would be: the frame
    hook compiles its blocks' forwards where a graph break leaves them (ptc.demo's code is ptc's own,
    never hooked)."""

    def __init__(self, vocab: int = 64, dim: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.emb, self.head = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab)
        self.blocks = torch.nn.ModuleList(_Block(dim) for _ in range(layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return torch.nn.functional.cross_entropy(self.head(x).flatten(0, 1), targets.flatten())


def _fsdp2_matches_eager(rank: int, compiled_part: str, cuda: bool = False) -> None:
    from torch.distributed.fsdp import fully_shard

    import ptc
    from ptc.pipeline import STATS

    def sharded(compile_blocks: bool) -> BlockStack:
        torch.manual_seed(0)
        model = BlockStack().to(_device(rank, cuda))
        for i, block in enumerate(model.blocks):
            if compile_blocks:
                block = model.blocks[i] = ptc.compile(block)
            fully_shard(block)
        fully_shard(model)
        return model

    batches = [(idx.to(_device(rank, cuda)), targets.to(_device(rank, cuda))) for idx, targets in _batches(rank, 3)]
    eager, sharded_model = sharded(False), sharded(compiled_part == "blocks")
    compiled = ptc.compile(sharded_model) if compiled_part == "root" else sharded_model
    expected = _train(eager, batches)
    STATS.reset()
    actual = _train(compiled, batches)
    # GPU kernels sum in other orders than the CPU's: the DDP tests' looser float32 bound there.
    tol = {"rtol": 1e-3, "atol": 1e-4} if cuda else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(actual, expected, **tol)
    for p, q in zip(sharded_model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.full_tensor(), q.full_tensor(), **tol)
    blocks = len(sharded_model.blocks)
    if compiled_part == "blocks":
        # Each block is one forward and one backward graph; FSDP's hooks ran around them.
        assert STATS.graphs == 2 * blocks, STATS
    else:
        # FSDP's hooks break the root's graph at each block call and run eagerly; every block's
        # forward is then captured on its own, as are the embedding before and the loss after:
        # a forward and a backward graph each.
        assert STATS.graphs == 2 * (blocks + 2), STATS


@pytest.mark.parametrize("compiled_part", ["blocks", "root"])
def test_fsdp2_with_compiled_blocks_or_root_matches_eager_fsdp2(compiled_part: str, tmp_path: Path) -> None:
    spawn(functools.partial(_fsdp2_matches_eager, compiled_part=compiled_part), tmp_path)


@pytest.mark.gpu
@TWO_GPUS
@pytest.mark.parametrize("compiled_part", ["blocks", "root"])
def test_fsdp2_on_two_gpus_with_nccl_matches_eager_fsdp2(compiled_part: str, tmp_path: Path) -> None:
    spawn(functools.partial(_fsdp2_matches_eager, compiled_part=compiled_part, cuda=True), tmp_path, backend="nccl")
