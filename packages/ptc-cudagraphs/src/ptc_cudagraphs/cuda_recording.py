"""Recordings as torch.cuda.CUDAGraph objects sharing one private memory pool per device."""

from __future__ import annotations

import gc
import logging
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from ptc_cudagraphs.errors import CaptureError
from ptc_cudagraphs.recording import FlatFn, input_aliases, view_of_input

log = logging.getLogger("ptc.cudagraphs")

# torch's sync debug mode warns with the first text on each synchronising call, and once per
# process with the second when the mode is switched on.
_SYNC_WARNING = "called a synchronizing"
_SYNC_MODE_NOTICE = "Synchronization debug mode is a prototype"


class CudaRecording:
    """One captured graph, its input buffers and its pinned outputs."""

    def __init__(
        self,
        graph: torch.cuda.CUDAGraph,
        buffers: dict[int, torch.Tensor],
        graph_args: list[object],
        outputs: list[object],
        pool_bytes: int,
    ) -> None:
        self._graph = graph
        self._copies = tuple(buffers.items())
        self._leaf_buffers = any(buf.requires_grad for buf in buffers.values())
        self._aliases = tuple(input_aliases(outputs, buffers).items())
        self._buffers = buffers
        self._graph_args = graph_args
        self._outputs = outputs
        aliased = {pos for pos, _ in self._aliases}
        self._owned = tuple(
            isinstance(out, torch.Tensor) and pos not in aliased for pos, out in enumerate(outputs)
        )
        self._nbytes = sum(
            out.untyped_storage().nbytes()
            for out, own in zip(outputs, self._owned, strict=True)
            if own and isinstance(out, torch.Tensor)
        )
        self._pool_bytes = pool_bytes
        self._input_bytes = sum(buf.untyped_storage().nbytes() for buf in buffers.values())
        # Input copies made by replays; tests use it to prove static inputs are not copied.
        self.copies = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the outputs the recording keeps pinned in the pool."""
        return self._nbytes

    @property
    def input_bytes(self) -> int:
        """Bytes of the buffers that copied inputs are written into before each replay."""
        return self._input_bytes

    @property
    def pool_bytes(self) -> int:
        """Bytes the pool reserved while this graph was recorded."""
        return self._pool_bytes

    @property
    def static_outputs(self) -> list[object]:
        """The flat outputs as recorded (the memory every replay writes)."""
        return self._outputs

    @property
    def graph_args(self) -> list[object]:
        """The arguments the graph reads: the call's, copied ones replaced by buffers."""
        return self._graph_args

    def launch(self) -> None:
        """Run the graph over its buffers as they are."""
        self._graph.replay()

    @property
    def owned(self) -> tuple[bool, ...]:
        """Per flat output: True when it lives in the pool."""
        return self._owned

    def _copy_in(self, args: Sequence[object]) -> None:
        for pos, buf in self._copies:
            buf.copy_(args[pos])  # type: ignore[arg-type]
        self.copies += len(self._copies)

    def replay(self, args: Sequence[object]) -> list[object]:
        """Copy non-static args into the buffers, replay, return the flat outputs."""
        if self._leaf_buffers:
            # Buffers of inputs that require grad are leaves that require grad, which autograd
            # refuses to overwrite in place unless it is told the copy is not differentiated.
            with torch.no_grad():
                self._copy_in(args)
        else:
            self._copy_in(args)
        self._graph.replay()
        if not self._aliases:
            return self._outputs
        outs = list(self._outputs)
        for pos, arg in self._aliases:
            user = args[arg]
            assert isinstance(user, torch.Tensor)
            out = outs[pos]
            assert isinstance(out, torch.Tensor)
            outs[pos] = view_of_input(out, self._buffers[arg], user)
        return outs


