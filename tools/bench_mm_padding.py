"""Whether a matrix product with unaligned result rows pays for ptc's row padding, per dtype.

ptc computes a large product whose result rows are not 16-byte aligned (an LM head over a
50257-token vocabulary) into padded rows and copies the result out when the graph returns it.
This times, on the GPU, the plain product, the padded product, and the padded product plus the
copy into eager's layout, so that the padding rule in ptc_inductor.lowering.matmul rests on a
measurement per dtype.

    python tools/bench_mm_padding.py [--m 8192 --k 768 --n 50257]
"""

from __future__ import annotations

import argparse
from typing import Any


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--k", type=int, default=768)
    parser.add_argument("--n", type=int, default=50257)
    args = parser.parse_args()
    m, k, n = args.m, args.k, args.n
    print(f"device: {torch.cuda.get_device_name()}, tf32 matmul: {torch.backends.cuda.matmul.allow_tf32}")
    print("| dtype | plain ms | padded ms | padded + copy ms | padded+copy / plain |")
    print("| --- | --- | --- | --- | --- |")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        plain, padded, both = _times(m, k, n, dtype)
        print(f"| {str(dtype).removeprefix('torch.')} | {plain:.3f} | {padded:.3f} | {both:.3f} | {both / plain:.2f}x |")


def _times(m: int, k: int, n: int, dtype: Any) -> tuple[float, float, float]:
    """Median ms of the plain product, the padded one, and the padded one plus the copy out."""
    import torch
    from triton.testing import do_bench

    per_row = 16 // dtype.itemsize
    wide = -(-n // per_row) * per_row
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype)
    w_wide = torch.zeros(wide, k, device="cuda", dtype=dtype)
    w_wide[:n] = w
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    out_wide = torch.empty(m, wide, device="cuda", dtype=dtype)
    plain = do_bench(lambda: torch.mm(a, w.t(), out=out), return_mode="median")
    padded = do_bench(lambda: torch.mm(a, w_wide.t(), out=out_wide), return_mode="median")

    def padded_copy() -> None:
        torch.mm(a, w_wide.t(), out=out_wide)
        out.copy_(out_wide[:, :n])

    both = do_bench(padded_copy, return_mode="median")
    ref = a.double() @ w.double().t()
    err = float((out_wide[:, :n].double() - ref).norm() / ref.norm())
    assert err < 3e-2, err
    return plain, padded, both

if __name__ == "__main__":
    main()
