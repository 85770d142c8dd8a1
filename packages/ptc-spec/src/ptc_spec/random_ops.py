"""Random ops with explicit seeds, registered as ``torch.ops.ptc.*``.

core/1 has no op that reads a global generator: a graph draws one seed per call with
``ptc.seed`` and every random tensor is a pure function of ``(seed, offset)``. Backends
implement these with their own counter-based generators; the kernels here are the reference
(same distribution, not the same stream).
"""

from __future__ import annotations

import torch

_LIB = torch.library.Library("ptc", "DEF")
_SEEDED = (torch.Tag.nondeterministic_seeded,)

_LIB.define("seed(Device device) -> Tensor", tags=_SEEDED)
_LIB.define(
    "rand(Tensor seed, SymInt offset, SymInt[] size, *, ScalarType dtype, Device device) -> Tensor"
)
_LIB.define(
    "randn(Tensor seed, SymInt offset, SymInt[] size, *, ScalarType dtype, Device device) -> Tensor"
)

_SEED_LIMIT = 2**62


def _seed(device: torch.device) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty((), dtype=torch.int64, device="meta")
    generator_device = device if device.type != "cpu" else None
    return torch.randint(0, _SEED_LIMIT, (), dtype=torch.int64, device=generator_device)


def _generator(seed: torch.Tensor, offset: int, device: torch.device) -> torch.Generator:
    # Mixing (seed, offset) through a large odd multiplier keeps nearby offsets on unrelated
    # streams; the reference only needs determinism in (seed, offset), not speed.
    mixed = (int(seed.item()) * 0x9E3779B97F4A7C15 + offset) % (2**63)
    gen = torch.Generator(device=device)
    gen.manual_seed(mixed)
    return gen


def _sample(kind: str, seed: torch.Tensor, offset: int, size: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if device.type == "meta" or seed.is_meta:
        return torch.empty(size, dtype=dtype, device="meta")
    gen = _generator(seed, offset, device)
    draw = torch.rand if kind == "rand" else torch.randn
    return draw(size, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _rand(seed: torch.Tensor, offset: int, size: list[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return _sample("rand", seed, offset, size, dtype, device)


def _randn(seed: torch.Tensor, offset: int, size: list[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return _sample("randn", seed, offset, size, dtype, device)


_LIB.impl("seed", _seed, "CompositeExplicitAutograd")
_LIB.impl("rand", _rand, "CompositeExplicitAutograd")
_LIB.impl("randn", _randn, "CompositeExplicitAutograd")
