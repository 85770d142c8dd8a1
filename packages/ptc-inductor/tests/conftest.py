"""Shared test setup: a per-session compile cache, and the compile-and-compare helper."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
import torch

import ptc_inductor
import ptc_spec
from ptc_spec import TensorMeta
from ptc_spec.testing import compare_with_eager

_CACHE = tempfile.mkdtemp(prefix="ptc_inductor_test_cache_")
os.environ["PTC_INDUCTOR_CACHE_DIR"] = _CACHE


@pytest.fixture(scope="session")
def cache_dir() -> str:
    """The compile cache all tests of this session share."""
    return _CACHE


def trace_core(fn: Callable[..., Any], *inputs: Any) -> torch.fx.GraphModule:
    """A core/1 graph of ``fn`` (written with core ops only), traced on ``inputs``' exact layouts."""
    metas = [TensorMeta.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    return ptc_spec.trace(fn, *metas, dialect="core/1")


def check(
    fn: Callable[..., Any],
    *inputs: Any,
    check_stride: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
) -> ptc_inductor.CompiledGraph:
    """Compile ``fn`` and compare it with eager on ``inputs``; return the compiled graph."""
    gm = trace_core(fn, *inputs)
    compiled = ptc_inductor.compile(gm)
    actual = compare_with_eager(compiled, fn, *inputs, rtol=rtol, atol=atol)
    if check_stride:
        assert_meta_strides(gm, actual)
    return compiled


def assert_meta_strides(gm: torch.fx.GraphModule, actual: Any) -> None:
    """Assert every tensor output has the strides its graph metadata records (eager's layout)."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    items = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else [out_node.args[0]]
    values = actual if isinstance(actual, (tuple, list)) else [actual]
    for i, (node, value) in enumerate(zip(items, values)):
        meta = node.meta.get(ptc_spec.META_KEY) if isinstance(node, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and meta is not None and value.numel() > 1:
            want = tuple(int(s) for s in meta.stride)
            assert value.stride() == want, f"output[{i}]: stride {value.stride()}, metadata says {want}"
