"""nn.Module's member iterators (``named_parameters()``, ``buffers()``, ``children()``, ``modules()`` ...)
traced from the module tree: the tree they walk is guarded, each member is read through its path;
and ``Module.to()`` that converts nothing.

Eager runs these as generators that keep a memo set of the members seen; the trace instead
asks the real module for the (name, member) pairs at trace time. What decides those pairs is
the tree's shape and contents (the modules, guarded by identity, and the keys and values of
their ``_modules``/``_parameters``/``_buffers`` tables), so those are guarded, and each member
is read through its path from the module (``m._modules['a']._parameters['weight']``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.guards import Source
from ptc_capture.interpreter.builtins import builtin
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.interpreter.values import as_const
from ptc_capture.variables import IterBox, Var, const

__all__: list[str] = []

_Module = torch.nn.Module


# The named iterator each one is answered from, the table its members live in (None for
# modules), and whether it yields (name, member) pairs. The unnamed ones take the same
# keywords as their named counterparts (recurse, remove_duplicate).
_ITERATORS: dict[Callable[..., Any], tuple[Callable[..., Any], str | None, bool]] = {
    _Module.named_parameters: (_Module.named_parameters, "_parameters", True),
    _Module.parameters: (_Module.named_parameters, "_parameters", False),
    _Module.named_buffers: (_Module.named_buffers, "_buffers", True),
    _Module.buffers: (_Module.named_buffers, "_buffers", False),
    _Module.named_children: (_Module.named_children, None, True),
    _Module.children: (_Module.named_children, None, False),
    _Module.named_modules: (_Module.named_modules, None, True),
    _Module.modules: (_Module.named_modules, None, False),
}


def _module_source(root: Source, path: list[str]) -> Source:
    source = root
    for name in path:
        source = source.attr("_modules").item(name)
    return source


def _member_source(root: Source, path: str, table: str | None) -> Source:
    """The source of the member at dotted ``path`` under ``root`` (a module path when ``table`` is None)."""
    parts = path.split(".") if path else []
    if table is None:
        return _module_source(root, parts)
    return _module_source(root, parts[:-1]).attr(table).item(parts[-1])


def _guard_tree(frame: Frame, root: Source, table: str | None, walk: list[tuple[str, _Module]]) -> None:
    # Wrapping a table guards its keys and each value (a module by identity, a tensor by its
    # metadata, a None by value): the pairs a member iterator yields follow from exactly these.
    state = frame.state
    for path, sub in walk:
        source = _member_source(root, path, None)
        state.wrap(sub, source)
        state.wrap(sub._modules, source.attr("_modules"))
        if table is not None:
            state.wrap(getattr(sub, table), source.attr(table))


def _member_iterator(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    target = fn.value
    named_fn, table, named = _ITERATORS[target]
    module_var = args[0]
    if module_var.kind != "module" or module_var.source is None:
        raise Unsupported(f"Module.{target.__name__}() of a module made in the trace")
    module = module_var.value
    values = [as_const(a, f"an argument of {target.__name__}()") for a in args[1:]]
    options = {k: as_const(v, f"an argument of {target.__name__}()") for k, v in kwargs.items()}
    try:
        bound = inspect.signature(target).bind(module, *values, **options)
    except TypeError as exc:
        raise Unsupported(f"Module.{target.__name__}() called with bad arguments (TypeError in eager)") from exc
    chosen = dict(bound.arguments)
    chosen.pop("self")
    if chosen.get("memo") is not None:
        raise Unsupported("Module.named_modules() with a memo set")
    try:
        pairs = list(named_fn(module, **chosen))
        paths = [p for p, _ in named_fn(module, **{**chosen, "prefix": ""})] if "prefix" in chosen else [p for p, _ in pairs]
    except Exception as exc:
        raise Unsupported(f"Module.{target.__name__}() raised {type(exc).__name__} at trace time") from exc
    root = module_var.source
    if table is None and named_fn is _Module.named_children:
        walk = [("", module)]
    elif table is not None and chosen.get("recurse", True) is False:
        walk = [("", module)]
    else:
        walk = list(module.named_modules())
    _guard_tree(frame, root, table, walk)
    items: list[Var] = []
    for (name, value), path in zip(pairs, paths, strict=True):
        member = frame.state.wrap(value, _member_source(root, path, table))
        items.append(Var("tuple", tuple, items=(const(name), member)) if named else member)
    return Var("iter", box=IterBox(items))


builtin(*_ITERATORS)(_member_iterator)


def _unchanged_by(tensor: torch.Tensor, device: torch.device | None, dtype: torch.dtype | None) -> bool:
    """Whether ``Module.to``'s conversion leaves ``tensor`` as it is (its own test: dtype applies
    to floating-point and complex tensors only)."""
    if dtype is not None and (tensor.is_floating_point() or tensor.is_complex()) and tensor.dtype != dtype:
        return False
    # "cuda" without an index names the current device: left to eager (a break), conservatively.
    return device is None or tensor.device == device


@builtin(_Module.to)
def _module_to(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # ``self.router = self.router.to(self.dtype)`` in a forward (SwitchTransformers): a module
    # whose parameters and buffers already have the dtype and device is returned as it is, as
    # eager's to() returns self after converting nothing. The tensors' dtypes and devices are
    # guarded through the tree (each is read through its path); converting them would change
    # the module in place, which runs outside the graph.
    module_var = args[0] if args else None
    if module_var is None or module_var.kind != "module" or module_var.source is None:
        raise Unsupported("Module.to() of a module made in the trace")
    values = [as_const(a, "an argument of Module.to()") for a in args[1:]]
    options = {k: as_const(v, "an argument of Module.to()") for k, v in kwargs.items()}
    try:
        device, dtype, _, memory_format = torch._C._nn._parse_to(*values, **options)
    except Exception as exc:
        raise Unsupported(f"Module.to() called with bad arguments ({type(exc).__name__} in eager)") from exc
    if memory_format is not None or (dtype is not None and not (dtype.is_floating_point or dtype.is_complex)):
        raise Unsupported("Module.to() with a memory format or an integral dtype runs outside the graph")
    module = module_var.value
    walk = list(module.named_modules())
    for table in ("_parameters", "_buffers"):
        _guard_tree(frame, module_var.source, table, walk)
    for tensor in [*module.parameters(), *module.buffers()]:
        if not _unchanged_by(tensor, device, dtype):
            raise Unsupported("Module.to() that converts parameters or buffers runs outside the graph")
    return module_var
