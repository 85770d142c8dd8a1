"""Mutations of lists, dicts, attributes and globals in a traced region are replayed as in eager."""

from __future__ import annotations

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture

pytestmark = needs_hook

COUNTER = 0


class Box:
    def __init__(self) -> None:
        self.value = None
        self.calls = 0


def _append(x, out):
    out.append(x * 2)
    out.append(3)
    return x + 1


def _dict_store(x, d):
    d["y"] = x.cos()
    d.pop("drop")
    return d["keep"] + x


def _attr_store(x, box):
    box.value = x * 5
    box.calls = box.calls + 1
    return box.value + 1


def _global_store(x):
    global COUNTER
    COUNTER = COUNTER + 1
    return x * COUNTER


def _list_from_trace(x, out):
    local = [x]
    local.append(x + 1)
    out.extend(local)
    return len(out)


@pytest.mark.parametrize("fn", [_append, _list_from_trace])
def test_list_mutation_replayed(fn):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(fn)
    x = torch.randn(3)
    eager_out: list = [0]
    compiled_out: list = [0]
    expected = fn(x, eager_out)
    actual = compiled(x, compiled_out)
    assert backend.count == 1
    torch.testing.assert_close(actual, expected)
    assert len(compiled_out) == len(eager_out)
    for a, e in zip(compiled_out, eager_out):
        torch.testing.assert_close(a, e)


def test_dict_mutation_replayed():
    compiled = ptc_capture.optimize("eager")(_dict_store)
    x = torch.randn(3)
    d1 = {"keep": torch.ones(3), "drop": 1}
    d2 = {"keep": torch.ones(3), "drop": 1}
    torch.testing.assert_close(compiled(x, d1), _dict_store(x, d2))
    assert list(d1) == list(d2)
    torch.testing.assert_close(d1["y"], d2["y"])


def test_attribute_mutation_replayed():
    compiled = ptc_capture.optimize("eager")(_attr_store)
    x = torch.randn(3)
    b1, b2 = Box(), Box()
    for _ in range(2):
        torch.testing.assert_close(compiled(x, b1), _attr_store(x, b2))
    assert b1.calls == b2.calls == 2
    torch.testing.assert_close(b1.value, b2.value)


def test_global_mutation_replayed():
    global COUNTER
    compiled = ptc_capture.optimize("eager")(_global_store)
    x = torch.ones(2)
    COUNTER = 0
    first = compiled(x)
    second = compiled(x)
    assert COUNTER == 2
    torch.testing.assert_close(first, x * 1)
    torch.testing.assert_close(second, x * 2)


def test_inplace_on_input_matches_eager():
    def fn(x):
        x.add_(1)
        x[0] = 0.0
        return x * 2

    compiled = ptc_capture.optimize("eager")(fn)
    a, b = torch.randn(3), torch.randn(3)
    b.copy_(a)
    torch.testing.assert_close(compiled(a), fn(b))
    torch.testing.assert_close(a, b)


class Frozen:
    def __setattr__(self, name, value):
        raise AttributeError(f"{name} is read-only")


def _bypasses_setattr(x, obj):
    object.__setattr__(obj, "cached", x * 2)
    return x + 1


def test_object_setattr_on_a_frame_object_is_replayed_past_its_override():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_bypasses_setattr)
    x = torch.randn(3)
    obj = Frozen()
    torch.testing.assert_close(compiled(x, obj), x + 1)
    torch.testing.assert_close(obj.cached, x * 2)
    assert backend.count == 1
    assert ptc_capture.explain(_bypasses_setattr)(x, Frozen()).graph_break_count == 0


class _Box:
    def __init__(self):
        self.items = [torch.ones(2), torch.zeros(2)]
        self.child = _Child()


class _Child:
    pass


@ptc_capture.disable
def _opaque_step(x):
    return x + 1


def _reads_then_rebinds(box, x):
    # As transformers' ModelOutput.__post_init__: a value read from an attribute, then the
    # attribute reset, then the value used (after a graph break, and in the result).
    first, child = box.items, box.child
    box.items = None
    box.child = None
    y = _opaque_step(x)
    for item in first:
        y = y + item
    return y, first, child


def _reads_then_rebinds_no_break(box, x):
    child, items = box.child, box.items
    box.child, box.items = _Child(), None
    return x * 2, items, child


@pytest.mark.parametrize("fn", [_reads_then_rebinds, _reads_then_rebinds_no_break], ids=["graph_break", "one_graph"])
def test_a_value_read_before_its_attribute_is_rebound_keeps_the_value_read(fn):
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    for _ in range(2):
        box, expected_box = _Box(), _Box()
        out = compiled(box, torch.ones(2))
        expected = fn(expected_box, torch.ones(2))
        torch.testing.assert_close(out[0], expected[0])
        assert type(out[2]) is _Child and out[2] is not box.child and out[1] is not None
        assert (box.items, type(box.child)) == (expected_box.items, type(expected_box.child))
