"""Plain classes and dataclasses instantiated in the traced region behave as in eager."""

from __future__ import annotations

import dataclasses

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
