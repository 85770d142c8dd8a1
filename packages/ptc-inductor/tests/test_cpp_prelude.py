"""The C++ prelude's own math: float exp accuracy at the edges, and that its loops vectorize."""

from __future__ import annotations

import platform
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


@pytest.mark.parametrize("first", [4.0, -32.0])
def test_float_exp_is_within_an_ulp_of_exact_on_every_float_of_a_binade(first: float) -> None:
    # Every float with |x| in [|first|, 2|first|): the worst inputs are about 1 in 30,000, which a
    # linspace steps over. Adding 1 + r + r^2*P up in three roundings reached 1.01 and 1.02 ulp here.
    start = int(torch.tensor(abs(first)).view(torch.int32))
    x = torch.arange(start, start + 2**23, dtype=torch.int32).view(torch.float32) * (1.0 if first > 0 else -1.0)
    actual = ptc_inductor.compile(trace_core(aten.exp.default, x))(x)
    actual = actual[0] if isinstance(actual, (tuple, list)) else actual
    assert _ulps(actual, torch.exp(x.double())).max().item() < 1.0


def test_max_and_min_propagate_nan_and_keep_infs_like_eager() -> None:
    # Rows of 40 run vectorized lanes and a scalar tail; NaN first, inside, last and everywhere.
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    y = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    x[1, 0] = x[2, 17] = x[3, 39] = float("nan")
    x[4, :] = float("nan")
    x[5, 3], x[5, 4] = float("inf"), float("-inf")
    y[0, 5] = y[1, 0] = float("nan")

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.amax.default(x, [-1]),
            aten.amin.default(x, [-1]),
            aten.amax.default(x, [0]),
            aten.amin.default(x, [0, 1]),
            aten.maximum.default(x, y),
            aten.minimum.default(y, x),
            aten.clamp.default(x, -1.0, 1.0),
        )

    check(fn, x, y)


def test_double_exp_still_matches_eager() -> None:
    check(aten.exp.default, torch.linspace(-800.0, 800.0, 4001, dtype=torch.float64))


# native: this machine's CPU; x86-64-v3: AVX2 without AVX-512's mask registers, where a float
# select vectorizes only if the flags let gcc if-convert it (CI machines without AVX-512).
_TARGETS = ["native"] + (["x86-64-v3"] if platform.machine() == "x86_64" else [])


@pytest.mark.parametrize("march", _TARGETS)
def test_float_exp_loop_vectorizes_without_calls(tmp_path: Path, march: str) -> None:
    # glibc's vector expf is a call (and scalar for lanes below ln(FLT_MIN)); ours must inline.
    config = ptc_inductor.config_from_env()
    src = tmp_path / "exp.cpp"
    src.write_text(PRELUDE + """
extern "C" void exp_loop(const float* __restrict__ x, float* __restrict__ y, long n) {
  #pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = ptc_exp(x[i]);
}
""")
    flags = [f if not f.startswith("-march=") else f"-march={march}" for f in config.cxx_flags if f != "-shared"]
    asm = tmp_path / "exp.s"
    subprocess.run([config.cxx, "-std=c++17", *flags, "-S", str(src), "-o", str(asm)], check=True)
    text = asm.read_text()
    body = text[text.index("exp_loop:") :]
    body = body[: body.index(".cfi_endproc")]
    assert "call" not in body
    assert re.search(r"\b(vfmadd\w*ps|mulps|vmulps)\b.*%[xyz]mm", body)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32])
def test_signbit_of_every_dtype_compiles_and_matches_eager(dtype: torch.dtype) -> None:
    # std::signbit over a converted bf16/half value made gcc 12 crash vectorizing the loop.
    if dtype.is_floating_point:
        x = torch.tensor([-0.0, 0.0, -1.5, 2.0, float("-inf"), float("inf"), float("nan"), -float("nan")]).to(dtype)
    else:
        x = torch.tensor([-3, 0, 4, -1], dtype=dtype)
    check(aten.signbit.default, x.repeat(40))
