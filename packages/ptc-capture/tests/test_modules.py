"""nn.Modules: forward inlined, parameters and buffers lifted to graph inputs, containers unrolled."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_capture.capture import capture_function
from ptc_spec import check
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("offset", torch.arange(8.0))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = x + layer(x) * (i + 1)
        return self.norm(x) + self.offset


class Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))


class Helper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8, bias=False)
        self.heads = 2

    def split(self, x):
        b, n = x.shape
        return x.view(b, self.heads, n // self.heads)

    def forward(self, x, scale=2.0):
        return self.split(self.proj(x)).softmax(dim=-1) * scale


class ItemBreak(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return y / (1.0 + abs(y.max().item()))


class ScaledLinear(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(8, 4)

    def forward(self, x):
        return super().forward(x) * torch.finfo(x.dtype).eps * 1e6


MODULES = [
    (MLP, (4, 8), 1),
    (Blocks, (2, 8), 1),
    (lambda: torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), (3, 8), 1),
    (lambda: Conv().eval(), (2, 3, 6, 6), 1),
    (Helper, (3, 8), 1),
    (ItemBreak, (3, 8), 2),
    (ScaledLinear, (3, 8), 1),
]


@pytest.mark.parametrize("make,shape,graphs", MODULES, ids=["mlp", "blocks", "sequential", "conv", "helper", "item_break", "super"])
def test_module_matches_eager(make, shape, graphs):
    torch.manual_seed(0)
    module = make()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(module)
    x = torch.randn(*shape)
    compare_with_eager(compiled, module, x)
    assert backend.count == graphs
    compare_with_eager(compiled, module, x)
    assert backend.count == graphs


@pytest.mark.parametrize("make,shape", [(MLP, (4, 8)), (Blocks, (2, 8))], ids=["mlp", "blocks"])
def test_parameters_are_lifted_to_placeholders(make, shape):
    torch.manual_seed(0)
    module = make()
    capture = capture_function(module, torch.randn(*shape))
    assert capture.graph is not None
    check(capture.graph, "torch")
    placeholders = [n for n in capture.graph.graph.nodes if n.op == "placeholder"]
    n_tensors = len(list(module.parameters())) + len(list(module.buffers())) + 1
    assert len(placeholders) == n_tensors
    assert not [n for n in capture.graph.graph.nodes if n.op == "get_attr"]


@pytest.mark.parametrize("make,shape", [(MLP, (4, 8)), (Blocks, (2, 8)), (Helper, (3, 8))], ids=["mlp", "blocks", "helper"])
def test_backward_through_captured_graph(make, shape):
    torch.manual_seed(0)
    module = make()
    reference = make()
    reference.load_state_dict(module.state_dict())
    compiled = ptc_capture.optimize("eager")(module)
    x = torch.randn(*shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled(x).sum().backward()
    reference(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), (_, q) in zip(module.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_function_backward_matches_eager():
    def fn(x, w):
        return (x @ w).tanh().sum(dim=0)

    compiled = ptc_capture.optimize("eager")(fn)
    compare_with_eager(compiled, fn, torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True), grads=True)


def test_forward_hook_module_runs_eagerly_with_same_result():
    module = MLP()
    seen = []
    module.fc1.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    compiled = ptc_capture.optimize("eager")(module)
    compare_with_eager(compiled, module, torch.randn(2, 8))
    assert seen == [torch.Size([2, 16])] * 2


def _scale_from_config(func):
    # transformers-style decorator: reads the wrapped forward's code to decide on a default.
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        if "scale" in func.__code__.co_varnames and "scale" not in kwargs:
            kwargs["scale"] = self.scale
        return func(self, *args, **kwargs)

    return wrapper


class DecoratedForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = 3.0

    @_scale_from_config
    def forward(self, x, scale=1.0):
        return self.fc(x) * scale


class CallsDecorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = DecoratedForward()

    def forward(self, x):
        return self.inner(x) + 1


def test_decorated_forward_of_a_child_module_reads_its_closure_without_a_break():
    model = CallsDecorated()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    with torch.no_grad():
        compare_with_eager(compiled, model, torch.randn(2, 4))
        report = ptc_capture.explain(model)(torch.randn(2, 4))
    assert backend.count == 1
    assert report.graph_break_count == 0, str(report)


@needs_hook
def test_cached_call_reads_parameters_without_module_getattr(monkeypatch):
    # Guards and input fetches read self._modules[...]._parameters[...] directly: through
    # nn.Module.__getattr__ they cost about a microsecond per parameter and step on every call.
    model = Blocks()
    compiled = ptc_capture.optimize(CountingBackend())(model)
    x = torch.randn(2, 8)
    compiled(x)
    calls = []
    original = torch.nn.Module.__getattr__

    def counting(self, name):
        calls.append(name)
        return original(self, name)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.Module, "__getattr__", counting)
        actual = compiled(x)
    assert calls == []
    compare_with_eager(lambda _: actual, model, x)


class _Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(4))
        self.count = 3

    def forward(self, x):
        for layer in self.layers[: self.count]:
            x = torch.tanh(layer(x))
        for layer in self.layers[::-2]:
            x = x + layer(x)
        return x


def test_slicing_a_module_list_is_one_graph_and_never_recompiles():
    torch.manual_seed(0)
    model = _Stack()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    for _ in range(3):
        compare_with_eager(compiled, model, torch.randn(2, 6))
    # A slice is a new ModuleList each call; nothing may guard on its identity.
    assert backend.count == 1
    model.count = 2
    compare_with_eager(compiled, model, torch.randn(2, 6))
    assert backend.count == 2
