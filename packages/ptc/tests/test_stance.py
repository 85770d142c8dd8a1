"""ptc.set_stance over the whole pipeline: results equal eager's, and what compiles when."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import ptc
from ptc.pipeline import STATS
from ptc_spec.testing import compare_with_eager

BACKENDS = ["aot_eager", "inductor"]


def _f(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x * 3) - x.sum()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    STATS.reset()
    yield
    ptc.set_stance("default")


@pytest.mark.parametrize("backend", BACKENDS)
def test_force_eager_compiles_nothing(backend: str) -> None:
    compiled = ptc.compile(_f, backend=backend, dynamic=False)
    with ptc.set_stance("force_eager"):
        compare_with_eager(compiled, _f, torch.randn(4, 3))
    assert STATS.graphs == 0
    compare_with_eager(compiled, _f, torch.randn(4, 3))
    assert STATS.graphs == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_on_recompile_runs_new_sizes_eagerly(backend: str) -> None:
    compiled = ptc.compile(_f, backend=backend, dynamic=False)
    compare_with_eager(compiled, _f, torch.randn(4, 3))

    @ptc.set_stance("eager_on_recompile")
    def run(x: torch.Tensor) -> None:
        compare_with_eager(compiled, _f, x)

    for shape in ((5, 3), (4, 3), (2, 7)):
        run(torch.randn(shape))
    assert STATS.graphs == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_fail_on_recompile_raises_with_the_failed_guard(backend: str) -> None:
    compiled = ptc.compile(_f, backend=backend, dynamic=False)
    with ptc.set_stance("fail_on_recompile"):
        compare_with_eager(compiled, _f, torch.randn(8, 3))
        with pytest.raises(
            Exception, match=r"_f \(.*test_stance.py:\d+\) would recompile .*size of x dim 0 changed 8 -> 16"
        ) as info:
            compiled(torch.randn(16, 3))
    assert type(info.value).__name__ == "RecompileError"
    assert STATS.graphs == 1
