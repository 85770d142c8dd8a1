"""``torch.autograd.Function`` subclasses called through ``.apply`` in the traced code.

Where no gradient can flow through the call (grad mode off, or no tensor argument requires
grad), eager's ``apply`` is its ``forward`` run with grad mode off over a fresh ``ctx``; the
trace does the same: ``forward`` (and ``setup_context``) is inlined into the graph with a
modelled ctx whose ``needs_input_grad`` is all False, and the user's ``backward`` is never
needed.

Where a gradient flows, the user's ``backward`` (which may differ from autograd of the
forward, as Bloom's tanh-GELU derivative does) would have to run in the backward pass. Neither
the torch-dialect graph nor ptc-aot's joint graph can carry a call to user autograd code, so
the call is a graph break and runs eagerly, where autograd calls the user's backward.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import torch

from ptc_capture.interpreter.calls import inline_function
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.variables import ObjBox, Var, const

__all__ = ["TracedFunctionCtx", "apply_function", "c_apply_owner", "is_apply_of"]

# Function.apply is a classmethod written in Python up to torch 2.13, and _FunctionBase's C
# classmethod (a classmethod_descriptor, without __func__) from 2.14.
_APPLY_ENTRY = vars(torch.autograd.Function)["apply"]
_APPLY = getattr(_APPLY_ENTRY, "__func__", _APPLY_ENTRY)
_DEFAULT_SETUP_CONTEXT = torch.autograd.function._SingleLevelFunction.setup_context


def is_apply_of(func: Any, owner: Any) -> bool:
    """True for ``SomeFunction.apply``: autograd.Function's own ``apply`` bound to a subclass."""
    return func is _APPLY and isinstance(owner, type) and issubclass(owner, torch.autograd.Function)


def c_apply_owner(value: Any) -> type | None:
    """The Function subclass of ``SomeFunction.apply`` where apply is torch's C classmethod (2.14+), else None."""
    if not isinstance(value, types.BuiltinMethodType) or getattr(value, "__name__", None) != "apply":
        return None
    owner = value.__self__
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) and inspect.getattr_static(owner, "apply") is _APPLY_ENTRY:
        return owner
    return None


class TracedFunctionCtx:
    """The ``ctx`` that ``forward``/``setup_context`` get in the trace: the FunctionCtx calls a
    forward makes only record what the backward would need, and no backward runs here."""

    def save_for_backward(self, *tensors: Any) -> None:
        """Record the tensors saved for backward (read back through ``saved_tensors``)."""
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        """Record the tensors saved for forward-mode AD."""
        self.saved_for_forward = tensors

    def mark_dirty(self, *tensors: Any) -> None:
        """Record the inputs the forward changed in place (the graph records the change itself)."""
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """Record outputs without gradients (none has one here)."""
        self.non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Record whether undefined gradients would be materialized for backward."""
        self.materialize_grads = value

    @property
    def saved_tensors(self) -> Any:
        """The tensors given to save_for_backward."""
        return self.to_save


def _static_function(cls: type, name: str) -> types.FunctionType | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            inner = found.__func__ if isinstance(found, staticmethod) else None
            return inner if isinstance(inner, types.FunctionType) else None
    return None


def _needs_grad(frame: Frame, args: list[Var]) -> bool:
    # As the C apply: only tensors passed directly are inputs autograd tracks.
    if not frame.state.grad_enabled:
        return False
    return any(a.kind == "tensor" and a.meta is not None and a.meta.requires_grad for a in args)


def apply_function(frame: Frame, cls_var: Var, cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Trace ``cls.apply(*args, **kwargs)`` (``cls_var`` is the class's Var): forward inlined where
    no gradient flows, else a graph break."""
    from ptc_capture.interpreter.control import set_grad_mode

    name = cls.__qualname__
    if _needs_grad(frame, args):
        raise Unsupported(
            f"torch.autograd.Function {name}.apply on tensors that require grad: its custom backward cannot be "
            "carried in the graph, so the call runs eagerly"
        )
    forward = _static_function(cls, "forward")
    if forward is None:
        raise Unsupported(f"torch.autograd.Function {name} has no Python staticmethod forward")
    setup = _static_function(cls, "setup_context")
    separate_setup = setup is not None and setup is not _DEFAULT_SETUP_CONTEXT
    source = cls_var.source
    needs_input_grad = Var("tuple", tuple, items=tuple(const(False) for _ in args))
    ctx = Var("userobj", TracedFunctionCtx, box=ObjBox({"needs_input_grad": needs_input_grad}))
    previous = frame.state.grad_enabled
    # The C apply runs forward with grad mode off.
    set_grad_mode(frame, False)
    if separate_setup:
        assert setup is not None
        if kwargs:
            raise Unsupported(f"keyword arguments to {name}.apply, whose Function defines setup_context")
        inputs = _with_defaults(frame, forward, list(args))
        out = inline_function(frame, forward, source.attr("forward") if source else None, inputs, {})
        inputs_var = Var("tuple", tuple, items=tuple(inputs))
        setup_source = source.attr("setup_context") if source else None
        inline_function(frame, setup, setup_source, [ctx, inputs_var, out], {})
    else:
        out = inline_function(frame, forward, source.attr("forward") if source else None, [ctx, *args], kwargs)
    set_grad_mode(frame, previous)
    return _fresh_outputs(frame, ctx, args, out)


def _fresh_outputs(frame: Frame, ctx: Var, args: list[Var], out: Var) -> Var:
    # The C apply returns an input that forward hands back unchanged as a new view of it
    # (``apply(x) is x`` is False in eager), and a dirty (mark_dirty) input as itself.
    from ptc_capture.interpreter.values import graph_call

    dirty = ctx.box.attrs.get("dirty_tensors")
    kept = {id(v) for v in dirty.items} if dirty is not None and dirty.kind == "tuple" else set()
    inputs = {id(a) for a in args if a.kind == "tensor"} - kept

    def fresh(var: Var) -> Var:
        return graph_call(frame, "call_method", "view_as", (var, var), {}) if id(var) in inputs else var

    if out.kind == "tuple":
        return Var("tuple", out.value, items=tuple(fresh(v) for v in out.items))
    return fresh(out)


def _with_defaults(frame: Frame, forward: types.FunctionType, args: list[Var]) -> list[Var]:
    # apply binds forward's defaults before setup_context sees ``inputs`` (Function.apply's
    # bind_default_args), so a default left out is still one of the inputs.
    npos = forward.__code__.co_argcount
    defaults = forward.__defaults__ or ()
    first_default = npos - len(defaults)
    for i in range(len(args), npos):
        if i < first_default:
            raise Unsupported(f"{forward.__qualname__}() is missing arguments (TypeError in eager)")
        args.append(frame.state.wrap(defaults[i - first_default], None))
    return args
