"""Realize or inline: a lazy value is recomputed in its readers only while that stays cheap,
counting what it inlines and where it is read transitively."""

from __future__ import annotations

import pytest
import torch
from conftest import check
from test_scheduler import layer_norm, softmax

import ptc_inductor
from ptc_inductor.scheduler import Kernel

aten = torch.ops.aten


def kernels_reading(compiled: ptc_inductor.CompiledGraph, buffer: str) -> list[str]:
    """Names of the generated kernels that load ``buffer``."""
    accesses = compiled.schedule.accesses
    return [k.name for k in compiled.schedule.kernels if any(buffer in accesses[n.name].reads() for n in k.nodes)]


def residual_layers(emb: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, *norm: torch.Tensor) -> torch.Tensor:
    """A GPT's residual stream: x = emb + pos, then per layer x = x + layer_norm(x) @ w, then a final norm."""
    x = aten.add.Tensor(emb, pos)
    for i in range(0, len(norm) - 2, 2):
        x = aten.add.Tensor(x, aten.mm.default(layer_norm(x, norm[i], norm[i + 1]), w))
    return layer_norm(x, norm[-2], norm[-1])


@pytest.mark.parametrize("layers", [1, 4])
def test_residual_stream_is_computed_once_not_in_every_later_norm(layers: int) -> None:
    g = torch.Generator().manual_seed(3)
    d = 32
    norm = [t for _ in range(layers + 1) for t in (torch.randn(d, generator=g), torch.randn(d, generator=g))]
    compiled = check(residual_layers, torch.randn(64, d, generator=g), torch.randn(64, d, generator=g), torch.randn(d, d, generator=g) / d, *norm)
    # Inlined, emb + pos would be recomputed by every later norm's kernel (and so would each
    # residual step): only the first norm's kernel may read the embeddings.
    assert kernels_reading(compiled, "arg0") == ["kernel0"]
    assert kernels_reading(compiled, "arg1") == ["kernel0"]
    # A residual step may be recomputed by the next one (an add of two buffers costs no more
    # than storing and reloading its result), but the work per kernel does not grow with depth.
    matmuls = {b.name for s in compiled.schedule.steps if not isinstance(s, Kernel) for b in s.outputs if b is not None}
    for kernel in compiled.schedule.kernels:
        reads = {r for n in kernel.nodes for r in compiled.schedule.accesses[n.name].reads()}
        assert len(reads & matmuls) <= 2, (kernel.name, sorted(reads))


def test_cheap_value_read_in_one_kernel_stays_inlined() -> None:
    # exp(x - max) is read by the row sum and by the division: recomputing it beats storing it.
    compiled = check(softmax, torch.randn(32, 100))
    assert compiled.kernel_count == 1 and len(compiled.memory_plan.storage) == 1


def test_value_read_along_several_pointwise_paths_of_one_node_counts_once() -> None:
    # A GELU backward's shape: the output reads t four times at its own index (t*t - t, t + 1),
    # which code generation computes once; the row sum reads it once more. Two evaluations of
    # a cheap expression: inlined in both, not stored. (Counted per path, five evaluations made
    # it look worth a buffer: GPT-2's backward stored each layer's recomputed tanh.)
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = x
        for _ in range(3):
            t = aten.tanh.default(aten.mul.Tensor(t, 1.5))
        g = aten.mul.Tensor(aten.sub.Tensor(aten.mul.Tensor(t, t), t), aten.add.Tensor(t, 1.0))
        return g, aten.sum.dim_IntList(t, [1])

    compiled = check(fn, torch.randn(64, 48, generator=torch.Generator().manual_seed(5)))
    pointwise = [n for k in compiled.schedule.kernels for n in k.nodes if n.kind == "pointwise"]
    assert len(pointwise) == 1  # the output; t is not stored


