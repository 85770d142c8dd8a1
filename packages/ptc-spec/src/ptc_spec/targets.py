"""Graph-node targets by qualified name, resolved only from an allow-list.

A graph file names each call target (``aten.add.Tensor``, ``torch.nn.functional.gelu``,
``operator.getitem``). Loading never imports a module or walks an arbitrary attribute path:
names resolve through tables built from a few trusted namespaces, so a file naming
``os.system`` or ``builtins.eval`` is refused before anything runs.
"""

from __future__ import annotations

import math
import operator
import re
import threading
from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional

from .errors import SerializationError
from .opset import overload_name

_OP_NAMESPACES = {"aten", "ptc"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# operator: arithmetic, comparisons and item access only. attrgetter/methodcaller/call would
# let a file reach arbitrary attributes, so they are deliberately absent.
_OPERATOR_NAMES = (
    "add sub mul truediv floordiv mod pow neg pos abs invert and_ or_ xor lshift rshift "
    "eq ne lt le gt ge not_ truth getitem setitem matmul contains index"
).split()

# torch functions that touch the file system or serialization are never callable from a graph.
_TORCH_DENIED = {"from_file", "load", "save"}

# The public calls that switch the thread's autocast state; they take strings, dtypes and bools.
_AUTOCAST_SWITCHES = [
    "set_autocast_enabled", "set_autocast_dtype", "set_autocast_cache_enabled", "autocast_increment_nesting",
    "autocast_decrement_nesting", "clear_autocast_cache",
]  # fmt: skip

# Tensor methods that expose Python internals or storage management.
_METHOD_DENIED = {"new", "storage", "untyped_storage", "share_memory_", "pin_memory", "tolist", "numpy"}
_METHOD_DUNDERS = {
    "__getitem__", "__setitem__", "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__",
    "__isub__", "__mul__", "__rmul__", "__imul__", "__truediv__", "__rtruediv__", "__itruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__",
    "__rmatmul__", "__neg__", "__pos__", "__abs__", "__invert__", "__and__", "__rand__",
    "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rshift__", "__eq__", "__ne__",
    "__lt__", "__le__", "__gt__", "__ge__", "__div__", "__rdiv__", "__idiv__", "__ifloordiv__", "__imod__",
    "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__rlshift__", "__rrshift__",
}


class _Table:
    """The allow-list: name -> object and id(object) -> canonical name."""

    def __init__(self) -> None:
        self.by_name: dict[str, object] = {}
        self.by_id: dict[int, str] = {}
        self.extra_namespaces: set[str] = set()

    def add(self, name: str, obj: object) -> None:
        self.by_name.setdefault(name, obj)
        self.by_id.setdefault(id(obj), name)

    def add_module(self, prefix: str, module: ModuleType | type, names: list[str]) -> None:
        for n in names:
            obj = getattr(module, n, None)
            if callable(obj):
                self.add(f"{prefix}.{n}", obj)


_table: _Table | None = None
_lock = threading.Lock()


def _public(names: list[str]) -> list[str]:
    return [n for n in names if not n.startswith("_")]


def _build() -> _Table:
    table = _Table()
    table.add_module("operator", operator, _OPERATOR_NAMES)
    table.add_module("math", math, _public(dir(math)))
    # torch.nn.functional first, so that builtins it re-exports (F.linear) take its name.
    table.add_module("torch.nn.functional", torch.nn.functional, _public(dir(torch.nn.functional)))
    variable_functions = [n for n in _public(dir(torch._C._VariableFunctions)) if n not in _TORCH_DENIED]
    table.add_module("torch", torch, variable_functions)
    import torch.functional as torch_functional

    table.add_module("torch", torch, [n for n in torch_functional.__all__ if n not in _TORCH_DENIED])
    for sub in ("special", "linalg", "fft"):
        module = getattr(torch, sub)
        table.add_module(f"torch.{sub}", module, _public(dir(module)))
    table.add_module("torch.Tensor", torch.Tensor, tensor_method_names())
    # Captured graphs switch grad mode around no_grad/enable_grad blocks with this call.
    table.add("torch._C._set_grad_enabled", torch._C._set_grad_enabled)
    # ... and switch autocast around torch.autocast regions with these (eager's __enter__/__exit__ calls).
    table.add_module("torch", torch, _AUTOCAST_SWITCHES)
    # Size arithmetic in graphs with symbolic sizes (plain ints at run time).
    table.add_module("torch", torch, ["sym_max", "sym_min", "sym_float"])
    return table


def _get_table() -> _Table:
    global _table
    if _table is None:
        with _lock:
            if _table is None:
                _table = _build()
    return _table


def tensor_method_names() -> list[str]:
    """Tensor methods a ``call_method`` node may name."""
    names = [n for n in _public(dir(torch.Tensor)) if n not in _METHOD_DENIED]
    return sorted([n for n in names if callable(getattr(torch.Tensor, n, None))] + sorted(_METHOD_DUNDERS))


_METHODS: frozenset[str] | None = None


def is_allowed_method(name: str) -> bool:
    """True when ``call_method`` may name this Tensor method."""
    global _METHODS
    if _METHODS is None:
        _METHODS = frozenset(tensor_method_names())
    return name in _METHODS


def allow_target(obj: Callable[..., object], qualname: str) -> None:
    """Add ``obj`` to the allow-list under ``qualname`` (for a custom op or function)."""
    if not all(_IDENT.match(part) for part in qualname.split(".")):
        raise ValueError(f"{qualname!r} is not a dotted Python name")
    if isinstance(obj, torch._ops.OpOverload):
        _get_table().extra_namespaces.add(obj.namespace)
        return
    _get_table().add(qualname, obj)


def target_name(target: object) -> str:
    """Return the qualified name a graph file uses for a call_function target."""
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace not in _OP_NAMESPACES | _get_table().extra_namespaces:
            raise SerializationError(
                f"op {overload_name(target)} is in namespace {target.namespace!r}, which graph files do not allow;"
                " register it with ptc_spec.allow_target"
            )
        return overload_name(target)
    name = _get_table().by_id.get(id(target))
    if name is None:
        shown = getattr(target, "__qualname__", None) or repr(target)
        raise SerializationError(
            f"call target {getattr(target, '__module__', '?')}.{shown} is not in ptc-spec's allow-list;"
            " register it with ptc_spec.allow_target if it is safe to call from a graph file"
        )
    return name


def is_allowed_target(target: object) -> bool:
    """True when a graph file may name ``target`` as a call_function target."""
    try:
        target_name(target)
    except SerializationError:
        return False
    return True


def resolve_target(name: str) -> object:
    """Return the object a qualified name stands for, refusing anything off the allow-list."""
    if not isinstance(name, str) or not all(_IDENT.match(p) for p in name.split(".")):
        raise SerializationError(f"call target {name!r} is not a dotted Python name")
    table = _get_table()
    found = table.by_name.get(name)
    if found is not None:
        return found
    parts = name.split(".")
    if len(parts) == 3 and parts[0] in _OP_NAMESPACES | table.extra_namespaces:
        namespace, op, overload = parts
        try:
            return getattr(getattr(getattr(torch.ops, namespace), op), overload)
        except (AttributeError, RuntimeError):
            raise SerializationError(
                f"op {name} does not exist in this torch ({torch.__version__}); the graph needs a newer torch"
            ) from None
    raise SerializationError(f"call target {name!r} is not in ptc-spec's allow-list, so the graph file is refused")
