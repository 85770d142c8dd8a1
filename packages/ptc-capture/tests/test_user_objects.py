"""Plain classes and dataclasses instantiated in the traced region behave as in eager."""

from __future__ import annotations

import abc
import collections
import collections.abc
import dataclasses
import warnings

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    loss: torch.Tensor | None = None

    def total(self):
        return self.logits.sum() + (0 if self.loss is None else self.loss)


class Accumulator:
    scale = 2.0

    def __init__(self, start):
        self.value = start
        self.steps = 0

    def add(self, t):
        self.value = self.value + t * self.scale
        self.steps += 1
        return self

    @property
    def mean(self):
        return self.value / max(self.steps, 1)


def _dataclass_out(x):
    out = Out(x * 2, loss=x.mean())
    return out.total() + out.logits.sum()


def _return_dataclass(x):
    return Out(x.relu())


def _plain_object(x):
    acc = Accumulator(x)
    acc.add(x).add(x + 1)
    return acc.mean, acc.steps, isinstance(acc, Accumulator)


@pytest.mark.parametrize("fn", [_dataclass_out, _return_dataclass, _plain_object], ids=["dataclass", "return_dataclass", "plain"])
def test_user_object_matches_eager(fn):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    x = torch.randn(3, 2)
    actual, expected = compiled(x), fn(x)
    if isinstance(expected, Out):
        assert type(actual) is Out
        torch.testing.assert_close(actual.logits, expected.logits)
        assert actual.loss is None
    else:
        compare_with_eager(compiled, fn, x)
    assert backend.count == 1


class GuardedConfig:
    """A config whose __getattribute__ checks a spec first, as transformers' PreTrainedConfig does."""

    aliases = {"width": "hidden"}

    def __init__(self) -> None:
        self.hidden = 3
        self.flag = True
        self.scale = 2.0

    def __getattribute__(self, key):
        spec = super().__getattribute__("__dict__").get("_spec")
        if spec is not None and key in spec:
            raise AttributeError(key)
        if key != "aliases" and key in object.__getattribute__(self, "aliases"):
            key = object.__getattribute__(self, "aliases")[key]
        return super().__getattribute__(key)


def _reads_guarded_config(x, cfg):
    y = x * cfg.width + cfg.scale
    return y + 1 if cfg.flag else y


def test_custom_getattribute_traces_without_breaks():
    cfg = GuardedConfig()
    report = ptc_capture.explain(GuardedConfig.__getattribute__)(cfg, "width")
    assert report.graph_break_count == 0, str(report)
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_reads_guarded_config)
    compare_with_eager(compiled, _reads_guarded_config, torch.randn(3), cfg)
    assert backend.count == 1


def test_custom_getattribute_called_natively_does_not_recompile_per_attribute():
    # Eagerly run code reads a config attribute by attribute: each read is a fresh frame of
    # __getattribute__ guarded on the name, which must not use up the recompile limit.
    cfg = GuardedConfig()
    read = ptc_capture.optimize(CountingBackend())(getattr)
    previous = ptc_capture.set_config(recompile_limit=3)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            values = [read(cfg, name) for name in ("hidden", "flag", "width", "aliases", "hidden", "flag")]
    finally:
        ptc_capture.set_config(previous)
    assert values == [3, True, 3, {"width": "hidden"}, 3, True]


def test_custom_getattribute_that_refuses_a_stored_name_guards_past_it():
    # Heterogeneous transformers configs refuse per-layer names on the global config while
    # their own __getattribute__ still reads them through object.__getattribute__.
    cfg = GuardedConfig()
    cfg._spec = {"hidden"}

    def reads_refused_name(x, c):
        return x * object.__getattribute__(c, "hidden")

    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(reads_refused_name)
    for _ in range(2):
        compare_with_eager(compiled, reads_refused_name, torch.randn(3), cfg)
    assert backend.count == 1


class Record(collections.OrderedDict):
    """A dict-backed dataclass base in the style of transformers' ModelOutput."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = self.__dict__.get(field.name)
            if value is not None:
                self[field.name] = value

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict(self.items())[key]
        return self.to_tuple()[key]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class RecordOut(Record):
    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None


def _record_reads(x):
    out = RecordOut(logits=x * 2)
    out.hidden = x + 1
    return out[0] + out["hidden"] + len(out) + out.logits, dataclasses.is_dataclass(out), "hidden" in out


def _record_returned(x):
    return RecordOut(logits=x.relu())


def test_dict_subclass_dataclass_with_setattr_override_matches_eager():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_record_reads)
    compare_with_eager(compiled, _record_reads, torch.randn(3))
    returned = ptc_capture.optimize(backend)(_record_returned)
    x = torch.randn(3)
    actual, expected = returned(x), _record_returned(x)
    assert type(actual) is RecordOut and list(actual.keys()) == list(expected.keys()) == ["logits"]
    torch.testing.assert_close(actual["logits"], expected["logits"])
    torch.testing.assert_close(actual.logits, expected.logits)
    assert actual.hidden is None
    assert backend.count == 2
    for fn in (_record_reads, _record_returned):
        report = ptc_capture.explain(fn)(torch.randn(3))
        assert report.graph_break_count == 0, str(report)


class Layer(abc.ABC):
    def __init__(self):
        self.state = None

    @abc.abstractmethod
    def update(self, t): ...


class SumLayer(Layer):
    def update(self, t):
        self.state = t if self.state is None else self.state + t
        return self.state


def _abc_objects(x):
    layers = [SumLayer() for _ in range(2)]
    for layer in layers:
        layer.update(x)
        layer.update(x * 3)
    return layers[0].state + layers[1].state


def test_abc_subclass_instances_are_traced():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_abc_objects)
    compare_with_eager(compiled, _abc_objects, torch.randn(3))
    assert backend.count == 1
    assert ptc_capture.explain(_abc_objects)(torch.randn(3)).graph_break_count == 0


class View(collections.abc.Sequence):
    """A read-only view whose iteration is Sequence's generic __getitem__ loop (ended by IndexError)."""

    def __init__(self, items):
        self._items = items

    def __len__(self):
        return len(self._items)

    def __getitem__(self, index):
        return self._items[index]


def _scales_by_view(x, view):
    for scale in view:
        x = x * scale
    return x


def test_iteration_over_an_iterable_argument_is_guarded_on_its_items():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_scales_by_view)
    items = [2.0, 3.0]
    view = View(items)
    compare_with_eager(compiled, _scales_by_view, torch.randn(3), view)
    items.append(5.0)
    compare_with_eager(compiled, _scales_by_view, torch.randn(3), view)
    assert backend.count == 2
    assert ptc_capture.explain(_scales_by_view)(torch.randn(3), view).graph_break_count == 0


class Registry(dict):
    def get(self, key):
        return super().get(key) or {}


REGISTRY = Registry(a={"scale": 3})


def _reads_registry(x):
    return x * REGISTRY.get("a").get("scale", 1) + len(REGISTRY.get("b"))


def test_dict_subclass_method_reaching_dict_get_through_super_is_guarded():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_reads_registry)
    compare_with_eager(compiled, _reads_registry, torch.randn(3))
    REGISTRY["b"] = {"x": 1}
    try:
        compare_with_eager(compiled, _reads_registry, torch.randn(3))
    finally:
        del REGISTRY["b"]
    assert backend.count == 2
    assert ptc_capture.explain(_reads_registry)(torch.randn(3)).graph_break_count == 0
