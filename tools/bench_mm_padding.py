"""Whether a matrix product with unaligned result rows pays for ptc's row padding, per dtype.

ptc computes a large product whose result rows are not 16-byte aligned (an LM head over a
50257-token vocabulary) into padded rows and copies the result out when the graph returns it.
This times, on the GPU, the plain product, the padded product, and the padded product plus the
copy into eager's layout, so that the padding rule in ptc_inductor.lowering.matmul rests on a
measurement per dtype.

    python tools/bench_mm_padding.py [--m 8192 --k 768 --n 50257]

A second table times the products of the head's backward from its padded gradient G (m x
wide): the weight's gradient G[:, :n]^T @ x with n result rows, or with the padded rows'
``wide`` and the extra rows sliced off, and the input's gradient G @ W padded to ``wide``.
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
    print()
    print("| dtype | weight grad, n rows ms | weight grad, wide rows ms | input grad ms |")
    print("| --- | --- | --- | --- |")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        rows, wide_rows, input_grad = _backward_times(m, k, n, dtype)
        print(f"| {str(dtype).removeprefix('torch.')} | {rows:.3f} | {wide_rows:.3f} | {input_grad:.3f} |")


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


def _backward_times(m: int, k: int, n: int, dtype: Any) -> tuple[float, float, float]:
    """Median ms of the head's weight gradient over n or wide result rows, and of its input gradient."""
    import torch
    from triton.testing import do_bench

    per_row = 16 // dtype.itemsize
    wide = -(-n // per_row) * per_row
    grad = torch.randn(m, wide, device="cuda", dtype=dtype)
    grad[:, n:] = 0
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w_wide = torch.randn(wide, k, device="cuda", dtype=dtype)
    rows = do_bench(lambda: torch.mm(grad[:, :n].t(), x), return_mode="median")
    wide_rows = do_bench(lambda: torch.mm(grad.t(), x)[:n], return_mode="median")
    input_grad = do_bench(lambda: torch.mm(grad, w_wide), return_mode="median")
    ref = grad[:, :n].double().t() @ x.double()
    err = float((torch.mm(grad.t(), x)[:n].double() - ref).norm() / ref.norm())
    assert err < 3e-2, err
    return rows, wide_rows, input_grad


if __name__ == "__main__":
    main()
