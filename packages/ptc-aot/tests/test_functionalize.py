"""Functionalization: mutations and views behave as in eager, and graphs hold no mutation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ptc_aot import UnsupportedMutationError, aot, functionalize, trace_program
from ptc_spec import TensorMeta
from ptc_spec.testing import compare_with_eager


def _mutates_input(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * w


def _mutates_through_view(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = x.view(-1)[2:5]
    v.mul_(2)
    return x.sum(0) * w, v


def _reads_base_after_view_write(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[1:3].mul_(5)
    y.select(1, 0).add_(1)
    return y * 2


def _setitem(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x * 1
    z[0] = y
    return z.t()


def _saves_then_mutates(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x.exp() * w
    x.add_(1)
    return y


def _returns_views_of_inputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.t(), x[1], (x * w).sum(), w


def _returns_aliased_outputs(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2
    return y[0], y[1:], y.view(-1)


def _returns_base_and_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.sin()
    return y, y.t()


def _out_variant(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    buf = torch.empty(3, 4)
    torch.mul(x, 2, out=buf)
    return buf * w


def _returns_mutated_input(x: torch.Tensor) -> torch.Tensor:
    return x.mul_(2)


def _optimizer_step(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    # Eager allows mutating a leaf that requires grad under no_grad (optimizer updates).
    with torch.no_grad():
        w.sub_(0.1 * g)
    return (x @ w).tanh()


def _writes_through_split(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    first, _ = y.split(2)
    first.mul_(3)
    return y + 1


def _views_in_place(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # transpose_/t_/unsqueeze_ re-view a tensor (stft does): later reads, writes through it,
    # and outputs see the new shape, and writes still reach the storage it shares.
    x = a * 1
    y = x.view(2, 6)
    y.transpose_(0, 1)
    z = x * 2
    z.t_()
    z.unsqueeze_(0)
    y.mul_(3)
    return y, z, z + 1, x


def _view_of_input_in_place(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.view(2, 6)
    y.transpose_(0, 1)
    return y, y + 1


CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "mutates_input": (_mutates_input, lambda: [torch.randn(3), torch.randn(3, requires_grad=True)]),
    "mutates_through_view": (_mutates_through_view, lambda: [torch.randn(4, 3), torch.randn(3, requires_grad=True)]),
    "reads_base_after_view_write": (_reads_base_after_view_write, lambda: [torch.randn(4, 3, requires_grad=True)]),
    "setitem": (_setitem, lambda: [torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)]),
    "saves_then_mutates": (_saves_then_mutates, lambda: [torch.randn(3), torch.randn(3, requires_grad=True)]),
    "returns_views_of_inputs": (_returns_views_of_inputs, lambda: [torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)]),
    "returns_aliased_outputs": (_returns_aliased_outputs, lambda: [torch.randn(4, 3, requires_grad=True)]),
    "returns_base_and_view": (_returns_base_and_view, lambda: [torch.randn(4, 3, requires_grad=True)]),
    "out_variant": (_out_variant, lambda: [torch.randn(3, 4), torch.randn(3, 4, requires_grad=True)]),
    "returns_mutated_input": (_returns_mutated_input, lambda: [torch.randn(3)]),
    "optimizer_step": (_optimizer_step, lambda: [torch.randn(3, 4), torch.randn(4, 2, requires_grad=True), torch.randn(4, 2)]),
    "writes_through_split": (_writes_through_split, lambda: [torch.randn(4, 3)]),
    "views_in_place": (_views_in_place, lambda: [torch.randn(3, 4, requires_grad=True)]),
    "view_of_input_in_place": (_view_of_input_in_place, lambda: [torch.randn(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_mutations_and_grads_match_eager(name: str) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    compare_with_eager(aot(fn, args), fn, *args, grads=True, check_stride=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_graphs_contain_no_mutation(name: str) -> None:
    fn, make = CASES[name]
    metas = [TensorMeta.from_tensor(a) for a in make()]
    graph = functionalize(trace_program(fn, metas, joint=True).gm).gm
    mutating = [n for n in graph.graph.nodes if n.op == "call_function" and getattr(n.target, "_schema", None) is not None and n.target._schema.is_mutable]
    assert mutating == []


def test_mutated_input_becomes_an_extra_output() -> None:
    metas = [TensorMeta.of((3,)), TensorMeta.of((3,), requires_grad=True)]
    functional = functionalize(trace_program(_mutates_input, metas, joint=True).gm)
    assert functional.mutated_inputs == (0,)
    x, w = torch.randn(3), torch.randn(3)
    results = functional.gm(x, w, torch.ones(3))
    torch.testing.assert_close(results[1], x + 1)


def test_outputs_aliasing_each_other_stay_aliased() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    a, b, c = aot(_returns_aliased_outputs, [x])(x)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()


def test_views_of_inputs_alias_the_input() -> None:
    x, w = torch.randn(4, 3), torch.randn(3)
    t, row, _, same = aot(_returns_views_of_inputs, [x, w])(x, w)
    assert t._base is x and row._base is x and same is w


def test_returned_mutated_input_is_the_callers_tensor() -> None:
    x = torch.randn(3)
    before = x.clone()
    assert aot(_returns_mutated_input, [x])(x) is x
    torch.testing.assert_close(x, before * 2)


def _writes_one_reads_other(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a.mul_(2)
    return b * w, a + 1


@pytest.mark.parametrize(
    "share",
    [
        pytest.param(lambda a: a.view(2, 3), id="view"),
        pytest.param(lambda a: a.detach().view(2, 3), id="detached view"),
        pytest.param(lambda a: torch.empty(0).set_(a.untyped_storage()).view(2, 3), id="set storage"),
    ],
)
def test_an_input_sharing_storage_with_a_written_input_sees_the_write(share: Callable[[torch.Tensor], torch.Tensor], caplog: Any) -> None:
    # Traced with distinct inputs, then called with b over a's storage: eager's b sees a's new
    # values, which a functional program (reading b as it was passed) would not.
    w = torch.randn(2, 3, requires_grad=True)
    compiled = aot(_writes_one_reads_other, [torch.randn(6), torch.randn(2, 3), w])
    a = torch.arange(6.0)
    eager_a = a.clone()
    expected = _writes_one_reads_other(eager_a, share(eager_a), w)
    got = compiled(a, share(a), w)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(a, eager_a)
    assert "share storage and the program writes one of them" in caplog.text
    # Separate tensors again: the compiled program, no eager run.
    caplog.clear()
    a, b = torch.arange(6.0), torch.randn(2, 3)
    eager_a = a.clone()
    torch.testing.assert_close(compiled(a, b, w)[0], b * w)
    torch.testing.assert_close(a, eager_a * 2)


def test_writing_a_grad_requiring_value_into_an_input_is_refused() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(y)
        return x * 2

    with pytest.raises(UnsupportedMutationError, match="tensor input 0"):
        aot(fn, [torch.randn(3), torch.randn(3, requires_grad=True)])


def test_non_contiguous_inputs_with_offsets_are_read_and_written_like_eager() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.mul_(2)
        return x @ w, x[1]

    base = torch.randn(5, 6)
    x = base[1:, 1:5].t()
    w = torch.randn(4, 3, requires_grad=True)
    assert x.storage_offset() == 7 and not x.is_contiguous()
    compiled = aot(fn, [x, w])
    eager_base = base.clone()
    compare_with_eager(compiled, fn, x, w, grads=True)
    expected_x = eager_base[1:, 1:5].t()
    expected = fn(expected_x, w)
    got = compiled(x, w)
    torch.testing.assert_close(base, eager_base)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1]._base is base


def test_re_viewing_an_input_in_place_is_refused_clearly() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.t_()
        return x

    with pytest.raises(UnsupportedMutationError, match=r"changes the shape or strides of graph input"):
        aot(fn, [torch.randn(3, 4)])


def test_a_mutating_call_that_leaves_a_default_out_gets_it_in_the_functional_op() -> None:
    # F.dropout(x, 0.5) calls bernoulli_(noise) with p left at its default, 0.5; the functional
    # bernoulli.p has no default for p. Every dropout of 0.5 in training on the CPU hit this.
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, True)

    x = torch.randn(64, 64) + 3.0
    out = aot(fn, [x])(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * 2)
    assert 0.4 < kept.float().mean().item() < 0.6


class _CountCopies(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.copy_.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _running_update(x: torch.Tensor, w: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    state.mul_(0.5).add_(x.detach().mean(0))
    return (x * w).sum(0)


@pytest.mark.parametrize("training", [True, False])
def test_a_new_value_the_compiled_graph_stored_over_its_input_is_not_copied_again(training: bool) -> None:
    # A compiler told which outputs are new values of inputs (INPUT_WRITES_KEY) may store one
    # over its input and return the input there: the runtime then copies nothing, and counts
    # the write as an in-place change.
    from ptc_aot.api import INPUT_WRITES_KEY

    seen: list[Any] = []

    def writes_in_place(gm: torch.fx.GraphModule) -> Callable[..., Any]:
        writes = gm.meta[INPUT_WRITES_KEY]
        seen.append(writes)

        def run(*args: torch.Tensor) -> Any:
            results = list(gm(*args))
            for out, inp in writes:
                # .data shares the storage but not the version counter: an uncounted write, as a kernel's.
                args[inp].data.copy_(results[out])
                results[out] = args[inp]
            return results

        return run

    x = torch.randn(4, 3, requires_grad=training)
    w, state = torch.randn(3, requires_grad=training), torch.randn(3)
    compiled = aot(_running_update, [x, w, state], fw_compiler=writes_in_place)
    assert seen == [((1, 2),)]
    eager_state = state.clone()
    expected = _running_update(x, w, eager_state)
    version = state._version
    with _CountCopies() as copies:
        got = compiled(x, w, state)
    assert copies.count == 1  # the compiler's own write; the runtime copied nothing
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(state, eager_state)
    assert state._version == version + 1
    if training:
        got.sum().backward()
        assert w.grad is not None
        torch.testing.assert_close(w.grad, x.detach().sum(0))


class _NoStorage(torch.Tensor):
    """A wrapper subclass: a tensor without a storage of its own (reading its pointer raises)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> _NoStorage:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(func)