def test_value_read_at_two_shifted_indices_counts_twice() -> None:
    # t[1:] - t[:-1] reads t at two indices of each element: two evaluations per element, so an
    # expression costly enough is stored once instead.
    def fn(x: torch.Tensor) -> torch.Tensor:
        t = x
        for _ in range(10):
            t = aten.mul.Tensor(aten.tanh.default(t), 1.5)
        return aten.sub.Tensor(aten.slice.Tensor(t, 1, 1, 48), aten.slice.Tensor(t, 1, 0, 47))

    compiled = check(fn, torch.randn(64, 48, generator=torch.Generator().manual_seed(6)))
    pointwise = [n for k in compiled.schedule.kernels for n in k.nodes if n.kind == "pointwise"]
    assert len(pointwise) == 2  # t stored once, then the difference


def test_value_feeding_a_norm_is_realized_when_recomputing_it_costs_more() -> None:
    # Four evaluations (mean, twice in the variance, the normalization) of an expression of
    # twenty ops: storing it once is cheaper; the node computing it joins the norm's kernel.
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(10):
            h = aten.mul.Tensor(aten.tanh.default(h), 1.5)
        return layer_norm(h, w, b)

    g = torch.Generator().manual_seed(4)
    compiled = check(fn, torch.randn(64, 48, generator=g), torch.randn(48, generator=g), torch.randn(48, generator=g))
    assert compiled.kernel_count == 1
    pointwise = [n for k in compiled.schedule.kernels for n in k.nodes if n.kind == "pointwise"]
    assert len(pointwise) == 2  # the realized expression and the output


def test_norm_output_reshaped_for_a_matmul_is_stored_once_in_the_norms_kernel() -> None:
    # A transformer block: layer_norm over [batch, seq, dim], reshaped to [batch*seq, dim] for the
    # matmul, and also added to the residual without the reshape. Realizing the reshape would
    # copy in a loop nest of its own shape ([batch*seq, dim], another kernel) while the residual
    # add recomputed the norm; storing the norm's output once and viewing it serves both.
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = layer_norm(x, w, b)
        y = aten.mm.default(aten.view.default(h, [256, 64]), m)
        return y, aten.add.Tensor(x, h)

    g = torch.Generator().manual_seed(6)
    compiled = check(fn, torch.randn(4, 64, 64, generator=g), torch.randn(64, generator=g), torch.randn(64, generator=g), torch.randn(64, 64, generator=g))
    assert compiled.kernel_count == 1
    (kernel,) = compiled.schedule.kernels
    pointwise = [n for n in kernel.nodes if n.kind == "pointwise"]
    assert len(pointwise) == 2  # the norm's output and the residual add, which loads it
    assert set(compiled.schedule.accesses[pointwise[1].name].reads()) == {"arg0", pointwise[0].outputs[0].name}


def test_transposed_lazy_value_for_a_matmul_is_a_view_of_the_stored_value() -> None:
    # A weight gradient: mm(grad_h.T, x), with grad_h lazy (an activation's backward) and also
    # summed into the bias gradient. Storing grad_h in its own order and passing the matmul a
    # transposed view beats copying it transposed (strided writes) and recomputing it.
    def fn(g: torch.Tensor, h: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad_h = aten.mul.Tensor(g, aten.tanh.default(h))
        return aten.mm.default(aten.permute.default(grad_h, [1, 0]), x), aten.sum.dim_IntList(grad_h, [0])

    g = torch.Generator().manual_seed(7)
    compiled = check(fn, torch.randn(128, 96, generator=g), torch.randn(128, 96, generator=g), torch.randn(128, 32, generator=g))
    pointwise = [n for k in compiled.schedule.kernels for n in k.nodes if n.kind == "pointwise"]
    assert [n.ranges for n in pointwise] == [(128, 96)]
    (stored,) = pointwise[0].outputs
    (matmul,) = (s for s in compiled.schedule.steps if not isinstance(s, Kernel))
    assert matmul.reads == (stored.name, "arg2")
