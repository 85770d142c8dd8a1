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


class _SlicedSequential(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6), torch.nn.ReLU())

    def forward(self, x):
        x = self.seq[1:3](x)
        x = x + self.seq[::2](x)
        return self.seq[-1](x) + len(self.seq[:2])


def _insert_identity(model):
    model.seq.insert(0, torch.nn.Identity())


@pytest.mark.parametrize(
    ("make", "change"),
    [(_Stack, lambda model: setattr(model, "count", 2)), (_SlicedSequential, _insert_identity)],
    ids=["module_list", "sequential"],
)
def test_slicing_a_module_container_is_one_graph_that_never_recompiles_on_the_slice(make, change):
    torch.manual_seed(0)
    model = make()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    for _ in range(3):
        compare_with_eager(compiled, model, torch.randn(2, 6))
    # A slice is a new container each call; nothing may guard on its identity.
    assert backend.count == 1
    # The slice's parameters are read through the parent: a trained weight is seen.
    with torch.no_grad():
        next(model.parameters()).mul_(2)
    compare_with_eager(compiled, model, torch.randn(2, 6))
    assert backend.count == 1
    # Another slice bound or a changed parent picks other children.
    change(model)
    compare_with_eager(compiled, model, torch.randn(2, 6))
    assert backend.count == 2


class _Members(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        self.tied = self.fc  # the same module twice: member iterators yield it once
        self.register_buffer("scale", torch.full((4,), 0.5))
        self.register_buffer("unused", None)

    def forward(self, x):
        for name, p in self.named_parameters():
            x = x + p.sum() * len(name)
        for p in self.parameters(recurse=False):
            x = x * p.sum()  # never runs: no parameters of its own
        names = [n for n, _ in self.blocks.named_parameters(prefix="b")]
        for name, b in self.named_buffers():
            x = x * b + len(name)
        for name, child in self.named_children():
            x = x + len(name) * len(list(child.children()))
        modules = [m for m in self.modules()]
        shapes = [tuple(p.shape) for p in self.blocks.parameters()]
        return (x * len(modules) + sum(len(n) for n, _ in self.named_modules()) + len(names) + len(shapes),
                next(self.parameters()).dtype, names, [n for n, _ in self.named_modules(prefix="root")])


@pytest.mark.parametrize("training", [True, False])
def test_iterating_module_members_in_forward_is_one_graph(training):
    torch.manual_seed(0)
    model = _Members().train(training)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    compare_with_eager(compiled, model, torch.randn(3, 4))
    compare_with_eager(compiled, model, torch.randn(3, 4))
    assert backend.count == 1


def test_module_members_are_guarded_on_the_module_tree():
    torch.manual_seed(0)
    model = _Members()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    compare_with_eager(compiled, model, torch.randn(3, 4))
    model.blocks.append(torch.nn.Linear(4, 4))
    compare_with_eager(compiled, model, torch.randn(3, 4))
    assert backend.count == 2
    model.fc.bias = None
    compare_with_eager(compiled, model, torch.randn(3, 4))
    assert backend.count == 3
    model.unused = torch.ones(4)
    compare_with_eager(compiled, model, torch.randn(3, 4))
    assert backend.count == 4


_ACTIVATIONS = {"relu": torch.nn.ReLU, "gelu": (torch.nn.GELU, {"approximate": "tanh"})}


def _activation(name):
    # As transformers' ACT2FN: a new module object on every lookup.
    found = _ACTIVATIONS[name]
    cls, options = found if isinstance(found, tuple) else (found, {})
    return cls(**options)


def _builds_stateless_modules(x):
    pool = torch.nn.MaxPool1d(kernel_size=2)
    average = torch.nn.AvgPool2d((1, 2))  # a tuple attribute, read without a source
    return _activation("relu")(x) + _activation("gelu")(x) + pool(x[None])[0].sum() + average(x[None]).sum()


def test_torch_modules_without_tensors_made_in_forward_are_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_builds_stateless_modules)
    for _ in range(2):
        compare_with_eager(compiled, _builds_stateless_modules, torch.randn(3, 4))
    assert backend.count == 1


def _builds_a_linear(x):
    return torch.nn.Linear(4, 4)(x)


def test_a_module_with_parameters_made_in_forward_breaks_and_runs_as_eager():
    explained = ptc_capture.explain(_builds_a_linear)(torch.randn(3, 4))
    assert "parameters or buffers" in explained.break_reasons[0].reason


class _PartialConv(torch.nn.Module):
    # As timm's FasterNet Partial_conv3: no forward of its own; __init__ binds one of its
    # methods as the instance attribute ``forward``, which nn.Module.__call__ reads.
    def __init__(self, mode):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 3, padding=1, bias=False)
        self.forward = self.forward_split_cat if mode == "split_cat" else self.forward_slicing

    def forward_slicing(self, x):
        x = x.clone()
        x[:, :2] = self.conv(x[:, :2]) * 2  # differs from split_cat, so a stale graph shows
        return x

    def forward_split_cat(self, x):
        x1, x2 = torch.split(x, [2, 2], dim=1)
        return torch.cat((self.conv(x1), x2), 1)


