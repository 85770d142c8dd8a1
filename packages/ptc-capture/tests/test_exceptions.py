"""Exceptions the traced code raises: caught where eager catches them, never resumed on the trace's path."""

from __future__ import annotations

import collections.abc

import numpy as np
import pytest
import torch
from ptc_capture_testing import CountingBackend, needs_hook

import ptc_capture
from ptc_spec.testing import compare_with_eager

# -- an error nothing catches: the frame runs eagerly, with eager's decisions ------------------


def _blocks_of(mask: torch.Tensor, block: int) -> torch.Tensor:
    return mask.reshape(mask.shape[0], -1, block)  # AttributeError when mask is None


def _stack_forward(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    # transformers' pattern: the default mask is skipped under a compiler, which is fine for a
    # whole-graph compile and wrong for code re-run natively after a break in this frame.
    y = x * 2
    if mask is None and not torch.compiler.is_compiling():
        mask = torch.ones(x.shape[0], x.shape[1])
    return y + _blocks_of(mask, 2).sum()


def _model_forward(x: torch.Tensor) -> torch.Tensor:
    return _stack_forward(x + 1) - 1


@needs_hook
@pytest.mark.parametrize("fn", [_stack_forward, _model_forward], ids=["frame", "caller"])
def test_uncaught_error_under_is_compiling_runs_the_frame_eagerly(fn):
    compiled = ptc_capture.optimize("eager")(fn)
    compare_with_eager(compiled, fn, torch.randn(2, 4))
    compare_with_eager(compiled, fn, torch.randn(2, 4))  # the cached entry, too


@needs_hook
def test_a_caller_breaks_at_the_call_that_raised_and_compiles_the_rest():
    # The caller took no compile-path decision before the call: it breaks there as at any call
    # (the callee, run natively, is its own eager frame) and its own ops stay in graphs.
    x = torch.randn(2, 4)
    report = ptc_capture.explain(_model_forward)(x)
    torch.testing.assert_close(report.out, _model_forward(x))
    assert report.graph_count == 3 and report.graph_break_count == 2, str(report)
    assert [len(ops) for ops in report.ops_per_graph] == [1, 1, 1], str(report)


def _raises_on_purpose(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    if y.dim() == 2:
        raise ValueError("no matrices")
    return y


@needs_hook
def test_an_error_eager_raises_comes_from_the_users_frame():
    compiled = ptc_capture.optimize("eager")(_raises_on_purpose)
    with pytest.raises(ValueError, match="no matrices"):
        compiled(torch.randn(2, 2))
    torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 2.0))


def _probe(table: dict[str, float]) -> float:
    try:
        return table["scale"]
    except KeyError:
        return 3.0


def _caught_in_callee(x: torch.Tensor) -> torch.Tensor:
    return x * _probe({}) + 1


@needs_hook
def test_an_error_a_traced_callee_catches_still_resumes_after_its_call():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend)(_caught_in_callee)
    compare_with_eager(compiled, _caught_in_callee, torch.randn(3))
    assert backend.count >= 1


# -- AttributeError as getattr's default and hasattr's False ------------------------------------


class _Config:
    """transformers' configs: a Python __getattribute__ that maps names, then the generic lookup."""

    aliases = {"width": "hidden"}

    def __init__(self) -> None:
        self.hidden = 3

    def __getattribute__(self, key: str):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)


class _Lazy:
    """Attributes the normal lookup misses come from __getattr__."""

    def __init__(self) -> None:
        self.base = 2.0

    def __getattr__(self, name: str) -> float:
        if name.startswith("extra_"):
            return 0.5
        raise AttributeError(name)


CONFIG = _Config()
LAZY = _Lazy()


def _reads_missing_attributes(x: torch.Tensor, cache: object = None) -> torch.Tensor:
    if getattr(cache, "is_compileable", False):
        x = x - 100
    scale = getattr(CONFIG, "width", 1) + getattr(CONFIG, "use_cache", 10)
    if hasattr(CONFIG, "missing") or not hasattr(CONFIG, "hidden"):
        x = x - 1000
    return x * scale + getattr(LAZY, "extra_bias", 7.0) + getattr(LAZY, "other", 0.25)


