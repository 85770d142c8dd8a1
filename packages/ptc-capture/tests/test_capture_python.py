"""Python constructs around tensors trace to one graph with eager's results."""

from __future__ import annotations

import collections
import contextvars
import functools
import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.capture import capture_function
from ptc_spec.testing import compare_with_eager


class Config:
    def __init__(self) -> None:
        self.width = 3
        self.act = "relu"


CFG = Config()
TABLE = {"relu": torch.relu, "tanh": torch.tanh}


def scaled(t, factor=2.0, *, shift=0.0):
    return t * factor + shift


class Scaler:
    def __init__(self, k: float) -> None:
        self.k = k

    def apply(self, t):
        return t * self.k


SCALER = Scaler(1.5)


def _generator_sum(x):
    return sum(t * 2 for t in [x, x + 1])


def _iterate_tensor(x):
    out = x[0] * 0
    for row in x:
        out = out + row
    return out


def _unpack_tensor(x):
    a, b = x[:2]
    return a * b


def _defaults_and_kwonly(x):
    return scaled(x) + scaled(x, 3.0, shift=1.0)


def _lambda(x):
    f = lambda t: t + 1  # noqa: E731
    return f(f(x))


def _dict_comprehension(x):
    d = {i: x * i for i in range(3)}
    return d[2] - d[1]


def _ternary_and_bool_ops(x):
    k = 2 if x.shape[0] > 1 else 3
    ok = x.dim() == 2 and not x.requires_grad or False
    return x * k if ok else x


def _chained_compare(x):
    n = x.shape[-1]
    if 0 < n <= 10:
        return x + n
    return x


def _while_break(x):
    i = 0
    while True:
        x = x * 1.1
        i += 1
        if i >= 3:
            break
    return x


def _nested_loops(x):
    out = x
    for i in range(2):
        for j in range(2):
            out = out + i * j
    return out


def _config_object(x):
    out = x
    for _ in range(CFG.width):
        out = TABLE[CFG.act](out - 0.1)
    return out


def _object_method(x):
    return SCALER.apply(x) + 1


def _string_ops(x):
    key = "{}_{}".format("a", x.dim())
    parts = "a_b".split("_")
    return x * len(key) + len(parts)


