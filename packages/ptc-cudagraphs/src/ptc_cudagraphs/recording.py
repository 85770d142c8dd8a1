"""What the bookkeeping needs from a recording, and output aliasing shared by implementations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

FlatFn = Callable[..., list[object]]


class Recording(Protocol):
    """One recorded graph: replays it over new arguments."""

    @property
    def nbytes(self) -> int:
        """Bytes of the outputs the recording keeps pinned in the pool."""
        ...

    @property
    def input_bytes(self) -> int:
        """Bytes of the buffers that copied inputs are written into before each replay."""
        ...

    @property
    def pool_bytes(self) -> int:
        """Bytes the pool grew by while this graph was recorded."""
        ...

    @property
    def static_outputs(self) -> list[object]:
        """The flat outputs as recorded (the memory every replay writes)."""
        ...

    @property
    def owned(self) -> tuple[bool, ...]:
        """Per flat output: True when it lives in the pool (False: it aliases an input)."""
        ...

    @property
    def graph_args(self) -> list[object]:
        """The arguments the graph reads: the call's, copied ones replaced by buffers."""
        ...

    def replay(self, args: Sequence[object]) -> list[object]:
        """Copy non-static args in, run the graph, return the flat outputs."""
        ...

    def launch(self) -> None:
        """Run the graph over its buffers as they are (no copies, no version-counter bumps)."""
        ...


class Recorder(Protocol):
    """Creates recordings for one device."""

    device: object

    def warmup(self, fn: FlatFn, args: Sequence[object]) -> tuple[list[object], str | None]:
        """Run fn eagerly (e.g. on a side stream); return its outputs and why it cannot be
        recorded (a CPU sync seen during the run), or None."""
        ...

    def record(
        self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...], grad: bool
    ) -> Recording:
        """Record fn over args; raise CaptureError when it cannot be recorded."""
        ...

    def reset(self) -> None:
        """Forget the memory pool so that it can be freed once its graphs are gone."""
        ...

    def release_cached(self) -> None:
        """Give the device's cached memory that no tensor uses back to the driver."""
        ...


def input_aliases(
    outputs: Sequence[object], buffers: dict[int, torch.Tensor]
) -> dict[int, int]:
    """Map each output position that shares storage with a copied-input buffer to that input."""
    by_storage = {buf.untyped_storage().data_ptr(): i for i, buf in buffers.items()}
    aliases: dict[int, int] = {}
    for pos, out in enumerate(outputs):
        if isinstance(out, torch.Tensor):
            hit = by_storage.get(out.untyped_storage().data_ptr())
            if hit is not None:
                aliases[pos] = hit
    return aliases


def view_of_input(out: torch.Tensor, buffer: torch.Tensor, user: torch.Tensor) -> torch.Tensor:
    """Return the view of the user's input that matches out's view of the recorded buffer."""
    # The buffer has the user's shape and strides; only the storage offset can differ.
    offset = out.storage_offset() - buffer.storage_offset() + user.storage_offset()
    return user.as_strided(out.shape, out.stride(), offset)