def _reads_config_in_an_eager_frame(x: torch.Tensor) -> torch.Tensor:
    try:
        print(end="")  # a break inside a try block: this frame runs eagerly
    finally:
        y = x + 1
    # Each read now runs _Config.__getattribute__ as a frame of its own, which raises for a
    # missing name exactly as in eager: that frame has nothing to compile and is no break.
    return y * getattr(CONFIG, "missing", 2.0) + getattr(CONFIG, "width", 0)


@needs_hook
def test_a_frame_that_raises_as_eager_does_is_not_a_graph_break():
    x = torch.randn(3)
    report = ptc_capture.explain(_reads_config_in_an_eager_frame)(x)
    torch.testing.assert_close(report.out, _reads_config_in_an_eager_frame(x))
    assert report.graph_break_count == 1, str(report)  # the try block's only
    compiled = ptc_capture.optimize("eager")(_reads_config_in_an_eager_frame)
    for _ in range(2):
        compare_with_eager(compiled, _reads_config_in_an_eager_frame, torch.randn(3))


def _reads_missing_attributes_of_new_objects(x: torch.Tensor) -> torch.Tensor:
    lazy = _Lazy()
    total = lazy.base + lazy.extra_shift + getattr(lazy, "absent", 1.0)
    if hasattr(lazy, "absent") or not hasattr(lazy, "extra_flag"):
        total = -1.0
    return x * total


# -- numpy scalar math on Python numbers ---------------------------------------------------------


def _scales_by_numpy_sqrt(x: torch.Tensor) -> torch.Tensor:
    return x / np.sqrt(x.shape[-1]) + np.exp(0.5) * x


def test_numpy_math_on_python_numbers_folds_into_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_scales_by_numpy_sqrt)
    compare_with_eager(compiled, _scales_by_numpy_sqrt, torch.randn(2, 16))
    assert backend.count == 1


# -- errors caught by try/except in the traced code ----------------------------------------------


class _Registry(collections.abc.Mapping):
    """transformers' AttentionInterface: Mapping.get is ``try: self[key] except KeyError: default``."""

    def __init__(self) -> None:
        self._known = {"sdpa": 2.0}

    def __getitem__(self, key: str) -> float:
        return self._known[key]

    def __iter__(self):
        return iter(self._known)

    def __len__(self) -> int:
        return len(self._known)


REGISTRY = _Registry()


def _catches_lookup_errors(x: torch.Tensor) -> torch.Tensor:
    y = x * REGISTRY.get("eager", 3.0) + REGISTRY.get("sdpa", 7.0)
    try:
        offset = {"a": 1.0}["b"]
    except KeyError as missing:
        offset = len(str(missing))
    try:
        try:
            y = y + [1.0][3]
        finally:
            y = y + 1
    except (IndexError, ValueError):
        y = y * 2
    return y + offset


def _reraises_what_its_handler_does_not_match(x: torch.Tensor) -> torch.Tensor:
    try:
        try:
            scale = {"a": 1.0}["b"]
        except ValueError:
            scale = -1.0
    except LookupError:
        scale = 4.0
    return x * scale


@pytest.mark.parametrize(
    "fn", [_reads_missing_attributes, _reads_missing_attributes_of_new_objects, _catches_lookup_errors, _reraises_what_its_handler_does_not_match]
)
def test_errors_eager_would_catch_capture_as_one_graph(fn):
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(fn)
    compare_with_eager(compiled, fn, torch.randn(3))
    assert backend.count == 1


# -- torch's global-state predicates ------------------------------------------------------------


def _branches_on_torch_modes(x: torch.Tensor) -> torch.Tensor:
    # torch.autograd.Function.apply's test; Bloom reaches it through its GeLU function.
    if torch._C._are_functorch_transforms_active() or torch._C._get_tracing_state() is not None:
        return x - 1
    return x + 1


def test_torch_mode_predicates_fold_into_one_graph():
    backend = CountingBackend()
    compiled = ptc_capture.optimize(backend, fullgraph=True)(_branches_on_torch_modes)
    compare_with_eager(compiled, _branches_on_torch_modes, torch.randn(3))
    assert backend.count == 1

