"""Output plans of traced programs."""

from __future__ import annotations

import torch

from ptc_aot import trace_program
from ptc_spec import TensorMeta


def test_output_plans_classify_outputs() -> None:
    def fn(x: torch.Tensor) -> tuple[object, ...]:
        y = x * 2
        return x[0], y, y.t(), x.sum(), 7

    program = trace_program(fn, [TensorMeta.of((3, 3), requires_grad=True)], joint=True)
    kinds = [p.kind for p in program.outputs]
    assert kinds == ["input", "alias", "alias", "graph", "constant"]
    assert program.joint and program.differentiable == (True, True)


def test_joint_trace_has_tangent_inputs_after_primals() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sum(0)

    program = trace_program(fn, [TensorMeta.of((2, 3)), TensorMeta.of((3,), requires_grad=True)], joint=True)
    names = [n.name for n in program.gm.graph.nodes if n.op == "placeholder"]
    assert names == ["primals_0", "primals_1", "tangents_0"]
    grads = list(program.gm.graph.output_node().args[0][1])  # type: ignore[index]
    assert grads[0] is None and grads[1] is not None


def test_no_input_requiring_grad_gives_a_forward_only_trace() -> None:
    program = trace_program(lambda x: x * 2, [TensorMeta.of((2,))], joint=True)
    assert not program.joint
    assert [n.name for n in program.gm.graph.nodes if n.op == "placeholder"] == ["primals_0"]