class _PartialNet(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mix = _PartialConv(mode)
        self.head = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.head(self.mix(x)) + x


@pytest.mark.parametrize("mode", ["split_cat", "slicing"])
def test_a_forward_bound_on_the_instance_is_the_one_called_in_one_graph(mode):
    torch.manual_seed(0)
    model = _PartialNet(mode)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(model)
    # The slicing forward writes into a view autograd saved: inference only, as in timm.
    training = mode == "split_cat"
    compare_with_eager(compiled, model, torch.randn(2, 4, 5, 5, requires_grad=training), grads=training)
    assert backend.count == 1
    # Another method bound in its place is seen (the instance attribute is guarded).
    model.mix.forward = model.mix.forward_slicing if mode == "split_cat" else model.mix.forward_split_cat
    with torch.no_grad():
        compare_with_eager(compiled, model, torch.randn(2, 4, 5, 5))
    assert backend.count == 2


def _config_defaults(forward):  # the shape of transformers 5's forward decorators
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if "scale" not in kwargs and len(args) < 2:
            kwargs["scale"] = self.scale
        return forward(self, *args, **kwargs)

    return wrapper


class Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.scale = torch.nn.Linear(8, 8), 0.5

    @_config_defaults
    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc(x) * scale


def test_capture_function_binds_a_decorated_forwards_own_parameters():
    # The wrapper's frame has self, args and kwargs; its __wrapped__ signature (x, scale) names
    # locals that frame never has ("args is read before it is assigned" in fullgraph capture).
    model, x = Decorated(), torch.randn(3, 8)
    backend = CountingBackend()
    capture = capture_function(model, x, backend=backend, fullgraph=True)
    assert backend.count == 1 and capture.graph is not None
    placeholders = [n.target for n in capture.graph.graph.nodes if n.op == "placeholder"]
    assert placeholders == ["l_args_0", "l_self_fc_weight", "l_self_fc_bias"]
    torch.testing.assert_close(capture.graph(x, model.fc.weight, model.fc.bias)[0], model(x))


class _Weighted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(3)) for _ in range(3)])

    def forward(self, x):
        return sum(w * x for w in self.weights) + torch.stack(list(self.weights)).sum(0)


def test_iterating_a_parameter_list_is_one_graph_and_sees_appended_parameters():
    backend = CountingBackend()
    model = _Weighted()
    compiled = ptc_capture.optimize(backend)(model)
    compare_with_eager(compiled, model, torch.randn(3, requires_grad=True), grads=True)
    assert backend.count == 1
    model.weights.append(torch.nn.Parameter(torch.ones(3)))  # a new key: the guard misses, a new capture
    compare_with_eager(compiled, model, torch.randn(3))
    assert backend.count == 2


class _Router(torch.nn.Module):
    """SwitchTransformers' router: casts itself to its dtype in every forward."""

    def __init__(self):
        super().__init__()
        self.classifier = torch.nn.Linear(4, 3)
        self.register_buffer("bias", torch.zeros(3))
        self.dtype = torch.float32

    def forward(self, x):
        x = x.to(self.dtype)
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x).softmax(-1) + self.bias


def test_module_to_that_converts_nothing_is_the_module_itself_in_one_graph():
    router = _Router()
    x = torch.randn(2, 4)
    report = ptc_capture.explain(router)(x)
    torch.testing.assert_close(report.out, router(x))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    # Once the module's tensors have another dtype, to() converts them: eager's own call does it.
    compiled = ptc_capture.optimize("eager")(router)
    router.double()
    router.dtype = torch.float32
    x = torch.randn(2, 4, dtype=torch.float64)
    actual = compiled(x)
    assert router.classifier.weight.dtype == torch.float32 and router.bias.dtype == torch.float64
    torch.testing.assert_close(actual, router(x))


class _Deep(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.LayerNorm(6)) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def test_parameters_sharing_a_module_chain_read_it_once(caplog):
    """The runner reads ``self.blocks`` once for all twelve parameters under it, and each
    block's submodules once for its four; a parameter replaced between calls is the one used."""
    model = _Deep()
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    x = torch.randn(2, 6)
    with caplog.at_level("DEBUG", logger="ptc.capture.graph_code"):
        torch.testing.assert_close(compiled(x), model(x))
    runner = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("runner of"))
    assert runner.count("['blocks']") == 1
    assert runner.count("._modules") == 5  # the model's, the ModuleList's, and each block's
    assert runner.count("['0']") == 4  # the ModuleList's block 0, and in each block its Linear
    with torch.no_grad():
        model.blocks[1][0].weight = torch.nn.Parameter(torch.randn(6, 6))
    torch.testing.assert_close(compiled(x), model(x))


class _Scaled(torch.nn.Module):
    def forward(self, x):
        return F.relu(x) * 2


class _Halved(_Scaled):
    def forward(self, x):
        return F.relu(x) / 2


def test_a_swapped_class_of_one_of_several_instances_recompiles(caplog):
    """Each instance's class-level reads (its forward's code and globals) are checked through one
    instance of the class, which needs every instance's class fixed: swapping the class of the
    last one must still miss the guards."""
    model = torch.nn.Sequential(_Scaled(), _Scaled(), _Scaled())
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(model)
    x = torch.randn(4, 3)
    with caplog.at_level("DEBUG", logger="ptc.capture.guards"):
        torch.testing.assert_close(compiled(x), model(x))
    text = caplog.records[-1].getMessage()
    assert text.count("__globals__") == 1, text
    model[2].__class__ = _Halved
    torch.testing.assert_close(compiled(x), model(x))
    assert backend.count == 2