def _size_ops(x):
    shape = x.shape
    new = shape[:-1] + (shape[-1] // 2, 2)
    return x.reshape(new).sum(-1)


def _list_slicing(x):
    items = [x, x * 2, x * 3, x * 4]
    return sum(items[1::2]) - items[-1]


def _math_fold(x):
    return x * math.sqrt(x.shape[0]) + math.floor(2.7)


def _functional(x):
    return F.softmax(F.linear(x, torch.ones(4, x.shape[-1])), dim=-1)


def _max_min_tensors(x):
    return torch.maximum(x, torch.zeros_like(x)) + torch.clamp(x, min=-0.5, max=0.5)


def _reductions(x):
    values, indices = x.max(dim=1)
    return values + indices.float() + x.mean() + x.std()


def _star_args(x):
    shape = (x.shape[0], -1)
    return x.view(*shape)


def _kwargs_dict(x):
    kw = {"dim": 0, "keepdim": True}
    return x.sum(**kw)


def _tuple_compare(x):
    if x.shape == (2, 4):
        return x + 1
    return x - 1


def _zip_enumerate_dict(x):
    names = ["a", "b"]
    out = {}
    for i, name in enumerate(names):
        out[name] = x * (i + 1)
    return out["a"] + out["b"]


def _is_none_default(x, bias=None):
    if bias is not None:
        x = x + bias
    return x * 2


def _closure_counter(x):
    scale = [1.0]

    def bump():
        scale[0] = scale[0] * 2
        return scale[0]

    bump()
    return x * bump()


def _any_all(x):
    flags = [d > 1 for d in x.shape]
    return x * (2 if all(flags) else 1) + (1 if any(flags) else 0)


def _dtype_ops(x):
    y = x.to(torch.float64)
    z = y.type(torch.float32)
    return z + x.new_ones(x.shape) + torch.zeros(x.shape, dtype=x.dtype)


def _where_masked(x):
    mask = x > 0
    return torch.where(mask, x, x * 0.1) + x.masked_fill(~mask, 0.0)


def _inplace_ops_chain(x):
    y = x.clone()
    y.mul_(2).add_(1)
    y[y > 0] = 0.0
    return y


def _local_import(x):
    import math as m

    from torch.nn import functional as fn

    return fn.relu(x) * m.e


def _no_grad_fn(x):
    with torch.no_grad():
        y = x * 2
    with torch.enable_grad():
        z = x + 1
    return y + z


def _to_device(x):
    # .to(device) runs meta to meta at trace time; the graph keeps the real move.
    return (x * 2).to(x.device) + x.to("cpu", torch.float64).float() + x.cpu()


def _slice_builtin(x):
    keep = slice(1, None)
    return x[:, keep] * 2


def _set_ops(x):
    names = {"a", "b"}
    upper = {n.upper() for n in names}
    return x * len(upper) if "A" in upper and "c" not in names else x


def _checks_torch_function(x):
    if torch.overrides.has_torch_function((x, 2)) or torch.overrides.has_torch_function_unary(x):
        return x
    return x * 2 if not torch._C._has_torch_function_variadic(x, None) else x


def _two_args(a, b):
    return a + b


def _signature_count(x):
    return x * len(inspect.signature(_two_args).parameters)


BY_DEVICE_DTYPE = {("cpu", torch.float32): 2.0, ("cpu", torch.float64): 3.0, ("cuda", torch.float16): 4.0}
BY_CONSTANT = {torch.float32: "f32", torch.device("cpu"): "cpu", None: "none", 1.5: "x", False: "no", ("a", (1, None)): "t"}


def _dict_keyed_by_device_and_dtype(x):
    scale = BY_DEVICE_DTYPE.get((x.device.type, x.dtype), 1.0)
    missing = BY_DEVICE_DTYPE.get(("meta", x.dtype), 0.5)
    return x * scale + missing + BY_DEVICE_DTYPE[("cuda", torch.float16)]


def _dict_keyed_by_constants(x):
    out = x
    for key in BY_CONSTANT:
        out = out + len(str(key))
    for key, name in BY_CONSTANT.items():
        out = out * len(name) if key in BY_CONSTANT else out
    found = (torch.float64 in BY_CONSTANT, x.dtype in BY_CONSTANT, BY_CONSTANT[("a", (1, None))])
    return out + len(list(BY_CONSTANT.values())), found


Pair = collections.namedtuple("Pair", "scale shift")


def _namedtuple_slices_and_reprs(x):
    p = Pair(x * 2, 3)
    return p[:1][0] + len(str(Pair(1, 2))), p[1:]


CASES = [
    _generator_sum, _iterate_tensor, _unpack_tensor, _defaults_and_kwonly, _lambda,
    _dict_comprehension, _ternary_and_bool_ops, _chained_compare, _while_break, _nested_loops,
    _config_object, _object_method, _string_ops, _size_ops, _list_slicing, _math_fold,
    _functional, _max_min_tensors, _reductions, _star_args, _kwargs_dict,
    _tuple_compare, _zip_enumerate_dict, _is_none_default, _closure_counter, _any_all,
    _dtype_ops, _where_masked, _inplace_ops_chain, _no_grad_fn, _local_import,
    _to_device, _slice_builtin, _set_ops, _signature_count, _checks_torch_function,
    _dict_keyed_by_device_and_dtype, _dict_keyed_by_constants, _namedtuple_slices_and_reprs,
]  # fmt: skip


@needs_hook
@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.strip("_") for c in CASES])
@pytest.mark.parametrize("shape", [(2, 4), (3, 4)], ids=["2x4", "3x4"])
def test_python_construct_matches_eager(fn, shape):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    compare_with_eager(compiled, fn, x)
    compare_with_eager(compiled, fn, x)
    assert backend.count == 1


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_python_construct_needs_no_break(fn):
    capture = capture_function(fn, torch.randn(2, 4))
    assert capture.breaks == [], capture.breaks
    assert capture.graph is not None


@needs_hook
def test_requires_grad_input_backward():
    compiled = ptc_capture.optimize("eager")(_no_grad_fn)
    compare_with_eager(compiled, _no_grad_fn, torch.randn(2, 3, requires_grad=True), grads=True)


def _skips_work_under_jit_trace(x):
    y = x + 1
    if torch.jit.is_tracing():  # transformers' is_tracing() probes this on every forward
        return y
    return y * 2


def test_jit_is_tracing_folds_without_a_break():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_skips_work_under_jit_trace)
    compare_with_eager(compiled, _skips_work_under_jit_trace, torch.randn(3))
    assert backend.count == 1


_CALLS = contextvars.ContextVar("calls", default=0)


