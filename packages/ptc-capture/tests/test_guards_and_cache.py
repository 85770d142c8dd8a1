"""Guards: every assumption is checked on each call; a miss recompiles up to the limit."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture import framehook
from ptc_capture.cache import cache_of
from ptc_capture.config import set_config
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook

FACTOR = 2.0


def _uses_global(x):
    return x * FACTOR


def _plain(x):
    return x.sin() + 1


@pytest.mark.parametrize(
    "first,second",
    [
        (torch.randn(3, 4), torch.randn(5, 4)),
        (torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64)),
        (torch.randn(3, 4), torch.randn(4, 3).t()),
        (torch.randn(3, 4), torch.randn(3, 4).requires_grad_()),
        (torch.randn(3, 4), torch.randn(3)),
    ],
    ids=["shape", "dtype", "stride", "requires_grad", "rank"],
)
def test_tensor_change_recompiles_with_correct_result(first, second):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_plain)
    compare_with_eager(compiled, _plain, first)
    compare_with_eager(compiled, _plain, second)
    assert backend.count == 2
    compare_with_eager(compiled, _plain, first)
    compare_with_eager(compiled, _plain, second)
    assert backend.count == 2


def test_global_change_recompiles():
    global FACTOR
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_uses_global)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2.0)
    FACTOR = 3.0
    try:
        torch.testing.assert_close(compiled(x), x * 3.0)
    finally:
        FACTOR = 2.0
    assert backend.count == 2


@pytest.mark.parametrize("values", [(1, 2), (True, False), ("a", "b"), (None, 1.5), (2.0, 3.0)])
def test_python_argument_change_recompiles(values):
    def fn(x, k):
        if k is None or isinstance(k, str):
            return x + 1
        return x * k

    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    x = torch.randn(3)
    for value in values:
        compare_with_eager(compiled, fn, x, value)
    assert backend.count == 2
    for value in values:
        compare_with_eager(compiled, fn, x, value)
    assert backend.count == 2


def _scaled(x, scale=2.0, shift=1.0):
    return x * scale + shift


def _calls_scaled(x):
    return _scaled(x, 3.0)


def test_only_the_defaults_a_call_reads_are_guarded():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_calls_scaled)
    x = torch.randn(3)
    compare_with_eager(compiled, _calls_scaled, x)
    old = _scaled.__defaults__
    try:
        _scaled.__defaults__ = (5.0, 1.0)  # scale is passed: its default is never read
        compare_with_eager(compiled, _calls_scaled, x)
        assert backend.count == 1
        _scaled.__defaults__ = (2.0, -4.0)  # shift's default is read: a new compile
        compare_with_eager(compiled, _calls_scaled, x)
        assert backend.count == 2
    finally:
        _scaled.__defaults__ = old


class Scaler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attribute_change_recompiles():
    module = Scaler()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(module)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), module(x))
    module.scale = 5
    torch.testing.assert_close(compiled(x), module(x))
    assert backend.count == 2


def test_training_flag_is_guarded():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(module)
    x = torch.randn(8, 4)
    module.eval()
    torch.testing.assert_close(compiled(x), module(x))
    module.train()
    torch.manual_seed(0)
    out = compiled(x)
    assert (out == 0).any(), "dropout must be active in training mode"
    assert backend.count == 2


def test_recompile_limit_warns_once_then_runs_eagerly():
    def fn(x, n):
        return x + n

    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    previous = set_config(recompile_limit=3)
    try:
        x = torch.randn(2)
        for n in range(3):
            compare_with_eager(compiled, fn, x, n)
        with pytest.warns(RuntimeWarning, match="recompile limit of 3"):
            compare_with_eager(compiled, fn, x, 10)
        compare_with_eager(compiled, fn, x, 11)
        assert backend.count == 3
    finally:
        set_config(previous)


def test_cache_entry_freed_when_function_dies():
    backend = CountingBackend()

    namespace: dict = {}
    # A code object built by exec dies with its function (a nested def's code would live on
    # in the enclosing function's constants).
    exec(compile("def fn(x):\n    return x * 3\n", __file__, "exec"), namespace)
    fn = namespace.pop("fn")
    compiled = ptc_capture.optimize(backend)(fn)
    compiled(torch.randn(2))
    cache = cache_of(fn.__code__)
    assert cache is not None and len(cache.entries) == 1
    cache_ref = weakref.ref(cache)
    code_ref = weakref.ref(fn.__code__)
    del fn, compiled, cache
    gc.collect()
    assert code_ref() is None
    assert cache_ref() is None


def test_threads_share_compiled_function():
    backend = CountingBackend()

    def fn(x, y):
        return (x * y).relu() + 1

    compiled = ptc_capture.optimize(backend)(fn)
    compiled(torch.ones(4), torch.ones(4))
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        try:
            for _ in range(50):
                x, y = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
                torch.testing.assert_close(compiled(x, y), fn(x, y))
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert backend.count == 1
    assert framehook.get_callback() is None


def test_reset_forgets_entries():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_plain)
    compiled(torch.randn(2))
    ptc_capture.reset()
    compiled(torch.randn(2))
    assert backend.count == 2


def test_guards_are_listed_by_explain():
    report = ptc_capture.explain(_uses_global)(torch.randn(3))
    text = str(report)
    assert "TENSOR: L['x']" in text
    assert "CONST: G['FACTOR']" in text


class _Settings:
    def __init__(self) -> None:
        self.scale = 2.0

    def describe(self) -> str:
        return "settings"


def _reads_bound_methods(x, settings, items):
    # Each read makes a new bound-method object: `settings.__reduce_ex__` (a C method, whose
    # call breaks the graph), `settings.describe` (a Python method) and `dict.fromkeys`
    # (bound to the class).
    reduce = settings.__reduce_ex__
    describe = settings.describe
    keys = dict.fromkeys(items)
    state = reduce(4)
    return x * settings.scale + len(state) + len(describe()) + len(keys)


def test_bound_method_reads_do_not_recompile():
    # A guard on the identity of `obj.method` can never hold again: it recompiled on every call
    # (transformers' T5 deep-copies its config through `__reduce_ex__` in forward).
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_reads_bound_methods)
    settings, items = _Settings(), ["a", "b"]
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, settings, items), _reads_bound_methods(x, settings, items))
    first = backend.count
    for _ in range(3):
        compiled(torch.randn(3), settings, items)
    assert backend.count == first
    other = _Settings()
    other.scale = 5.0
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, other, items), _reads_bound_methods(x, other, items))


def _same_or_not(a, b):
    return a + 1 if a is b else a - 1


def _write_then_read(a, b):
    a.add_(1)
    return b * 2


@needs_hook
@pytest.mark.parametrize("fn", [_same_or_not, _write_then_read])
def test_entry_for_distinct_tensors_does_not_serve_the_same_tensor_twice(fn):
    # An entry traced with two tensors answered `a is b` (and ordered a's write before b's read)
    # for distinct objects; called with one tensor in both places it must not be reused.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    for order in ("distinct", "same", "distinct", "same"):
        x, y = torch.zeros(3), torch.ones(3)
        x_eager, y_eager = x.clone(), y.clone()
        b, b_eager = (y, y_eager) if order == "distinct" else (x, x_eager)
        torch.testing.assert_close(compiled(x, b), fn(x_eager, b_eager))
        torch.testing.assert_close(x, x_eager)
    assert backend.count == 2


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x)) * (2 if self.a.weight is self.b.weight else 3)


@needs_hook
def test_tied_weights_untied_later_recompile():
    model = _Tied()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    x = torch.randn(2, 4)
    compare_with_eager(compiled, model, x)
    model.b.weight = torch.nn.Parameter(model.a.weight.detach().clone())
    compare_with_eager(compiled, model, x)
    assert backend.count == 2


@needs_hook
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_recurrent_modules_are_one_graph_and_follow_replaced_weights(cls, dtype):
    # nn.RNNBase checks its weak references to the flat weights in every forward.
    torch.manual_seed(0)
    model = cls(8, 16, num_layers=2, batch_first=True).to(dtype)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    x = torch.randn(2, 5, 8, dtype=dtype)
    torch.testing.assert_close(compiled(x), model(x))
    assert backend.count == 1
    with torch.no_grad():
        model.weight_ih_l0 = torch.nn.Parameter(torch.randn_like(model.weight_ih_l0))
    torch.testing.assert_close(compiled(x), model(x))
    model.zero_grad()
    model(x)[0].sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled(x)[0].sum().backward()
    for p, want in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, want)
