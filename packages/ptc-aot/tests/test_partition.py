"""The partitioner: never more bytes than saving everything, and never recomputing matmuls."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx
from aot_models import MODELS, make_inputs

from ptc_aot import Partition, aot, functionalize, partition, trace_program
from ptc_aot.partition import UNSTORED_COST
from ptc_aot.recompute import NEVER_RECOMPUTE
from ptc_spec import META_KEY, TensorMeta
from ptc_spec.testing import compare_with_eager

aten = torch.ops.aten


def _split(name: str, mode: str) -> Partition:
    fn = MODELS[name][0]
    args = make_inputs(name)
    program = trace_program(fn, [TensorMeta.from_tensor(a) for a in args], joint=True)
    return partition(functionalize(program.gm), len(args), mode)


def _tangent_dependent(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    found = {n for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")}
    for node in gm.graph.nodes:
        if any(a in found for a in node.all_input_nodes):
            found.add(node)
    return found


def test_gpt_block_min_cut_saves_strictly_fewer_bytes_than_save_all() -> None:
    min_cut, save_all = _split("gpt_block", "min_cut"), _split("gpt_block", "save_all")
    assert save_all.saved_bytes == save_all.baseline_bytes
    assert min_cut.baseline_bytes == save_all.saved_bytes
    assert min_cut.saved_bytes < save_all.saved_bytes


@pytest.mark.parametrize("name", sorted(MODELS))
def test_min_cut_never_saves_more_than_save_all(name: str) -> None:
    split = _split(name, "min_cut")
    assert split.saved_bytes <= split.baseline_bytes


@pytest.mark.parametrize("name", ["gpt_block", "attention", "mlp"])
def test_backward_recomputes_no_matmul(name: str) -> None:
    backward = _split(name, "min_cut").backward
    from_tangents = _tangent_dependent(backward)
    expensive = [n for n in backward.graph.nodes if n.op == "call_function" and n.target in NEVER_RECOMPUTE]
    assert expensive, "the backward of a matmul model has matmuls of its own"
    recomputed = [n.name for n in expensive if n not in from_tangents]
    assert recomputed == []


def test_gpt_block_recomputes_the_gelu_its_matmuls_read_in_both_passes() -> None:
    # The forward's second matmul reads the GELU's result and so does the backward's weight
    # gradient, but the GELU's gradient needs its input anyway: saving that input alone and
    # recomputing the GELU (fused with its gradient by the backend) holds one activation, not two.
    split = _split("gpt_block", "min_cut")
    forward_gelus = [n for n in split.forward.graph.nodes if n.target is aten.gelu.default]
    backward_gelus = [n for n in split.backward.graph.nodes if n.target is aten.gelu.default]
    assert len(forward_gelus) == 1 and len(backward_gelus) == 1
    assert not any(name.startswith("gelu") for name in split.saved)
    gelu_input = forward_gelus[0].args[0]
    assert isinstance(gelu_input, torch.fx.Node) and gelu_input.name in split.saved


def _scaled_gelu_mlp(x: torch.Tensor, w1: torch.Tensor, scale: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.gelu(x @ w1) * scale) @ w2


def _split_fn(fn: Any, args: list[torch.Tensor]) -> Partition:
    program = trace_program(fn, [TensorMeta.from_tensor(a) for a in args], joint=True)
    return partition(functionalize(program.gm), len(args), "min_cut")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_gelu_and_its_scaled_product_are_recomputed_from_the_matmul(dtype: torch.dtype) -> None:
    # The GELU's result feeds a multiply whose product the second matmul reads in both passes:
    # the backward recomputes both from the saved first matmul's result, which the GELU's
    # gradient reads anyway, and saves neither.
    args = [torch.randn(4, 8, dtype=dtype), torch.randn(8, 16, dtype=dtype), torch.randn(16, dtype=dtype), torch.randn(16, 8, dtype=dtype)]
    split = _split_fn(_scaled_gelu_mlp, [a.requires_grad_(True) for a in args])
    assert len([n for n in split.backward.graph.nodes if n.target is aten.gelu.default]) == 1
    assert not any(name.startswith(("gelu", "mul")) for name in split.saved)
    assert "mm_default" in split.saved


def test_saved_values_are_forward_outputs_and_backward_inputs() -> None:
    split = _split("mlp", "min_cut")
    forward_outputs = list(split.forward.graph.output_node().args[0])  # type: ignore[arg-type]
    saved_nodes = forward_outputs[split.num_outputs :]
    assert [n.name for n in saved_nodes] == list(split.saved)
    backward_inputs = [n.name for n in split.backward.graph.nodes if n.op == "placeholder"]
    assert backward_inputs[: len(split.saved)] == list(split.saved)


def test_unknown_partition_mode_is_refused() -> None:
    from ptc_aot import PartitionError

    fn = MODELS["mlp"][0]
    args = make_inputs("mlp")
    program = trace_program(fn, [TensorMeta.from_tensor(a) for a in args], joint=True)
    with pytest.raises(PartitionError, match="unknown partition"):
        partition(functionalize(program.gm), len(args), "greedy")


def _relu_stack(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    h1 = torch.relu(x @ w1) * 2
    h2 = torch.relu(h1 @ w2) * 2
    return torch.relu(h2 @ w3) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_recomputed_values_are_made_just_before_their_first_use(dtype: torch.dtype) -> None:
    # Recomputed in the backward, the first layer's activation is needed only for the last
    # gradients: made at the backward's start it would be held through the whole backward.
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, 16, generator=g).to(dtype), *(torch.randn(16, 16, generator=g).to(dtype).requires_grad_() for _ in range(3))]
    program = trace_program(_relu_stack, [TensorMeta.from_tensor(a) for a in args], joint=True)
    backward = partition(functionalize(program.gm), len(args)).backward
    from_tangents = _tangent_dependent(backward)
    nodes = list(backward.graph.nodes)
    recomputed = [n for n in nodes if n.op == "call_function" and n not in from_tangents]
    assert recomputed, "the min cut recomputes cheap values (relu, mul) in the backward"
    for node in recomputed:
        first = min(nodes.index(u) for u in node.users)
        between = nodes[nodes.index(node) + 1 : first]
        # Only other values made for the same use come in between: no backward work.
        assert all(n not in from_tangents for n in between), (node.name, [n.name for n in between])
    compare_with_eager(aot(_relu_stack, args), _relu_stack, *args, grads=True)


def _cross_entropy(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # log_softmax as its decomposition writes it (what ptc hands the partitioner), then the loss.
    logits = (x @ w).float()
    shifted = logits - logits.amax(1, keepdim=True)
    logp = shifted - shifted.exp().sum(1, keepdim=True).log()
    return -logp.gather(1, target[:, None]).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cross_entropy_saves_its_logits_and_row_statistics_not_its_log_softmax(dtype: torch.dtype) -> None:
    # The forward stores the matmul's logits anyway; the log-softmax only its loss reads, at one
    # class per row. Saving the log-softmax (as many bytes as the logits) would add that write.
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(16, 8, generator=g).to(dtype), torch.randn(8, 50, generator=g).to(dtype).requires_grad_(), torch.randint(0, 50, (16,), generator=g)]
    split = _split_fn(_cross_entropy, args)
    saved = [n for n in split.forward.graph.output_node().args[0][split.num_outputs :]]  # type: ignore[index]
    whole = [n for n in saved if n.meta[META_KEY].shape == (16, 50)]
    assert [n.target for n in whole] == [aten.mm.default], [n.name for n in saved]
    assert split.saved_bytes < 16 * 50 * dtype.itemsize * UNSTORED_COST
    compare_with_eager(aot(_cross_entropy, args), _cross_entropy, *args, grads=True)


def _squares_in_float32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = (a @ b).float()
    return (h * h).sum()


def test_a_dtype_conversion_is_recomputed_from_its_narrower_source() -> None:
    # The backward reads the float32 copy of a bf16 matmul result: saving the bf16 result and
    # converting it again halves the bytes saved.
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(16, 8, generator=g).bfloat16().requires_grad_(), torch.randn(8, 32, generator=g).bfloat16().requires_grad_()]
    split = _split_fn(_squares_in_float32, args)
    assert not any(name.startswith("_to_copy") for name in split.saved), split.saved
    assert split.saved_bytes == (16 * 8 + 8 * 32 + 16 * 32) * 2
    compare_with_eager(aot(_squares_in_float32, args), _squares_in_float32, *args, grads=True)
