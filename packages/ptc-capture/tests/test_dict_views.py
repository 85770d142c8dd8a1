"""Dict views in the trace: live over the dict, iterated when iterated, rebuilt as real views."""

from __future__ import annotations

import collections

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager


def _same_types(out, expected):
    """The result has eager's types all the way down (a view is a view, never a tuple)."""
    assert type(out) is type(expected)
    if isinstance(out, (tuple, list)):
        assert len(out) == len(expected)
        for a, b in zip(out, expected, strict=True):
            _same_types(a, b)


def _materialized(value):
    # compare_with_eager compares containers; a view is compared through what it shows now.
    if isinstance(value, (collections.abc.KeysView, collections.abc.ValuesView, collections.abc.ItemsView)):
        return [_materialized(v) for v in value]
    if type(value) in (tuple, list):
        return type(value)(_materialized(v) for v in value)
    return value


def _check(fn, *args, graphs: int | None = 1, fullgraph: bool = False):
    """``fn`` compiled matches eager in values and types; ``graphs`` graphs were made when given."""
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=fullgraph)(fn)
    expected = fn(*args)
    out = compiled(*args)
    _same_types(out, expected)
    compare_with_eager(lambda *a: _materialized(out), lambda *a: _materialized(expected), *args)
    if graphs is not None:
        assert backend.count == graphs
    return out, expected


# -- views see changes made after they were taken (wrong before: the trace kept a snapshot) --


def _keys_then_insert(x):
    d = {"a": x}
    ks = d.keys()
    d["b"] = x * 2
    return [d[k] for k in ks]


def _values_then_replace(x):
    d = {"a": x, "b": x + 1}
    vs = d.values()
    d["a"] = x * 3
    return list(vs)


def _items_then_delete(x):
    d = {"a": x, "b": x + 1, "c": x - 1}
    its = d.items()
    del d["b"]
    d["z"] = x.sin()
    return [(k, v * 2) for k, v in its]


def _view_len_and_in(x):
    d = {"a": x}
    ks, vs, its = d.keys(), d.values(), d.items()
    d["b"] = x + 1
    return x * len(ks), "b" in ks, len(vs), len(its), bool(ks)


def _view_consumers(x):
    d = {"b": x, "a": x + 1}
    ks, vs, its = d.keys(), d.values(), d.items()
    d["c"] = x * 2
    first = sorted(ks)
    pairs = [(i, k) for i, k in enumerate(ks)]
    zipped = [k + "!" for k, _ in zip(ks, vs, strict=True)]
    twice = [k for k in ks] + [k for k in ks]
    return first, pairs, zipped, twice, tuple(ks), sum(vs), dict(its), list(reversed(ks))


def _keys_set_operations(x):
    d = {"a": x, "b": x + 1}
    ks = d.keys()
    d["c"] = x
    return x + 1, ks & {"a", "c", "z"}, ks - {"a"}, ks | {"q"}, ks ^ {"a", "q"}


def _mutated_sourced(d, x):
    ks = d.keys()
    its = d.items()
    d["new"] = x * 2
    return [k for k in ks], [v + 1 for _, v in its]


def _ordered_views(x):
    d = collections.OrderedDict(a=x, b=x + 1)
    ks = d.keys()
    d.move_to_end("a")
    d["c"] = x * 2
    return list(ks), [v * 2 for v in d.values()], list(reversed(d.items()))


class Record(collections.OrderedDict):
    """A dict subclass made in the trace, as model outputs are."""


def _subclass_views(x):
    r = Record(a=x)
    vs = r.values()
    r["b"] = x + 1
    return [v * 2 for v in vs], list(r.keys())


@pytest.mark.parametrize(
    "fn",
    [
        _keys_then_insert, _values_then_replace, _items_then_delete, _view_len_and_in, _view_consumers,
        _keys_set_operations, _ordered_views, _subclass_views,
    ],
)  # fmt: skip
def test_views_read_the_dict_when_read(fn):
    _check(fn, torch.randn(3), fullgraph=True)


def test_views_of_a_dict_from_the_frame_see_the_traces_changes():
    x = torch.randn(3)
    mine, theirs = {"a": x, "b": x + 1}, {"a": x, "b": x + 1}
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_mutated_sourced)
    out, expected = compiled(mine, x), _mutated_sourced(theirs, x)
    compare_with_eager(lambda *a: out, lambda *a: expected, x)
    assert list(mine) == list(theirs) == ["a", "b", "new"]
    assert backend.count == 1


