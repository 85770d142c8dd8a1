"""The C++ prelude's own math: float exp accuracy at the edges, and that its loops vectorize."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import check, trace_core

import ptc_inductor
from ptc_inductor.codegen.cpp_prelude import PRELUDE

aten = torch.ops.aten


def _exp_inputs() -> torch.Tensor:
    """[-120, 100] densely (subnormal results, overflow), the edges exactly, and the specials."""
    edges = [-103.972084, -103.278931, -87.336548, -87.3, 88.7228, 88.7229, 0.0, -0.0, 1e-30, -1e-30]
    specials = [float("-inf"), float("inf"), float("nan"), -1e9, 1e9]
    return torch.cat([torch.linspace(-120.0, 100.0, 200_001), torch.tensor(edges + specials)])


def _ulps(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual - expected| in units of the last place of ``expected`` (float32, subnormals included)."""
    mag = expected.double().abs().clamp_min(2.0**-126)
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - 23)
    return (actual.double() - expected.double()).abs() / ulp


@pytest.mark.parametrize(("op", "max_ulp"), [(aten.exp.default, 1.0), (aten.sigmoid.default, 2.0)])
def test_float_exp_is_within_an_ulp_with_eagers_zeros_infs_and_nans(op: torch._ops.OpOverload, max_ulp: float) -> None:
    # Measured against float64 (eager's float32 is itself up to an ulp off); sigmoid adds the
    # roundings of 1 + e and 1 / (...).
    x = _exp_inputs()
    out = ptc_inductor.compile(trace_core(op, x))(x)
    actual = out[0] if isinstance(out, (tuple, list)) else out
    eager, exact = op(x), op(x.double())
    assert torch.equal(actual.isnan(), eager.isnan())
    assert torch.equal(actual == 0, eager == 0)
    assert torch.equal(actual.isinf(), eager.isinf())
    finite = eager.isfinite() & (eager != 0)
    assert _ulps(actual[finite], exact[finite].float()).max().item() <= max_ulp
    assert _ulps(actual[finite], eager[finite]).max().item() <= 2 * max_ulp


def test_double_exp_still_matches_eager() -> None:
    check(aten.exp.default, torch.linspace(-800.0, 800.0, 4001, dtype=torch.float64))


def test_float_exp_loop_vectorizes_without_calls(tmp_path: Path) -> None:
    # glibc's vector expf is a call (and scalar for lanes below ln(FLT_MIN)); ours must inline.
    config = ptc_inductor.config_from_env()
    src = tmp_path / "exp.cpp"
    src.write_text(PRELUDE + """
extern "C" void exp_loop(const float* __restrict__ x, float* __restrict__ y, long n) {
  #pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = ptc_exp(x[i]);
}
""")
    flags = [f for f in config.cxx_flags if f != "-shared"]
    asm = tmp_path / "exp.s"
    subprocess.run([config.cxx, "-std=c++17", *flags, "-S", str(src), "-o", str(asm)], check=True)
    text = asm.read_text()
    body = text[text.index("exp_loop:") :]
    body = body[: body.index(".cfi_endproc")]
    assert "call" not in body
    assert re.search(r"\b(vfmadd\w*ps|mulps|vmulps)\b.*%[xyz]mm", body)
