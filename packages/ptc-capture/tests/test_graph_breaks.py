"""Graph breaks: the graph so far is compiled, the breaking instruction runs natively, the rest resumes."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.errors import GraphBreakError
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook

LOG: list[str] = []


def _print_break(x):
    y = x.sin()
    print("shape", tuple(y.shape))
    return y.cos() * 2


def _item_break(x):
    y = x.sum() * 2
    scale = y.item()
    return x * scale + 1


def _item_decides(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def _data_dependent_if(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def _unknown_c_function(x):
    y = x + 1
    n = len(str(y.shape))  # str() of a torch.Size is a C call the tracer does not model
    return y * n


def _log(value):
    LOG.append(type(value).__name__)


def _inner_breaks(t):
    t = t * 3
    print("inner")
    return t + 1


def _break_in_inlined_call(x):
    y = x.relu()
    z = _inner_breaks(y)
    return z.exp()


def _break_in_star_call(x):
    y = x.relu()
    args, kwargs = (y,), {}
    z = _inner_breaks(*args, **kwargs)  # CALL_FUNCTION_EX with a keyword mapping
    return z.exp()


class _Scaler:
    def __init__(self, factor):
        self.factor = factor

    def scale(self, t):
        print("scale")
        return t * self.factor


def _break_in_star_method_call(x):
    y = x.cos()
    z = _Scaler(3.0).scale(*[y])  # CALL_FUNCTION_EX of a bound method, positional only
    return z - y


def _break_in_loop(x):
    for _ in range(3):
        x = x * 2
        if x.sum() > 1e6:
            x = x / 2
    return x


def _break_with_live_stack(x):
    return x.sum() + torch.tensor(float(x.max().item()))


def _break_in_enumerate_zip_loop(x):
    # The resume function receives the live enumerate object, over a zip over list iterators.
    for i, (a, b) in enumerate(zip([x.cos(), x * 2, x - 1], [1.0, 2.0, 3.0]), start=1):
        x = x * a + b * i
        if x.sum() > 1e6:
            x = x / 2
    return x


def _two_breaks(x):
    a = x + 1
    print("first")
    b = a * 2
    print("second")
    return b - 3


BREAK_CASES = [
    # (fn, graphs on the first call, breaks in explain)
    (_print_break, 2, 1),
    (_item_break, 2, 1),
    (_data_dependent_if, 2, 1),
    (_break_in_inlined_call, 4, 2),
    (_break_in_star_call, 4, 2),
    (_break_in_star_method_call, 3, 2),
    (_break_in_loop, 3, 3),
    (_break_in_enumerate_zip_loop, 3, 3),
    (_two_breaks, 3, 2),
]


@pytest.mark.parametrize("fn,graphs,breaks", BREAK_CASES, ids=[c[0].__name__.strip("_") for c in BREAK_CASES])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_break_gives_eager_results_and_graph_counts(fn, graphs, breaks, sign):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1)).abs() * sign
    compare_with_eager(compiled, fn, x)
    first = backend.count
    assert first >= 2
    compare_with_eager(compiled, fn, x)
    assert backend.count == first, "cached call must not recompile"


@pytest.mark.parametrize("fn,graphs,breaks", BREAK_CASES, ids=[c[0].__name__.strip("_") for c in BREAK_CASES])
def test_explain_counts_breaks(fn, graphs, breaks):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1)).abs()
    report = ptc_capture.explain(fn)(x)
    assert report.graph_break_count == breaks, str(report)
    assert report.graph_count == graphs, str(report)
    for record in report.break_reasons:
        assert record.stack and record.stack[-1].filename == __file__


def test_print_break_prints_once(capsys):
    compiled = ptc_capture.optimize("eager")(_print_break)
    compiled(torch.ones(2, 2))
    assert capsys.readouterr().out == "shape (2, 2)\n"


def test_unknown_c_function_breaks_and_matches():
    compiled = ptc_capture.optimize("eager")(_unknown_c_function)
    compare_with_eager(compiled, _unknown_c_function, torch.randn(3))


def test_break_with_live_stack_values():
    compiled = ptc_capture.optimize("eager")(_break_with_live_stack)
    compare_with_eager(compiled, _break_with_live_stack, torch.randn(5))


def test_break_reason_names_user_line():
    # .item() itself runs after the graph (see test_deferred.py); the break comes where its
    # value is first needed, and the reason names both.
    report = ptc_capture.explain(_item_break)(torch.randn(3))
    (record,) = report.break_reasons
    assert "mul uses the result of Tensor.item" in record.reason
    assert record.stack[-1].lineno == _item_break.__code__.co_firstlineno + 3


@pytest.mark.parametrize("fn", [_print_break, _item_decides, _data_dependent_if])
def test_fullgraph_turns_break_into_error_naming_line(fn):
    compiled = ptc_capture.optimize("eager", fullgraph=True)(fn)
    with pytest.raises(GraphBreakError) as info:
        compiled(torch.randn(3))
    assert __file__ in str(info.value)


def test_disable_is_a_break_and_runs_eagerly():
    calls = []

    @ptc_capture.disable
    def side(t):
        calls.append(ptc_capture.is_compiling())
        return t * 2

    def fn(x):
        return side(x + 1) - 1

    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    compare_with_eager(compiled, fn, torch.randn(3))
    assert calls == [False, False]
    assert backend.count == 2


def _comprehension_cell_then_break(x):
    k = x.sum()
    parts = [t * k for t in (x, x + 1)]  # k lives in a cell shared with the comprehension
    print(end="")
    return parts[0] + parts[1] * k


def _closure_before_break(x):
    scale = 2.0

    def apply(t):
        return t * scale

    y = apply(x)
    print(end="")
    return apply(y) + scale


def _cell_unbound_at_break(x):
    print(end="")
    k = x + 1

    def get():
        return k

    return get() * 2


@pytest.mark.parametrize(
    "fn,graphs", [(_comprehension_cell_then_break, 2), (_closure_before_break, 2), (_cell_unbound_at_break, 1)],
    ids=["comprehension", "closure", "unbound"],
)  # fmt: skip
def test_break_in_frame_with_cells_resumes(fn, graphs):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    for _ in range(2):
        compare_with_eager(compiled, fn, torch.randn(3))
    assert backend.count == graphs
    report = ptc_capture.explain(fn)(torch.randn(3))
    assert report.graph_break_count == 1 and report.graph_count == graphs


@ptc_capture.disable
def _probe_raises(t):
    raise RuntimeError("no accelerator here")


def _return_probe_inside_try(x):
    y = x + 1
    try:
        return _probe_raises(y)  # the try block ends at this call: its resume offset is outside
    except RuntimeError:
        return y * 2


def test_break_at_call_that_raises_inside_try_is_caught_by_the_frame():
    # transformers' is_cuda_stream_capturing() probes a CUDA-only function inside try/except;
    # the probe must raise inside the frame's handler, as in eager, not from the runner.
    compiled = ptc_capture.optimize("eager")(_return_probe_inside_try)
    for _ in range(2):
        compare_with_eager(compiled, _return_probe_inside_try, torch.randn(3))


def _tensor_passes_through_break(x, scale):
    y = x if scale > 0 else -x  # no tensor op before the break: y is the input itself
    print(end="")
    return y.sin() * scale


def test_break_after_no_tensor_ops_compiles_no_empty_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_tensor_passes_through_break)
    for _ in range(2):
        compare_with_eager(compiled, _tensor_passes_through_break, torch.randn(3), 2.0)
    assert backend.count == 1, "only the part after the break has tensor operations"


_Pair = __import__("collections").namedtuple("_Pair", "first second")


def _make_pair(x):
    return _Pair(x, 1)


def _namedtuple_after_break(x):
    print(end="")
    return _make_pair(x)


def test_frame_with_empty_builtins_runs_its_replacement():
    # A namedtuple's __new__ is made by eval() with empty builtins. Called natively (the frames
    # here have no tensor op, so they run eagerly), its own frame is captured, and the code
    # that replaces it must not look up globals() among those builtins.
    compiled = ptc_capture.optimize("eager")(_namedtuple_after_break)
    for _ in range(2):
        compare_with_eager(compiled, _namedtuple_after_break, torch.randn(3))


def _many_locals_then_break() -> object:
    # 300 locals live across a break: more than a resume function's one-byte prologue can load.
    body = "".join(f"    v{i} = x + {i}\n" for i in range(300))
    total = " + ".join(f"v{i}" for i in range(300))
    namespace: dict[str, object] = {"eager_sum": ptc_capture.disable(torch.sum)}
    exec(f"def fn(x):\n{body}    n = eager_sum(x)\n    return ({total}) * n\n", namespace)
    return namespace["fn"]


def test_break_in_a_frame_too_large_to_resume_runs_it_eagerly():
    fn = _many_locals_then_break()
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend)(fn), fn, torch.randn(3))
    assert backend.count == 0


def _vmapped_body(a, b):
    return a * b + a.sin()


def _vmapped(x, y):
    return torch.vmap(_vmapped_body)(x, y) + 1


def test_a_frame_run_by_vmap_after_a_break_runs_eagerly():
    # torch.vmap breaks the graph and runs eagerly; the frames it runs see functorch's wrapped
    # tensors, which capture used to try (and fail) to make examples of.
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend)(_vmapped), _vmapped, torch.randn(4, 3), torch.randn(4, 3))
    assert backend.count == 1  # the code after the break; the vmapped body is not a graph
    assert "sin" not in backend.ops(0)


def _layout_flags(x):
    return x.is_nested, x.is_sparse, x * 2


def test_nested_and_sparse_inputs_run_eagerly_and_dense_ones_are_one_graph():
    # A nested input raised an internal error and a sparse one read is_sparse as False; the
    # trace holds only dense strided tensors, whose flags are constants.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_layout_flags)
    compare_with_eager(compiled, _layout_flags, torch.randn(3))
    assert backend.count == 1
    sparse = torch.randn(2, 2).to_sparse()
    assert compiled(sparse)[:2] == (False, True)
    nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    assert compiled(nested)[:2] == (True, False)
