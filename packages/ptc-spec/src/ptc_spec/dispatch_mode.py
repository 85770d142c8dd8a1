"""The base class of ptc's dispatch modes: a ``TorchDispatchMode`` that torch calls directly."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchMode(TorchDispatchMode):
    """A ``TorchDispatchMode`` whose ``__torch_dispatch__`` torch leaves unwrapped.

    torch wraps every subclass's ``__torch_dispatch__`` in a wrapper that disables Dynamo, so
    that Dynamo never traces into it, and that wrapper imports torch's Dynamo compiler (with its
    Inductor backend and triton: about a second) the first time it runs. ptc re-implements
    Dynamo and never runs under it, so the wrapper has nothing to do for a ptc mode;
    ``_should_skip_dynamo`` is the switch torch gives modes for it (documented on
    ``TorchDispatchMode._should_skip_dynamo``).
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
