"""The same end-to-end comparisons on a CUDA device (run with ``-m gpu``)."""

from __future__ import annotations

import pytest
import torch
from aot_models import MODELS, make_inputs

from ptc_aot import aot
from ptc_spec.testing import compare_with_eager

pytestmark = pytest.mark.gpu


def _cuda(args: list[object]) -> list[object]:
    moved: list[object] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            moved.append(a.detach().to("cuda").requires_grad_(a.requires_grad))
        else:
            moved.append(a)
    return moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_outputs_and_grads_match_eager_on_cuda(name: str) -> None:
    fn = MODELS[name][0]
    compiled = aot(fn, _cuda(make_inputs(name)))
    compare_with_eager(compiled, fn, *_cuda(make_inputs(name, seed=1)), grads=True, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cudnn_batch_norm_running_stats_become_graph_outputs() -> None:
    fn = MODELS["conv_bn_relu"][0]
    seen: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        seen.append(gm)
        return gm

    compiled = aot(fn, _cuda(make_inputs("conv_bn_relu")), record, record)
    assert compiled.programs[0].mutated_inputs == (4, 5)
    compare_with_eager(compiled, fn, *_cuda(make_inputs("conv_bn_relu", seed=1)), grads=True, rtol=1e-3, atol=1e-3)  # runs the backward too
    backwards = 0
    for gm in seen:
        for node in gm.graph.nodes:
            if node.target in (torch.ops.aten.cudnn_batch_norm.default, torch.ops.aten.cudnn_batch_norm_backward.default):
                assert node.args[3] is None and node.args[4] is None, node.target
                backwards += node.target is torch.ops.aten.cudnn_batch_norm_backward.default
    assert backwards == 1
    # The backward reads no running statistics, so the forward saves none of them (its outputs
    # are the result, the two new running statistics, then the saved values).
    placeholders = [n for n in seen[0].graph.nodes if n.op == "placeholder"]
    (out,) = [n for n in seen[0].graph.nodes if n.op == "output"]
    assert not {placeholders[4], placeholders[5]} & set(out.args[0][3:])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_save_on_cpu_moves_the_compiled_programs_saved_values_and_grads_match(dtype: torch.dtype) -> None:
    # On CUDA save_on_cpu's pack hook copies each saved tensor to pinned host memory: traced
    # tensors have no storage to copy, so the hook must see only the compiled program's values.
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).tanh().sum(1)

    x, w = (torch.randn(*s, device="cuda", dtype=dtype, requires_grad=True) for s in ((8, 5), (5, 3)))
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        compiled = aot(fn, [x, w])
        compare_with_eager(compiled, fn, x, w, grads=True)
    # The hook's host copies were never traced into the program.
    graph_ops = {str(n.target) for p in compiled.programs for n in p.forward.graph.nodes}
    assert not any("pin_memory" in op or "_to_copy" in op for op in graph_ops), graph_ops