class CudaRecorder:
    """Warm-up on a side stream and capture into the device's one pool."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool: Any = None
        self._recordings: weakref.WeakSet[CudaRecording] = weakref.WeakSet()
        # One side stream for warm-up and every capture: autograd runs a backward op on its
        # forward op's stream, so forward and backward captures must share it.
        self._capture = torch.cuda.Stream(device)
        self._side = self._capture

    def warmup(self, fn: FlatFn, args: Sequence[object]) -> tuple[list[object], str | None]:
        """Run fn eagerly on a side stream (lazy initialisation stays off the graph); return
        its outputs and the first CPU synchronisation it made, if any."""
        main = torch.cuda.current_stream(self.device)
        self._side.wait_stream(main)
        previous = torch.cuda.get_sync_debug_mode()
        # A synchronising call (.item(), data-dependent shapes) would break the capture; seeing
        # it here avoids attempting one, since a failed capture can leave allocator state behind.
        with warnings.catch_warnings(record=True) as caught, torch.cuda.stream(self._side):
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                outputs = fn(*args)
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        main.wait_stream(self._side)
        sync: str | None = None
        for seen in caught:
            text = str(seen.message)
            if _SYNC_WARNING in text:
                sync = sync or text.splitlines()[0]
            elif _SYNC_MODE_NOTICE not in text:  # emitted by our own set_sync_debug_mode call
                warnings.warn_explicit(seen.message, seen.category, seen.filename, seen.lineno)
        return outputs, sync

    def record(
        self, fn: FlatFn, args: Sequence[object], copied: tuple[int, ...], grad: bool
    ) -> CudaRecording:
        """Capture fn over static buffers for the copied args; CaptureError when it cannot."""
        if self._pool is None or not self._recordings:
            # The allocator drops a pool once no graph uses it, and refuses to capture into a
            # dropped pool's id: a pool whose recordings all died is replaced, not reused.
            self._pool = torch.cuda.graph_pool_handle()
        buffers: dict[int, torch.Tensor] = {}
        graph_args = list(args)
        for pos in copied:
            user = args[pos]
            assert isinstance(user, torch.Tensor)
            buf = torch.empty_strided(user.shape, user.stride(), dtype=user.dtype, device=user.device)
            # Detached: a differentiable copy would hang the buffer under a copy node of the
            # caller's stream, and the backward capture would then make that (legacy default)
            # stream wait on the capturing one, which CUDA refuses.
            buf.copy_(user.detach())
            if grad and user.requires_grad:
                buf.requires_grad_(True)
            buffers[pos] = buf
            graph_args[pos] = buf
        graph = torch.cuda.CUDAGraph()
        # Pending work (the warm-up) must not become part of the capture.
        torch.cuda.synchronize(self.device)
        _release_blas_workspaces()
        reserved = torch.cuda.memory_reserved(self.device)
        try:
            outputs = self._capture_into(graph, fn, graph_args, grad)
        except Exception as exc:
            _settle(self.device)
            _end_generator_capture(self._capture, self.device)
            raise CaptureError(f"capture failed: {exc}") from exc
        finally:
            _release_blas_workspaces()
        grown = torch.cuda.memory_reserved(self.device) - reserved
        recording = CudaRecording(graph, buffers, graph_args, outputs, max(grown, 0))
        self._recordings.add(recording)
        return recording

    def _capture_into(
        self, graph: torch.cuda.CUDAGraph, fn: FlatFn, graph_args: list[object], grad: bool
    ) -> list[object]:
        # capture_begin/capture_end by hand rather than torch.cuda.graph: when fn fails inside
        # the capture, capture_end fails too, and the stream must still be restored.
        # A cycle collected mid-capture could destroy another graph, which invalidates the capture.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.enable_grad() if grad else torch.no_grad(), torch.cuda.stream(self._capture):
                graph.capture_begin(pool=self._pool)
                try:
                    outputs = fn(*graph_args)
                except BaseException:
                    try:
                        graph.capture_end()
                    except RuntimeError:
                        pass  # the first error, raised below, says why the capture broke
                    raise
                graph.capture_end()
        finally:
            if collecting:
                gc.enable()
        return outputs

    def reset(self) -> None:
        """Forget the pool; it is freed once the graphs and outputs using it are gone."""
        self._pool = None
        self._recordings = weakref.WeakSet()

    def release_cached(self) -> None:
        """Empty the caching allocator's unused blocks of this device (graph pools keep theirs)."""
        with torch.cuda.device(self.device):
            torch.cuda.empty_cache()


def _release_blas_workspaces() -> None:
    # cuBLAS and cuBLASLt keep a workspace per (handle, stream) (32 MiB each on Hopper) until
    # told to drop them. Dropped before a capture, the graph's matmuls get theirs from the
    # private pool; dropped again after it, that block returns to the pool as free, scratch
    # that only replays of this graph write, exactly like the graph's own intermediates (later
    # recordings may reuse it, and replaying this graph already invalidates theirs). Without
    # this, each stream that ever ran a matmul (the caller's eager ones included) keeps 64 MiB
    # allocated for the life of the process; the next eager matmul allocates a new one.
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def _end_generator_capture(stream: torch.cuda.Stream, device: torch.device) -> None:
    # A failed capture never reaches the end that takes the device's default generator out of
    # capture mode, and from then on every random op outside a graph fails with "Offset
    # increment outside graph capture". One small capture that does end puts it back.
    # If even this fails, the caller's fallback must still happen: the error is not raised.
    try:
        scratch = torch.zeros(1, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            graph.capture_begin()
            scratch.add_(1)
            graph.capture_end()
        torch.cuda.synchronize(device)
    except RuntimeError as exc:
        log.warning("cudagraphs: could not reset the CUDA generator after a failed capture: %s", exc)


def _settle(device: torch.device) -> None:
    # A failed capture leaves the error of the invalidated capture behind; synchronising
    # reports it here, once, instead of at the user's next CUDA call.
    try:
        torch.cuda.synchronize(device)
    except RuntimeError:
        pass
