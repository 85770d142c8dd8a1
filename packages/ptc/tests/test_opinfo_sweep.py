"""Every OpInfo op that eager runs compiles with ptc.compile(fullgraph=True, backend="inductor")
and returns what eager returns, except the ops listed in opinfo_known_failures.txt.

The listed ops are strict expected failures: one that starts to pass fails its test until it is
removed from the list, and one listed as an error that now runs and differs from eager fails too,
so the list only shrinks and never hides a silently wrong result. The rules (which samples, what
is compared, random ops) are in opinfo_check.py, shared with tools/opinfo_sweep.py.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
from opinfo_check import KNOWN_FAILURES, Compiler, check_op, op_id, read_known_failures, section_name, select_ops

import ptc

PTC = Compiler("ptc", lambda fn: ptc.compile(fn, fullgraph=True, backend="inductor"), ptc.reset)
KNOWN = read_known_failures()
DEFAULT_OPS = select_ops("cpu", torch.float32)
# The slow sweep: three samples per op, in float32 and in the low-precision dtypes the op supports.
SLOW_CASES = [(dtype, op) for dtype in ("float32", "bfloat16", "float16")
              for op in select_ops("cpu", getattr(torch, dtype))]

# op_db holds hundreds of thousands of Python objects; ptc.reset() runs gc.collect(), which would
# walk them all (about 0.2 s) for every test. Frozen objects are left out of collections.
gc.freeze()


def _check(op: Any, dtype: str, count: int) -> None:
    section = section_name("cpu", dtype, count)
    if section not in KNOWN:
        pytest.skip(f"{KNOWN_FAILURES.name} has no [{section}] section: generate it with "
                    f"tools/opinfo_sweep.py --ptc-only --dtype {dtype} --samples {count} --write-known-failures")
    name = op_id(op)
    verdict = check_op(op, "cpu", getattr(torch, dtype), PTC, count)
    known = KNOWN[section].get(name)
    if verdict.status == "skipped":
        pytest.skip(verdict.detail)
    if known is None:
        assert verdict.status == "pass", f"{name}: {verdict.category}: {verdict.detail}"
        return
    if verdict.status == "pass":
        pytest.fail(f"{name} now passes: delete its line from [{section}] in {KNOWN_FAILURES.name}")
    if verdict.status == "wrong" and not known.startswith("wrong"):
        pytest.fail(f"{name} was listed as '{known}' and now runs but differs from eager: {verdict.detail}")
    pytest.xfail(f"known failure ({known}): {verdict.detail}")


@pytest.mark.parametrize("op", DEFAULT_OPS, ids=op_id)
def test_opinfo_sample_matches_eager(op: Any) -> None:
    _check(op, "float32", 1)


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "op"), SLOW_CASES, ids=[f"{d}-{op_id(op)}" for d, op in SLOW_CASES])
def test_opinfo_samples_match_eager_in_every_dtype(dtype: str, op: Any) -> None:
    _check(op, dtype, 3)


def _stand_in(name: str, wrap: Any) -> Compiler:
    """A fake compiler that runs the function eagerly through ``wrap`` (to test the sweep itself)."""
    return Compiler(name, lambda fn: lambda *args: wrap(fn, *args), lambda: None)


def _fails(exc: Exception) -> Any:
    def run(fn: Any, *args: Any) -> Any:
        raise exc

    return run


OPS_BY_ID = {op_id(op): op for op in DEFAULT_OPS}
SWEEP_CHECKS = [
    ("abs", _stand_in("exact", lambda fn, *a: fn(*a)), "pass"),
    ("abs", _stand_in("off by a little", lambda fn, *a: fn(*a) * 1.001), "wrong: values"),
    ("abs", _stand_in("transposed layout", lambda fn, *a: fn(*a).t().contiguous().t()), "wrong: stride"),
    ("abs", _stand_in("mutates its input", lambda fn, *a: fn(*a) + 0 * a[0].add_(1)), "wrong: values"),
    ("mm", _stand_in("float64 result", lambda fn, *a: fn(*a).double()), "wrong: dtype"),
    ("mm", _stand_in("raises", _fails(NotImplementedError("no kernel"))), "error: NotImplementedError"),
    # bernoulli is random: another seed gives other values, and that is not wrong ...
    ("bernoulli", _stand_in("other seed", lambda fn, *a: (torch.manual_seed(7), fn(*a))[1]), "pass"),
    # ... but its shape still has to match.
    ("bernoulli", _stand_in("wrong shape", lambda fn, *a: fn(*a)[:1]), "wrong: shape"),
]


@pytest.mark.parametrize(("name", "compiler", "category"), SWEEP_CHECKS,
                         ids=[f"{name}-{c.name}" for name, c, _ in SWEEP_CHECKS])
def test_sweep_tells_wrong_results_from_errors_and_passes(name: str, compiler: Compiler, category: str) -> None:
    assert check_op(OPS_BY_ID[name], "cpu", torch.float32, compiler).category == category
