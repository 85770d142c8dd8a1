"""Lazy iterators as symbolic iterators: ``map``, ``filter``, ``zip``, ``enumerate`` and the
endless or input-pulling ``itertools`` (count, repeat, cycle, islice, accumulate, pairwise, ...).

Each is an ``iter`` Var whose IterBox makes its items one at a time (``step``), pulling from
its inputs only as eager would: a list changed before an item is taken is read changed, a
function's calls interleave with the consumer's code as in eager, and an endless iterator is
fine as long as the consumer stops (the interpreter's step budget stops one drained whole).
``map``, ``filter``, ``zip`` and ``enumerate`` also say how to make the real iterator they have
become (``IterBox.remake``), so a graph break inside a loop over one hands it to the resume
function, which reads a real ``enumerate``/``zip`` back through its ``__reduce__``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from ptc_capture.guards import Guard, Source
from ptc_capture.interpreter.builtins import builtin
from ptc_capture.interpreter.calls import call
from ptc_capture.interpreter.ops import binary
from ptc_capture.interpreter.state import CaptureState, Frame, Unsupported
from ptc_capture.interpreter.values import as_const, get_iter, iter_next, sequence_items, truth
from ptc_capture.variables import IterBox, Var, const

__all__ = ["resumed_lazy_iterator"]

Args = list[Var]
Kwargs = dict[str, Var]
Step = Callable[[Frame], "Var | None"]


def _lazy(step: Step, remake: Callable[[], tuple[object, list[Var]]] | None = None) -> Var:
    return Var("iter", box=IterBox([], step=step, remake=remake))


def _row(items: list[Var]) -> Var:
    return Var("tuple", tuple, items=tuple(items))


def _no_keywords(name: str, kwargs: Kwargs) -> None:
    if kwargs:
        raise Unsupported(f"{name}() takes no keyword arguments (TypeError in eager)")


def _int_arg(var: Var, what: str) -> int:
    value = as_const(var, what)
    if type(value) is not int:
        raise Unsupported(f"{what} must be an int (TypeError or ValueError in eager)")
    return value


@builtin(map)
def _map(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if len(args) < 2 or kwargs:
        raise Unsupported("map() without an iterable (TypeError in eager)")
    func, sources = args[0], [get_iter(frame, a) for a in args[1:]]

    def step(frame: Frame) -> Var | None:
        row = []
        for source in sources:
            item = iter_next(frame, source)
            if item is None:
                return None
            row.append(item)
        return call(frame, func, row, {})

    return _lazy(step, lambda: (map, [func, *sources]))


@builtin(filter)
def _filter(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if len(args) != 2 or kwargs:
        raise Unsupported("filter() takes a function and an iterable (TypeError in eager)")
    keep, source = args[0], get_iter(frame, args[1])
    identity = keep.kind == "const" and keep.value is None

    def step(frame: Frame) -> Var | None:
        item = iter_next(frame, source)
        while item is not None and not truth(item if identity else call(frame, keep, [item], {}), frame):
            item = iter_next(frame, source)
        return item

    return _lazy(step, lambda: (filter, [keep, source]))


@builtin(zip)
def _zip(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if set(kwargs) - {"strict"}:
        raise Unsupported("zip() takes only strict= (TypeError in eager)")
    strict = "strict" in kwargs and truth(kwargs["strict"])
    return _zip_over([get_iter(frame, a) for a in args], strict)


def _zip_over(sources: list[Var], strict: bool) -> Var:
    def step(frame: Frame) -> Var | None:
        row = []
        for i, source in enumerate(sources):
            item = iter_next(frame, source)
            if item is None:
                # zip(strict=True) raises ValueError here if the inputs ran out unevenly; eager
                # raises it with its own traceback.
                if strict and (i > 0 or any(iter_next(frame, s) is not None for s in sources[1:])):
                    raise Unsupported("zip(strict=True) over inputs of different lengths (ValueError in eager)")
                return None
            row.append(item)
        return _row(row) if sources else None

    return _lazy(step, lambda: (functools.partial(zip, strict=True) if strict else zip, sources))


@builtin(enumerate)
def _enumerate(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if not args or len(args) + len(kwargs) > 2 or set(kwargs) - {"start"}:
        raise Unsupported("enumerate() takes an iterable and start= (TypeError in eager)")
    start = kwargs["start"] if "start" in kwargs else (args[1] if len(args) > 1 else const(0))
    return _enumerate_over(get_iter(frame, args[0]), _int_arg(start, "enumerate(start=)"))


def _enumerate_over(source: Var, start: int) -> Var:
    count = [start]

    def step(frame: Frame) -> Var | None:
        item = iter_next(frame, source)
        if item is None:
            return None
        count[0] += 1
        return _row([const(count[0] - 1), item])

    return _lazy(step, lambda: (enumerate, [source, const(count[0])]))


def resumed_lazy_iterator(state: CaptureState, value: Any, source: Source) -> Var | None:
    """The iter Var of a real ``enumerate`` or ``zip`` object read from ``source`` (a loop over one
    resumed after a graph break), over the iterators its ``__reduce__`` shows without advancing
    it; None to leave it opaque."""
    reduced = value.__reduce__()
    reduce_source = Source("reduce", None, source)
    state.guards.add(Guard("type", source, type(value)))
    state.guards.add(Guard("len", reduce_source, (tuple, len(reduced))))
    inputs = reduce_source.item(1)
    if type(value) is enumerate:
        state.guards.add(Guard("const", inputs.item(1), reduced[1][1]))
        inner = state.wrap(reduced[1][0], inputs.item(0))
        return _enumerate_over(inner, reduced[1][1]) if inner.kind == "iter" else None
    state.guards.add(Guard("len", inputs, (tuple, len(reduced[1]))))
    sources = [state.wrap(it, inputs.item(i)) for i, it in enumerate(reduced[1])]
    if not all(v.kind == "iter" for v in sources):
        return None
    return _zip_over(sources, len(reduced) > 2 and bool(reduced[2]))


@builtin(itertools.count)
def _count(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    values = [as_const(a, "count()") for a in args]
    options = {k: as_const(v, "count()") for k, v in kwargs.items()}
    try:
        numbers = itertools.count(*values, **options)
    except TypeError as exc:
        raise Unsupported("count() called with bad arguments (TypeError in eager)") from exc
    return _lazy(lambda frame: const(next(numbers)))


@builtin(itertools.repeat)
def _repeat(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if not args or len(args) + len(kwargs) > 2:
        raise Unsupported("repeat() takes an object and a count (TypeError in eager)")
    value = args[0]
    times_var = kwargs.get("times", args[1] if len(args) > 1 else None)
    left = [None if times_var is None else _int_arg(times_var, "repeat(times=)")]

    def step(frame: Frame) -> Var | None:
        if left[0] is not None:
            if left[0] <= 0:
                return None
            left[0] -= 1
        return value

    return _lazy(step)


@builtin(itertools.cycle)
def _cycle(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _no_keywords("cycle", kwargs)
    source = get_iter(frame, args[0])
    saved: list[Var] = []
    at = {"exhausted": False, "next": 0}

    def step(frame: Frame) -> Var | None:
        if not at["exhausted"]:
            item = iter_next(frame, source)
            if item is not None:
                saved.append(item)
                return item
            at["exhausted"] = True
        if not saved:
            return None
        # The input is exhausted: eager repeats the items it saved, in order.
        found = saved[at["next"] % len(saved)]
        at["next"] += 1
        return found

    return _lazy(step)


@builtin(itertools.islice)
def _islice(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _no_keywords("islice", kwargs)
    if not 2 <= len(args) <= 4:
        raise Unsupported("islice() takes an iterable and up to three bounds (TypeError in eager)")
    bounds = [as_const(a, "an islice bound") for a in args[1:]]
    try:
        itertools.islice((), *bounds)  # eager's checks of the bounds
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"islice() bounds raised {type(exc).__name__} (as in eager)") from exc
    window = slice(*bounds) if len(bounds) > 1 else slice(None, bounds[0])
    stop, stride = window.stop, window.step or 1
    source = get_iter(frame, args[0])
    # As CPython's islice: skip to the next wanted index, stop at ``stop`` (having read the
    # items before it), and read nothing more once it has ended.
    at = {"read": 0, "next": window.start or 0, "done": False}

    def step(frame: Frame) -> Var | None:
        if at["done"]:
            return None
        while at["read"] < at["next"]:
            if iter_next(frame, source) is None:
                at["done"] = True
                return None
            at["read"] += 1
        item = None if stop is not None and at["read"] >= stop else iter_next(frame, source)
        if item is None:
            at["done"] = True
            return None
        at["read"] += 1
        at["next"] = at["next"] + stride if stop is None else min(at["next"] + stride, stop)
        return item

    return _lazy(step)


@builtin(itertools.zip_longest)
def _zip_longest(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if set(kwargs) - {"fillvalue"}:
        raise Unsupported("zip_longest() takes only fillvalue= (TypeError in eager)")
    fill = kwargs.get("fillvalue", const(None))
    sources: list[Var | None] = [get_iter(frame, a) for a in args]

    def step(frame: Frame) -> Var | None:
        row = []
        for i, source in enumerate(sources):
            item = None if source is None else iter_next(frame, source)
            if item is None:
                sources[i] = None
            row.append(fill if item is None else item)
        return _row(row) if any(s is not None for s in sources) else None

    return _lazy(step)


@builtin(itertools.accumulate)
def _accumulate(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    if not 1 <= len(args) <= 2 or set(kwargs) - {"func", "initial"}:
        raise Unsupported("accumulate() takes an iterable, func= and initial= (TypeError in eager)")
    func = args[1] if len(args) > 1 else kwargs.get("func", const(None))
    source = get_iter(frame, args[0])
    initial = kwargs.get("initial", const(None))
    total: list[Var | None] = [None]
    pending = [None if initial.kind == "const" and initial.value is None else initial]

    def step(frame: Frame) -> Var | None:
        if pending[0] is not None:
            total[0], pending[0] = pending[0], None
            return total[0]
        item = iter_next(frame, source)
        if item is None:
            return None
        if total[0] is None:
            total[0] = item
        elif func.kind == "const" and func.value is None:
            total[0] = binary(frame, "+", total[0], item)
        else:
            total[0] = call(frame, func, [total[0], item], {})
        return total[0]

    return _lazy(step)


@builtin(itertools.pairwise)
def _pairwise(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _no_keywords("pairwise", kwargs)
    source = get_iter(frame, args[0])
    last: list[Var | None] = [None]

    def step(frame: Frame) -> Var | None:
        if last[0] is None:
            last[0] = iter_next(frame, source)
            if last[0] is None:
                return None
        item = iter_next(frame, source)
        if item is None:
            return None
        pair, last[0] = _row([last[0], item]), item
        return pair

    return _lazy(step)


@builtin(itertools.starmap)
def _starmap(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _no_keywords("starmap", kwargs)
    func, source = args[0], get_iter(frame, args[1])

    def step(frame: Frame) -> Var | None:
        item = iter_next(frame, source)
        return None if item is None else call(frame, func, sequence_items(frame, item), {})

    return _lazy(step)


def _while(drop: bool) -> Callable[[Frame, Var, Args, Kwargs], Var]:
    def make(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
        _no_keywords(fn.value.__name__, kwargs)
        test, source = args[0], get_iter(frame, args[1])
        state = {"dropping": drop, "done": False}

        def step(frame: Frame) -> Var | None:
            if state["done"]:
                return None
            item = iter_next(frame, source)
            while drop and state["dropping"] and item is not None and truth(call(frame, test, [item], {}), frame):
                item = iter_next(frame, source)
            state["dropping"] = False
            if item is not None and not drop and not truth(call(frame, test, [item], {}), frame):
                state["done"] = True
                return None
            return item

        return _lazy(step)

    return make


builtin(itertools.takewhile)(_while(drop=False))
builtin(itertools.dropwhile)(_while(drop=True))


@builtin(itertools.compress)
def _compress(frame: Frame, fn: Var, args: Args, kwargs: Kwargs) -> Var:
    _no_keywords("compress", kwargs)
    data, selectors = get_iter(frame, args[0]), get_iter(frame, args[1])

    def step(frame: Frame) -> Var | None:
        while True:
            item = iter_next(frame, data)
            chosen = None if item is None else iter_next(frame, selectors)
            if chosen is None:
                return None
            if truth(chosen, frame):
                return item

    return _lazy(step)

