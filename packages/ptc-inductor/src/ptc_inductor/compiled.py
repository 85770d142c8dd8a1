"""What a compiled graph is at run time (its callable, the kernels it calls, how its wrapper is
byte-compiled), apart from the compiler: loading one from the graph cache imports this, not
lowering, scheduling or code generation.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .memory import MemoryPlan
    from .scheduler import Schedule
    from .size_sources import SymbolSource


@dataclass(frozen=True, slots=True)
class KernelCall:
    """How the wrapper calls one kernel: ``fn(*buffers, *sizes)`` over ``params`` (buffer names),
    then the values of the size symbols named in ``sizes`` (ints, read once per call)."""

    name: str
    fn: Callable[..., Any]
    params: tuple[str, ...]
    pointers: bool
    sizes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompiledGraph:
    """A compiled graph: call it like the GraphModule; the generated code stays inspectable."""

    call: Callable[..., Any]
    cpp_source: str
    wrapper_source: str
    schedule: Schedule | None
    """How the graph was scheduled; None for a graph loaded from an artifact."""
    memory_plan: MemoryPlan | None
    library_path: str | None
    fallbacks: tuple[str, ...] = ()
    """Ops run as their eager ATen kernel (fallback nodes), by qualified name, in graph order."""
    symbols: tuple[SymbolSource, ...] = ()
    """The size symbols the graph needs, each with the input dim (or stride, or SymInt input)
    each call reads it from; empty for static sizes. Guards are not checked here."""
    namespace: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    """The objects the wrapper's code reads (what ``artifact.save_artifact`` writes)."""
    kernel_calls: dict[str, KernelCall] = dataclasses.field(default_factory=dict, repr=False)
    loaded_kernel_count: int = 0
    """``kernel_count`` of a graph loaded from an artifact (it keeps no schedule)."""
    call_boxed: Callable[[list[Any]], Any] | None = None
    """Runs the graph on a list of its inputs that it empties, freeing each input after its last
    use once no one else holds it (a backward's saved tensors); None for a wrapper without it."""

    def __call__(self, *args: Any) -> Any:
        """Run the compiled graph on ``args`` (the graph's placeholders, in order)."""
        return self.call(*args)

    def symbol_values(self, *args: Any) -> dict[str, int]:
        """The value each size symbol takes for the inputs ``args`` (what a call reads from them)."""
        return {s.name: s.read(args) for s in self.symbols}

    @property
    def kernel_count(self) -> int:
        """Number of generated kernels."""
        return self.loaded_kernel_count if self.schedule is None else len(self.schedule.kernels)


def compile_source(text: str) -> Any:
    """Byte-compile the generated wrapper (``compile`` here is ours, so reach the builtin explicitly)."""
    # A name per wrapper, its lines in linecache: tracebacks, profilers and allocator
    # histories then show the wrapper line that launched a kernel or allocated a buffer.
    name = f"<ptc_inductor wrapper {hashlib.sha256(text.encode()).hexdigest()[:12]}>"
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    return builtins.compile(text, name, "exec")