def _skips_bookkeeping_when_compiling(x):
    if not torch.compiler.is_compiling():  # libraries skip context-variable bookkeeping under compile
        _CALLS.set(_CALLS.get() + 1)
    return x * 2


def test_torch_compiler_is_compiling_is_true_while_tracing():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_skips_bookkeeping_when_compiling)
    compare_with_eager(compiled, _skips_bookkeeping_when_compiling, torch.randn(3))
    assert backend.count == 1
    report = ptc_capture.explain(_skips_bookkeeping_when_compiling)(torch.randn(3))
    assert report.graph_break_count == 0, str(report)


SCALE_BY_KEY = {(1, torch.float32): 2.0}


def _scales_by_key(x):
    out = x
    for key, scale in SCALE_BY_KEY.items():
        out = out * scale + len(str(key[0]))
    return out


@needs_hook
@pytest.mark.parametrize(
    "table",
    [{(1, torch.float32): 5.0}, {(True, torch.float32): 2.0}, {(1, torch.float64): 2.0}],
    ids=["value", "equal_key_of_another_type", "key"],
)
def test_dict_keyed_by_constants_is_guarded_on_key_types_and_values(table):
    global SCALE_BY_KEY
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_scales_by_key)
    compare_with_eager(compiled, _scales_by_key, torch.randn(3))
    saved, SCALE_BY_KEY = SCALE_BY_KEY, table
    try:
        compare_with_eager(compiled, _scales_by_key, torch.randn(3))
    finally:
        SCALE_BY_KEY = saved
    assert backend.count == 2


PAIR = Pair(2.0, 0.5)


def _unpacks_namedtuple(x):
    scale, shift = PAIR
    return x * scale + shift + PAIR[1:][0]


@needs_hook
def test_namedtuple_from_frame_is_guarded_on_its_items():
    global PAIR
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_unpacks_namedtuple)
    compare_with_eager(compiled, _unpacks_namedtuple, torch.randn(3))
    saved, PAIR = PAIR, Pair(3.0, 1.0)
    try:
        compare_with_eager(compiled, _unpacks_namedtuple, torch.randn(3))
    finally:
        PAIR = saved
    assert backend.count == 2


def _returns_lambda(x):
    return x + 1, (lambda t: t * 2)


@needs_hook
def test_function_made_in_the_trace_leaves_it_with_the_frames_globals():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_returns_lambda)

    def applied(fn):
        def run(x):
            out, made = fn(x)
            return out, made(x), made.__globals__ is globals()

        return run

    compare_with_eager(applied(compiled), applied(_returns_lambda), torch.randn(3))
    assert backend.count == 1


# -- builtins and library functions on Python values, in one graph -----------------------------


def _number_builtins(x):
    q, r = divmod(17, 5)
    return x * round(2.6) + q + r + pow(2, 3) + round(7 / 3, 1)


def _reduce_and_sorted(x):
    import functools
    import operator

    parts = [x, x * 2, x - 1]
    total = functools.reduce(operator.add, parts)
    scaled = functools.reduce(lambda acc, p: acc * 0.5 + p, parts, x)
    order = sorted([3, 1, 2], key=lambda v: -v)
    return total + scaled * order[0] + sorted(["bb", "a"], key=len, reverse=True)[0].count("b")


def _sets_ranges_sizes(x):
    seen = set([1, 2, 2]) | frozenset((3,))
    steps = range(0, 10, 2)
    shape = torch.Size([x.shape[0], 2])
    pairs = sum(a * b for a, b in zip([x, x], [1, 2], strict=True))
    device = torch.device("cpu")
    return x.new_ones(shape, device=device).sum(1) * len(seen) + steps.index(4) + steps.count(6) + pairs


@pytest.mark.parametrize("fn", [_number_builtins, _reduce_and_sorted, _sets_ranges_sizes])
@pytest.mark.parametrize("dynamic", [False, True])
def test_builtins_on_python_values_are_one_graph(fn, dynamic):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True, dynamic=dynamic)(fn)
    for n in (5, 7):
        compare_with_eager(compiled, fn, torch.randn(n))
    assert backend.count == (1 if dynamic else 2)


def _zip_strict_mismatch(x):
    return sum(a * b for a, b in zip([x, x], [1], strict=True))


def test_zip_strict_over_different_lengths_raises_as_eager():
    compiled = ptc_capture.optimize(CountingBackend())(_zip_strict_mismatch)
    with pytest.raises(ValueError, match="zip"):
        compiled(torch.randn(3))


