"""Launch configurations of Triton kernels: the heuristic choice from the problem size, and
the candidate sets autotuning benchmarks (small by default, wider under max-autotune)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_XBLOCK_FLAT = 4096
"""No flat kernel is launched with a larger XBLOCK, so xnumel % MAX_XBLOCK_FLAT == 0 drops the mask."""
MAX_XBLOCK_INNER = 2048
"""The same bound for kernels with 2D tiles."""
MAX_RBLOCK = 4096
"""The same bound for the RBLOCK of looped kernels."""
AUTOTUNE_MIN_WORK = 1 << 22
"""Kernels touching fewer points than this keep the heuristic config: tuning them cannot pay off."""


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """Block sizes (constexprs) and launch options of one kernel launch."""

    xblock: int
    rblock: int
    num_warps: int
    num_stages: int = 1

    def key(self) -> str:
        """A stable text form, for caches and logs."""
        return f"x{self.xblock}_r{self.rblock}_w{self.num_warps}_s{self.num_stages}"


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def persistent_limit(itemsize: int, strided: bool = False) -> int:
    """The longest inner range kept whole in one tile (registers hold it as float32 or wider).

    A strided reduction (a column sum) is kept whole only when short: a one-row-per-program
    tile would read it uncoalesced, so long ones loop over tall ``[XBLOCK, RBLOCK]`` tiles.
    """
    if strided:
        return 256
    return 4096 if itemsize >= 8 else 8192


ROWLOOP_TILE = 4096
"""Elements a row loop's tile holds. Its programs are few (one per chunk of rows), and with one
short row per step each waits on that row's loads and sums in turn: GPT-2's layer norm
backwards (768 features, 256 chunks of 32 rows) took 80-97 us per kernel on an H200 at one row
per step, 42-52 us at four (2048- and 8192-element tiles did no better)."""


def rowloop_rows(rblock: int, chunk: int) -> int:
    """Rows a row loop takes per step: as many as fill ROWLOOP_TILE, a power of two dividing
    ``chunk`` so that every step is whole."""
    rows = max(1, ROWLOOP_TILE // max(rblock, 1))
    while chunk % rows:
        rows //= 2
    return rows


def _warps_for(tile: int) -> int:
    """Warps for a tile of ``tile`` elements: about 4 to 16 elements per thread."""
    return max(1, min(16, next_pow2(tile) // 512))


def default_config(style: str, xnumel: int, rnumel: int, rblock: int, strided: bool = False, rows: int = 1) -> LaunchConfig:
    """The heuristic launch config of a kernel of ``style`` over ``xnumel`` x ``rnumel`` points
    (``rows``: the rows a row loop's tile holds)."""
    if style == "flat":
        xblock = min(1024, next_pow2(xnumel))
        return LaunchConfig(xblock, 1, max(1, min(4, xblock // 128)))
    if style == "rowloop":
        # XBLOCK counts chunks of rows per program; the tile is ``rows`` rows.
        return LaunchConfig(1, rblock, max(2, _warps_for(rows * rblock)))
    if style == "persistent":
        xblock = 1 if rblock >= 1024 else min(next_pow2(xnumel), 1024 // rblock, MAX_XBLOCK_INNER)
        return LaunchConfig(xblock, rblock, max(2 if rblock >= 1024 else 1, _warps_for(xblock * rblock)))
    if strided:
        # Neighbouring outer points are neighbours in memory: many of them per tile coalesce.
        return LaunchConfig(min(32, next_pow2(xnumel)), min(128, next_pow2(rnumel)), 8)
    rb = min(2048, next_pow2(rnumel))
    return LaunchConfig(1, rb, max(2, min(8, rb // 256)))


def candidate_configs(style: str, xnumel: int, rnumel: int, rblock: int, mode: str, strided: bool = False, rows: int = 1) -> list[LaunchConfig]:
    """Configs to benchmark at first call (the heuristic one first); one config when not worth tuning."""
    base = default_config(style, xnumel, rnumel, rblock, strided, rows)
    work = xnumel * max(rnumel, 1)
    if mode == "none" or work < AUTOTUNE_MIN_WORK:
        return [base]
    wide = mode == "max-autotune"
    out = [base]
    if style == "flat":
        blocks = (512, 1024, 2048, 4096) if wide else (1024, 2048)
        warps = (2, 4, 8, 16) if wide else (4, 8)
        for xb in blocks:
            for w in warps:
                if xb // (w * 32) in (2, 4, 8, 16) or (wide and xb // (w * 32) >= 1):
                    out.append(LaunchConfig(min(xb, MAX_XBLOCK_FLAT), 1, w))
    elif style == "rowloop":
        # Fewer, longer programs trade parallelism for fewer partial stores.
        for chunks in (1, 2, 4) if wide else (1, 2):
            for w in sorted({base.num_warps, min(16, base.num_warps * 2)}):
                if chunks <= xnumel:
                    out.append(LaunchConfig(chunks, rblock, w))
    elif style == "persistent":
        xblocks = {base.xblock, max(1, base.xblock // 2), min(MAX_XBLOCK_INNER, base.xblock * 2)}
        warp_set = {base.num_warps, min(32, base.num_warps * 2)}
        if wide:
            warp_set.add(max(1, base.num_warps // 2))
        for xb in sorted(xblocks):
            if xb > next_pow2(xnumel):
                continue
            for w in sorted(warp_set):
                out.append(LaunchConfig(xb, rblock, w))
    elif strided:
        tiles = ((16, 256), (64, 64), (32, 64), (128, 32)) + (((8, 512), (64, 128), (32, 256)) if wide else ())
        for xb, rb in tiles:
            if xb <= next_pow2(xnumel) and rb <= next_pow2(rnumel):
                out.append(LaunchConfig(xb, rb, 8 if xb * rb >= 4096 else 4))
    else:
        rblocks = (1024, 2048, 4096) if wide else (1024, 2048)
        stages = (1, 2, 3) if wide else (1,)
        for rb in rblocks:
            if rb > next_pow2(rnumel):
                continue
            for s in stages:
                out.append(LaunchConfig(1, rb, max(2, min(16, rb // 256)), s))
                if wide:
                    out.append(LaunchConfig(1, rb, max(2, min(16, rb // 128)), s))
    return list(dict.fromkeys(out))
