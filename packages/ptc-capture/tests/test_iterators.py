"""Iterators traced lazily: chain, map, filter, zip, enumerate and itertools read their inputs
when eager would, in one graph with eager's results."""

from __future__ import annotations

import itertools
import sys

import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

pytestmark = needs_hook


def _chain_of_a_list_changed_before_use(x):
    parts = [x]
    chained = itertools.chain(parts, (x * 2,))
    parts.append(x * 3)
    return sum(chained)


def _chain_of_a_list_changed_while_used(x):
    parts = [x, x * 2]
    total = x
    for i, t in enumerate(itertools.chain(parts, [x - 1])):
        if i == 0:
            parts.append(t * 5)  # the chain is still on parts: it reads the new item
        total = total + t * (i + 1)
    return total


def _chain_from_iterable_of_a_growing_list(x):
    groups = [[x], (x * 2,)]
    chained = itertools.chain.from_iterable(groups)
    groups.append([x * 3, x * 4])
    first = next(chained)
    groups[1] = (x * 7,)  # not read yet: the chain sees the replacement
    return first + sum(chained)


def _list_iterator_sees_later_changes(x):
    items = [x, x + 1]
    it = iter(items)
    items.append(x * 3)
    total = next(it)
    items.insert(1, x * 10)
    return total + sum(it)


def _chain_of_a_shared_iterator(x):
    it = iter([x, x * 2, x * 3])
    chained = itertools.chain(it, [x - 1])
    skipped = next(it)
    return skipped + sum(chained)


def _lazy_map_filter_zip(x):
    calls = []

    def scale(t):
        calls.append(len(calls))
        return t * (len(calls) + 1)

    mapped = map(scale, [x, x * 2, x * 3])
    first = next(mapped)
    seen = len(calls)  # eager's map has called scale once by now
    evens = filter(lambda k: k % 2 == 0, itertools.count())
    pairs = list(zip(evens, [x, x], strict=False))
    return first + seen + sum(k * t for k, t in pairs) + sum(mapped) + len(calls)


def _itertools_kinds(x):
    total = x
    for i, t in zip(itertools.count(1), [x, x * 2]):
        total = total + i * t
    for t in itertools.islice([x, x * 2, x * 3, x * 4], 1, None, 2):
        total = total + t
    for a, b in itertools.zip_longest([1, 2, 3], [x], fillvalue=0):
        total = total + a * b
    total = total + sum(itertools.accumulate([x, x, x]))
    total = total + sum(itertools.accumulate([1, 2, 3], lambda a, b: a * b, initial=2))
    for t in itertools.repeat(x, 2):
        total = total + t
    for a, b in itertools.pairwise([1, 2, 4]):
        total = total + a * b
    total = total + sum(itertools.starmap(lambda a, b: a * b, [(x, 2), (x, 3)]))
    total = total + sum(itertools.takewhile(lambda k: k < 3, itertools.count()))
    total = total + sum(itertools.dropwhile(lambda k: k < 3, range(6)))
    total = total + sum(itertools.compress([x, x * 2, x * 3], [1, 0, 1]))
    total = total + sum(itertools.islice(itertools.cycle([1, 2]), 5))
    for i, t in enumerate([x, x], start=3):
        total = total + i * t
    return total


def _membership_in_lazy_iterators(x):
    # ``in`` takes items up to the first match; the iterator goes on after it.
    doubled = map(lambda v: v * 2, [1, 2, 3, 4])
    found = 4 in doubled
    kept = filter(lambda v: v > 1, [1, 2, 3])
    missing = 7 in kept  # exhausts it
    pairs = zip([1, 2, 3], "abc")
    pair = (2, "b") in pairs
    squares = (i * i for i in range(6))
    square = 9 in squares
    return x * found + x * missing, list(doubled), list(kept), list(pairs), next(squares), pair, square


CASES = [
    _membership_in_lazy_iterators,
    _chain_of_a_list_changed_before_use,
    _chain_of_a_list_changed_while_used,
    _chain_from_iterable_of_a_growing_list,
    _list_iterator_sees_later_changes,
    _chain_of_a_shared_iterator,
    _lazy_map_filter_zip,
    _itertools_kinds,
]


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_iterators_are_one_graph_with_eager_results(fn):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    compare_with_eager(compiled, fn, torch.randn(3))
    assert backend.count == 1


def _iterator_across_a_break(x):
    items = [x, x * 2, x * 3]
    it = iter(items)
    first = next(it)
    print("break")  # noqa: T201
    items.append(x * 4)
    chained = itertools.chain([first], items)
    return sum(it) + sum(chained)


def test_a_list_iterator_across_a_graph_break_keeps_reading_the_list(capsys):
    compiled = ptc_capture.optimize(CountingBackend())(_iterator_across_a_break)
    compare_with_eager(compiled, _iterator_across_a_break, torch.randn(3))


def _zip_strict_uneven(x):
    return sum(a * b for a, b in zip([x, x], iter([1]), strict=True))


def _endless(x):
    return sum(itertools.count()) + x  # eager never returns: only traced here


@pytest.mark.parametrize(("fn", "error"), [(_zip_strict_uneven, ValueError)], ids=["zip-strict"])
def test_errors_of_lazy_iterators_are_eager_s(fn, error):
    compiled = ptc_capture.optimize(CountingBackend())(fn)
    with pytest.raises(error):
        compiled(torch.randn(2))


def test_draining_an_endless_iterator_breaks_instead_of_hanging():
    from ptc_capture.capture import capture_function
    from ptc_capture.config import set_config

    old = set_config(max_instructions=5000)
    try:
        capture = capture_function(_endless, torch.randn(2))
    finally:
        set_config(old)
    assert capture.breaks and "endless iterator" in capture.breaks[0].reason


@ptc_capture.disable
def _opaque(x):
    return x + 1


def _eager_parent(weights, x):
    try:
        y = _opaque(x)  # a graph break inside a try block: this frame runs eagerly
    finally:
        pass
    # ... so each comprehension's frame is captured alone, given its dict iterator as ``.0``.
    return [w * y for w in weights.values()], {k: v + y for k, v in weights.items()}, [k for k in weights]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="comprehensions are inlined into their function from 3.12 (PEP 709)")
def test_a_comprehension_frame_given_a_dict_iterator_is_captured():
    weights = {"a": torch.randn(3), "b": torch.randn(3)}
    explained = ptc_capture.explain(_eager_parent)(weights, torch.randn(3))
    assert not any("FOR_ITER" in record.reason for record in explained.break_reasons)
    assert explained.graph_count >= 2  # the list and dict comprehensions
    compare_with_eager(ptc_capture.optimize(CountingBackend())(_eager_parent), _eager_parent, weights, torch.randn(3))
