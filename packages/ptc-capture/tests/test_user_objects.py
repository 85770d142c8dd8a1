"""Plain classes and dataclasses instantiated in the traced region behave as in eager."""

from __future__ import annotations

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
