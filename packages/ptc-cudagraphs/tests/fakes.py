"""Plain-Python stand-ins for CUDA recordings, so the bookkeeping runs on any machine."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ptc_cudagraphs.errors import CaptureError
from ptc_cudagraphs.recording import FlatFn, input_aliases, view_of_input

CAPTURING = {"on": False}


class FakeRecording:
    """Runs fn over its own input buffers and writes results into persistent outputs."""

    def __init__(self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...]) -> None:
        self.fn = fn
        self.buffers = {i: args[i].clone() for i in copied}  # type: ignore[union-attr]
        self.graph_args = [self.buffers.get(i, a) for i, a in enumerate(args)]
        outs = fn(*self.graph_args)
        self.aliases = input_aliases(outs, self.buffers)
        self.static_outputs = [
            o if i in self.aliases or not isinstance(o, torch.Tensor) else o.clone()
            for i, o in enumerate(outs)
        ]
        self.owned = tuple(isinstance(o, torch.Tensor) and i not in self.aliases
                           for i, o in enumerate(outs))
        self.nbytes = sum(o.untyped_storage().nbytes() for o, own in
                          zip(self.static_outputs, self.owned) if own)  # type: ignore[union-attr]
        self.pool_bytes = self.nbytes
        self.input_bytes = sum(b.untyped_storage().nbytes() for b in self.buffers.values())
        self.copies = 0
        self.replays = 0

    def launch(self) -> None:
        self.launches = getattr(self, "launches", 0) + 1

    def replay(self, args: Sequence[object]) -> list[object]:
        for i, buf in self.buffers.items():
            buf.copy_(args[i])  # type: ignore[arg-type]
            self.copies += 1
        fresh = self.fn(*self.graph_args)
        self.replays += 1
        outs = list(self.static_outputs)
        for i, (static, new) in enumerate(zip(self.static_outputs, fresh)):
            if i in self.aliases:
                outs[i] = view_of_input(new, self.buffers[self.aliases[i]], args[self.aliases[i]])
            elif self.owned[i]:
                static.copy_(new)  # type: ignore[union-attr]
        return outs


class FakeRecorder:
    """Recorder for tensors of `device`; record() fails if fn raises while CAPTURING."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.recordings: list[FakeRecording] = []
        self.resets = 0
        self.releases = 0

    def warmup(self, fn: FlatFn, args: Sequence[object]) -> tuple[list[object], str | None]:
        return fn(*args), None

    def record(self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...],
               grad: bool) -> FakeRecording:
        CAPTURING["on"] = True
        try:
            rec = FakeRecording(fn, args, copied)
        except RuntimeError as exc:
            raise CaptureError(str(exc)) from exc
        finally:
            CAPTURING["on"] = False
        self.recordings.append(rec)
        return rec

    def reset(self) -> None:
        self.resets += 1

    def release_cached(self) -> None:
        self.releases += 1


class FrozenRecording:
    """Like a CUDA graph captured with autograd on, except that replays recompute nothing:
    outputs keep their recorded values. Enough to drive the training bookkeeping on a CPU,
    where eager autograd over replayed buffers would trip on version counters just as it
    would over a real graph."""

    def __init__(self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...], grad: bool) -> None:
        self.buffers: dict[int, torch.Tensor] = {}
        for i in copied:
            arg = args[i]
            assert isinstance(arg, torch.Tensor)
            self.buffers[i] = arg.detach().clone().requires_grad_(grad and arg.requires_grad)
        self.graph_args = [self.buffers.get(i, a) for i, a in enumerate(args)]
        with torch.enable_grad() if grad else torch.no_grad():
            self.static_outputs = fn(*self.graph_args)
        self.owned = tuple(isinstance(o, torch.Tensor) for o in self.static_outputs)
        self.nbytes = self.pool_bytes = self.input_bytes = 0
        self.launches = 0

    def launch(self) -> None:
        self.launches += 1

    def replay(self, args: Sequence[object]) -> list[object]:
        with torch.no_grad():
            for i, buf in self.buffers.items():
                buf.copy_(args[i])  # type: ignore[arg-type]
        return self.static_outputs


class FrozenRecorder(FakeRecorder):
    def record(self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...],
               grad: bool) -> FrozenRecording:  # type: ignore[override]
        rec = FrozenRecording(fn, args, copied, grad)
        self.recordings.append(rec)  # type: ignore[arg-type]
        return rec
