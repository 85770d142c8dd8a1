"""Dict methods and mappings in the trace: OrderedDict, dict.update from mappings, dict subclasses."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
from ptc_capture_testing import CountingBackend
from test_user_objects import RecordOut  # a dataclass over OrderedDict, as ModelOutput is

import ptc_capture
from ptc_spec.testing import compare_with_eager


def _one_graph(fn, *args):
    """``fn`` compiled with fullgraph=True matches eager, in one graph."""
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    result = compare_with_eager(compiled, fn, *args)
    assert backend.count == 1
    return result


def _ordered_made_in_trace(x):
    empty = collections.OrderedDict()
    empty["b"] = x + 1
    empty["a"] = x * 2
    pairs = collections.OrderedDict([("p", x), ("q", x - 1)])
    named = collections.OrderedDict(k=x.sin(), j=x.cos())
    named.move_to_end("k")
    pairs.move_to_end("q", last=False)
    first = pairs.popitem(last=False)
    last = empty.popitem()
    total = sum(v for v in named.values()) + first[1] + last[1]
    return total, list(empty), list(named), isinstance(named, collections.OrderedDict), named


def _ordered_returned(x):
    out = collections.OrderedDict(z=x, a=x + 1)
    out.move_to_end("z")
    return out | {"m": x * 3}


def _ordered_copy_and_update(x):
    od = collections.OrderedDict(a=x)
    copied = od.copy()
    copied.update([("b", x + 1)], c=x + 2)
    return type(copied) is collections.OrderedDict, copied, dict(copied)


@pytest.mark.parametrize("fn", [_ordered_made_in_trace, _ordered_returned, _ordered_copy_and_update])
def test_ordered_dicts_made_in_the_trace_match_eager_in_one_graph(fn):
    result = _one_graph(fn, torch.randn(3))
    expected = fn(torch.randn(3))
    found = [v for v in (result if isinstance(result, tuple) else (result,)) if isinstance(v, dict)]
    wanted = [v for v in (expected if isinstance(expected, tuple) else (expected,)) if isinstance(v, dict)]
    assert [(type(v), list(v)) for v in found] == [(type(v), list(v)) for v in wanted]


def _reorders_argument(x, od):
    od.move_to_end("a")
    od["c"] = x * 2
    return od["a"] + od["b"]


def test_an_ordered_dict_from_the_frame_is_reordered_for_the_caller():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_reorders_argument)
    x = torch.randn(3)
    mine, theirs = (collections.OrderedDict(a=x + 1, b=x - 1) for _ in range(2))
    torch.testing.assert_close(compiled(x, mine), _reorders_argument(x, theirs))
    assert type(mine) is collections.OrderedDict and list(mine) == list(theirs) == ["b", "a", "c"]
    torch.testing.assert_close(mine["c"], theirs["c"])
    assert backend.count == 1


class Mapping:
    """A mapping by protocol only: keys() and __getitem__, as dict.update reads it."""

    def __init__(self, **entries):
        self.entries = entries

    def keys(self):
        return list(self.entries)

    def __getitem__(self, key):
        return self.entries[key] * 2


class Shouting(dict):
    """A dict subclass that keeps dict's own iteration: dict's C merge reads its storage, past __getitem__."""

    def __getitem__(self, key):
        return super().__getitem__(key) * 10


def _update_from_objects(x, shouting):
    d = {"x": x}
    d.update(Mapping(a=x + 1))
    d.update(shouting)
    d.update(RecordOut(logits=x.relu(), hidden=x * 3))
    od = collections.OrderedDict(shouting)
    merged = {**Mapping(m=x), **RecordOut(logits=x.tanh())}
    return d, od, merged, _takes_keywords(**RecordOut(hidden=x.exp()))


def _takes_keywords(hidden=None, logits=None):
    return hidden


def test_dict_update_reads_mappings_as_cpython_does():
    _one_graph(_update_from_objects, torch.randn(3), Shouting(s=torch.randn(3)))


def _update_from_argument(x, d, other):
    d.update(other)
    return d["logits"] + x


def test_dict_update_from_a_model_output_argument_is_seen_by_the_caller():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_update_from_argument)
    x = torch.randn(3)
    mine, theirs = {"x": x}, {"x": x}
    out = RecordOut(logits=x + 1, hidden=x - 1)
    torch.testing.assert_close(compiled(x, mine, out), _update_from_argument(x, theirs, out))
    assert list(mine) == list(theirs) == ["x", "logits", "hidden"]
    assert backend.count == 1


def _reads_model_output(x, out):
    keys = list(out.keys())
    total = sum(v for v in out.values()) + out.to_tuple()[0]
    for name, value in out.items():
        total = total + value * len(name)
    return total + x, keys


def test_dict_methods_of_a_model_output_argument_trace_in_one_graph():
    x = torch.randn(3)
    _one_graph(_reads_model_output, x, RecordOut(logits=x + 1, hidden=x - 1))


def _search_lists_of_tensors(x):
    items = [x, x]  # (two different tensors of more than one element would make eager's == raise)
    numbers = [1, 2, 3, 2]
    return x * items.index(x) + items.count(items[1]) + numbers.index(2, 2) + numbers.index(3, -3, 3)


def test_list_index_and_count_over_tensors_compare_by_identity_first():
    # They read the list's Python value, which tensors have not: an internal capture error.
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(_search_lists_of_tensors), _search_lists_of_tensors, torch.randn(3))
    assert backend.count == 1


@dataclasses.dataclass
class _Tag:
    name: str


def _membership_by_equality(x):
    items = [x]
    return x + ([x] in [items]) + (_Tag("a") in [_Tag("a")]) + (None in [x]) + (_Tag("b") in (_Tag("a"),))


def _membership_of_a_number_in_tensors(x):
    return 3 in [x]


def test_membership_compares_elements_that_are_not_the_item():
    # An element that was not the item itself and had no Python value counted as different:
    # [x] in [[x]] and a dataclass in a list of equal ones were False, where eager says True.
    backend = CountingBackend()
    compare_with_eager(ptc_capture.optimize(backend, fullgraph=True)(_membership_by_equality), _membership_by_equality, torch.randn(3))
    assert backend.count == 1
    # A one-element tensor equal to the number: the truth of the comparison is data, so the
    # test runs eagerly (it was answered False at trace time).
    compare_with_eager(ptc_capture.optimize(CountingBackend())(_membership_of_a_number_in_tensors), _membership_of_a_number_in_tensors, torch.tensor(3))