def test_the_shared_storage_check_passes_over_tensors_without_a_storage() -> None:
    from ptc_aot.api import _writes_an_alias

    a = torch.randn(3)
    wrapped = _NoStorage(torch.randn(3))
    assert not _writes_an_alias([a, wrapped], [0])
    assert _writes_an_alias([a, a.view(3), wrapped], [0])


def _bn_train(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.batch_norm(x, mean, var, training=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_input_written_by_an_op_returning_another_dtype_gets_its_own_dtype_back(device: str, dtype: torch.dtype) -> None:
    # CUDA's functional batch norm returns reduced-precision running statistics as float32;
    # the in-place op stores them in their own dtype. The graph's new values must be in that
    # dtype, or a compiler cannot store them over the inputs and the runtime converts a copy.
    # (Traced on metadata only: no GPU needed.)
    from ptc_spec.meta import META_KEY

    metas = [TensorMeta.of((2, 3, 4, 4), dtype, device=device), TensorMeta.of((3,), dtype, device=device), TensorMeta.of((3,), dtype, device=device)]
    functional = functionalize(trace_program(_bn_train, metas, joint=False).gm)
    assert functional.mutated_inputs == (1, 2)
    out = next(n for n in functional.gm.graph.nodes if n.op == "output")
    new_values = out.args[0][functional.num_outputs : functional.num_outputs + 2]
    assert [v.meta[META_KEY].dtype for v in new_values] == [dtype, dtype]