_TANH_GELU = functools.partial(F.gelu, approximate="tanh")


class _PartialActivation(torch.nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.act = functools.partial(F.leaky_relu, negative_slope=slope)

    def forward(self, x):
        return self.act(x) + _TANH_GELU(x)


def test_calling_a_functools_partial_from_the_frame_is_one_graph_and_guarded():
    model = _PartialActivation(0.2)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    compare_with_eager(compiled, model, torch.randn(6))
    assert backend.count == 1
    model.act = functools.partial(F.leaky_relu, negative_slope=0.5)
    compare_with_eager(compiled, model, torch.randn(6))
    assert backend.count == 2


class _TwoStacks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
        self.b = torch.nn.ModuleList([torch.nn.Linear(4, 4)])

    def forward(self, x):
        import itertools

        for layer in itertools.chain(self.a, self.b):
            x = torch.tanh(layer(x))
        for i, j in itertools.product(range(2), (1, 2)):
            x = x + i * j
        for p, q in itertools.combinations((x, x * 2, x * 3), 2):
            x = x + p * q * 0.01
        return x + sum(a - b for a, b in itertools.permutations((1, 2, 3), 2))


def test_itertools_over_tuples_ranges_and_module_lists_is_one_graph():
    torch.manual_seed(0)
    model = _TwoStacks()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    compare_with_eager(compiled, model, torch.randn(3, 4))
    assert backend.count == 1


def _getters(x):
    import operator

    pick = operator.itemgetter(0, 2)
    first, third = pick([x, x * 2, x * 3])
    shape = operator.attrgetter("shape")(x)
    both = operator.attrgetter("real", "shape")(x)
    return first + third + shape[0] + operator.itemgetter("k")({"k": x})[0] + both[0] * both[1][0]


def test_operator_getters_are_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_getters)
    compare_with_eager(compiled, _getters, torch.randn(3))
    assert backend.count == 1


def _pairs(x):
    yield x
    yield x * 2


def _delegating(x):
    yield from _pairs(x)
    yield from (x + 1, x + 2)
    yield x * 5


def _returning(x):
    yield x
    return x * 7


def _uses_the_returned_value(x):
    total = yield from _returning(x)
    yield total


def test_yield_from_in_a_generator_consumed_in_the_frame_is_one_graph():
    fn = lambda x: sum(_delegating(x))  # noqa: E731
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    compare_with_eager(compiled, fn, torch.randn(3))
    assert backend.count == 1


def test_the_value_of_yield_from_is_eager_s():
    fn = lambda x: sum(_uses_the_returned_value(x))  # noqa: E731
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    compare_with_eager(compiled, fn, torch.randn(3))


def _map_filter(x):
    scaled = list(map(lambda t, k: t * k, [x, x, x], (1, 2, 3)))
    kept = list(filter(lambda k: k % 2, range(7)))
    truthy = list(filter(None, [0, 3, 0, 4]))
    return sum(scaled) + sum(kept) + len(truthy) + sum(map(abs, (-1, 2)))


def test_map_and_filter_are_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_map_filter)
    compare_with_eager(compiled, _map_filter, torch.randn(3))
    assert backend.count == 1


def _filter_on_tensor_values(x):
    return sum(filter(lambda t: t.sum() > 0, [x, -x]))


def test_filter_on_tensor_values_runs_as_eager():
    compiled = ptc_capture.optimize(CountingBackend())(_filter_on_tensor_values)
    compare_with_eager(compiled, _filter_on_tensor_values, torch.randn(3))


def _partial_made_here(x):
    add_twice = functools.partial(torch.add, alpha=2)
    clamp = functools.partial(torch.clamp, min=-0.5)
    return add_twice(x, x) + clamp(x, max=0.5)


def _partial_of_a_nested_function(x, k):
    def scale(t, by):
        return t * by * k

    return functools.partial(scale, by=2)(x)


def _partial_over_python_functions(x):
    bias = functools.partial(scaled, shift=x)  # a tensor bound in a partial
    halve = functools.partial(Scaler(0.5).apply)
    twice = functools.partial(functools.partial(scaled, factor=2.0), shift=1.0)
    parts = (bias.func is scaled, bias.keywords["shift"] is x, len(twice.args), callable(halve))
    return bias(x) + halve(x) + twice(x), parts, isinstance(bias, functools.partial)