# -- views that leave the frame are real views of the real dict --


def _return_views(x):
    d = {"a": x + 1}
    return d.keys(), d.values(), d.items(), d


def _return_ordered_view(x):
    d = collections.OrderedDict(a=x, b=x + 1)
    return d.items()


def _return_sourced_view(d, x):
    d["b"] = x + 1
    return d.keys()


@pytest.mark.parametrize("fn", [_return_views, _return_ordered_view])
def test_returned_views_are_views(fn):
    out, _ = _check(fn, torch.randn(3), fullgraph=True)
    if isinstance(out, tuple):
        keys, values, items, d = out
        d["late"] = 1
        assert list(keys) == ["a", "late"] and len(values) == len(items) == 2  # views of the returned dict


def test_a_returned_view_of_a_frame_dict_shows_that_dict():
    x = torch.randn(3)
    d = {"a": x}
    compiled = ptc_capture.optimize(CountingBackend(), fullgraph=True)(_return_sourced_view)
    out = compiled(d, x)
    assert type(out) is type({}.keys())
    d["c"] = 1
    assert list(out) == ["a", "b", "c"]


class Holder:
    pass


def _store_view(holder, x):
    d = {"a": x}
    holder.view = d.values()
    d["b"] = x * 2
    return x + 1


def test_a_view_stored_on_an_object_is_a_view():
    x = torch.randn(3)
    mine, theirs = Holder(), Holder()
    compiled = ptc_capture.optimize(CountingBackend(), fullgraph=True)(_store_view)
    out, expected = compiled(mine, x), _store_view(theirs, x)
    torch.testing.assert_close(out, expected)
    assert type(mine.view) is type(theirs.view)
    torch.testing.assert_close(list(mine.view), list(theirs.view))


# -- views across graph breaks --


def _view_across_break(x):
    d = {"a": x}
    ks = d.keys()
    print("", end="")
    d["b"] = x * 2
    return [d[k] + 1 for k in ks], type(ks).__name__


def _iterate_across_break(x):
    d = {"a": x, "b": x + 1}
    out = []
    for k, v in d.items():
        print("", end="")
        out.append(v * 2)
        d[k] = v + 1  # replacing a value keeps iterating, in eager as here
    return out, list(d.values())


SEEN: list = []


def _note(view):
    print("", end="")
    SEEN.append((type(view), list(view)))


def _view_to_a_break(x):
    d = {"a": x + 1}
    ks = d.keys()
    _note(ks)
    d["b"] = x * 2
    return [d[k] for k in ks]


@needs_hook
@pytest.mark.parametrize(("fn", "graphs"), [(_view_across_break, 1), (_iterate_across_break, 3), (_view_to_a_break, 2)])
def test_views_survive_graph_breaks(fn, graphs):
    # The part before the first break has no graph (nothing computed); the dict's iterator,
    # rebuilt for the resume function, is traced there over the real dict (a graph per step).
    _check(fn, torch.randn(3), graphs=graphs)


# -- changing a dict while iterating it raises in eager: the trace gives way --


def _grow_while_iterating(x):
    d = {"a": x}
    for k in d.keys():
        d[k + k] = x.sin()
    return x + 1


def _grow_while_iterating_dict(x):
    d = {"a": x}
    for k in d:
        d[k + "!"] = x.cos()
    return x + 1


def _grow_across_break(x):
    d = {"a": x}
    for k, v in d.items():
        print("", end="")
        d[k + "!"] = v.cos()
    return x + 1


@needs_hook
@pytest.mark.parametrize("fn", [_grow_while_iterating, _grow_while_iterating_dict, _grow_across_break])
def test_a_dict_changed_during_iteration_raises_as_in_eager(fn):
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        fn(x)
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        ptc_capture.optimize(CountingBackend())(fn)(x)


def _grow_after_loop(x):
    d = {"a": x}
    it = iter(d.items())
    first = next(it)
    rest = list(it)
    d["b"] = x + 1  # the iterator is exhausted: changing the dict now is fine
    return first[1] * 2, rest, list(d)


def test_an_exhausted_dict_iterator_lets_the_dict_change():
    _check(_grow_after_loop, torch.randn(3), fullgraph=True)


@needs_hook
def test_a_view_passed_to_a_graph_break_is_a_view():
    x = torch.randn(3)
    SEEN.clear()
    _view_to_a_break(x)
    ptc_capture.optimize(CountingBackend())(_view_to_a_break)(x)
    assert SEEN[0] == SEEN[1] == (type({}.keys()), ["a"])