def test_functools_partial_made_in_the_trace():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_partial_made_here)
    compare_with_eager(compiled, _partial_made_here, torch.randn(4))
    assert backend.count == 1
    # Over Python functions (guarded by their code, their closures through their cells) and
    # with tensors bound: a traced partial, one graph per closure value.
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_partial_of_a_nested_function)
    for k in (2.0, 3.0, 2.0):
        compare_with_eager(compiled, _partial_of_a_nested_function, torch.randn(4), k)
    assert backend.count == 2
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_partial_over_python_functions)
    compare_with_eager(compiled, _partial_over_python_functions, torch.randn(4))
    assert backend.count == 1


def _dict_union_and_keyword_arguments(x):
    merged = {"a": x} | {"b": x * 2, "a": x * 3}
    merged |= {"c": x - 1}
    merged.update({"d": 1}, e=x * 4)
    made = dict([("f", x)], g=2)
    order = [3, 1, 2]
    order.sort(reverse=True)
    tensors = [x * 2, x]
    tensors.sort(key=lambda t: len(tensors) - len(t))  # CPython empties the list while sorting
    keys = dict.fromkeys(("p", "q"), 0)
    named = sorted(["bb", "a", "C"], key=str.lower)  # a C key function, applied natively
    return merged["a"] + merged["e"] + made["f"] + order[0] + tensors[0] + len(keys), sorted(merged, reverse=True), named


def test_dict_union_and_keyword_arguments_to_container_methods_are_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_dict_union_and_keyword_arguments)
    compare_with_eager(compiled, _dict_union_and_keyword_arguments, torch.randn(4))
    assert backend.count == 1


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: sorted([1, "a"]), TypeError),
        (lambda: sorted([2, "b"], key=lambda v: v), TypeError),
        (lambda: torch.device("no-such-device"), RuntimeError),
        (lambda: __import__("itertools").product([1], repeat=-1), ValueError),
        (lambda: __import__("itertools").combinations(), TypeError),
        (lambda: __import__("operator").itemgetter(), TypeError),
        (lambda: divmod(1, 0), ZeroDivisionError),
        (lambda: map(abs), TypeError),
        (lambda: filter(None), TypeError),
        (lambda: functools.reduce(max), TypeError),
        (lambda: set([1], [2]), TypeError),
    ],
    ids=["sorted", "sorted-key", "device", "product", "combinations", "itemgetter", "divmod", "map", "filter", "reduce", "set"],
)
def test_errors_of_builtins_run_at_trace_time_are_eager_s(call, error):
    def fn(x):
        call()
        return x

    compiled = ptc_capture.optimize(CountingBackend())(fn)
    with pytest.raises(error):
        compiled(torch.randn(2))


_CACHE_CALLS: list[str] = []


@functools.lru_cache
def _cached_probe(version):
    _CACHE_CALLS.append(version)  # eager's first call fills the cache; later ones do not run this
    return tuple(int(part) for part in version.split("."))


def _marked_constant():
    return 4


_marked_constant._dynamo_marked_constant = True  # what torch._dynamo.assume_constant_result sets


class _Log:
    @functools.lru_cache(None)  # noqa: B019 (a per-instance cache is the point: transformers' warning_once)
    def once(self, message):
        _CACHE_CALLS.append(message)


_LOG = _Log()


def _cached_calls(x):
    _LOG.once("note")
    if _cached_probe("2.9.0") >= (2, 9):
        x = x + 1
    return x * _marked_constant()


def test_lru_cached_and_constant_marked_functions_answer_as_eager_in_one_graph():
    _CACHE_CALLS.clear()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_cached_calls)
    compare_with_eager(compiled, _cached_calls, torch.randn(3))
    compare_with_eager(compiled, _cached_calls, torch.randn(3))
    assert backend.count == 1
    assert _CACHE_CALLS == ["note", "2.9.0"]  # each body ran once, as the caches have it


class _Width:
    def __init__(self, width):
        self.width = width


@functools.lru_cache
def _width_of(config):
    return config.width


def _scaled_by_width(x, config):
    return x * _width_of(config)


def test_a_cached_answer_for_an_object_argument_holds_only_for_that_object():
    # The cache answers per object: another object of the same class must not reuse the answer.
    compiled = ptc_capture.optimize(CountingBackend())(_scaled_by_width)
    x = torch.randn(3)
    for width in (2, 3):
        compare_with_eager(compiled, _scaled_by_width, x, _Width(width))
