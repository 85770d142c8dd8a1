"""torch.distributed collectives traced as graph nodes instead of inlined (and broken on).

``dist.all_reduce(t)`` is c10d's in-place, maybe-async API: inlining it meets option objects
and process-group lookups the trace cannot model. Each call becomes the functional op
``torch.ops._c10d_functional.<name>`` plus ``wait_tensor`` on its result (the wait must come
before any use of the result), and, for the in-place forms, a ``copy_`` of the waited result
into the caller's tensor: a mutation the later stages already replay. The functional API
(``torch.distributed._functional_collectives``) becomes the same two nodes without the copy.

The process group is resolved at trace time to its name (a string in the graph): the default
group when none is given; a group object read from the frame is guarded by identity.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ptc_capture.guards import Guard
from ptc_capture.interpreter.attrs import PLAIN_DATA_TYPES
from ptc_capture.interpreter.calls import BUILTINS, call
from ptc_capture.interpreter.dispatcher_ops import dispatcher_call
from ptc_capture.interpreter.state import Frame, Unsupported
from ptc_capture.variables import Var, const, python_value

_Rule = Callable[[Frame, Var, list[Var], dict[str, Var]], Var]

_REDUCE_NAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


def _bind(fn: Any, args: list[Var], kwargs: dict[str, Var]) -> dict[str, Any]:
    """The call's arguments by parameter name; defaults stay plain Python values."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise Unsupported(f"{fn.__name__}() called with the wrong arguments: {exc}") from exc
    bound.apply_defaults()
    return dict(bound.arguments)


def _value(arg: Any, what: str) -> Any:
    if not isinstance(arg, Var):
        return arg
    try:
        return python_value(arg)
    except TypeError:
        raise Unsupported(f"the {what} of a collective must be known at trace time, not a {arg.kind}") from None


def _tensor(arg: Any, fn: str) -> Var:
    if not isinstance(arg, Var) or arg.kind != "tensor":
        raise Unsupported(f"{fn}() needs a tensor argument")
    return arg


def _group(frame: Frame, arg: Any) -> Any:
    """The ProcessGroup a c10d call works on (guarded by identity when read from the frame)."""
    import torch.distributed as dist

    group = _value(arg, "process group")
    if group is None:
        if not dist.is_initialized():
            raise Unsupported("a collective was called before torch.distributed.init_process_group")
        return dist.distributed_c10d._get_default_group()
    if not isinstance(group, dist.ProcessGroup):
        raise Unsupported(f"a collective's group must be a ProcessGroup, not {type(group).__name__}")
    if isinstance(arg, Var) and arg.source is not None:
        frame.state.guards.add(Guard("id", arg.source, group))
    return group


def _reduce_op(arg: Any) -> str:
    import torch.distributed as dist

    op = _value(arg, "reduce op")
    if isinstance(op, str):
        return op.lower()
    for name in _REDUCE_NAMES:
        if op == getattr(dist.ReduceOp, name):
            return name.lower()
    raise Unsupported(f"reduce op {op!r} has no functional collective")


def _issue_and_wait(frame: Frame, name: str, args: list[Any]) -> Var:
    """``wait_tensor(_c10d_functional.<name>(*args))``: the collective's finished result."""
    ops = torch.ops._c10d_functional
    wrapped = [a if isinstance(a, Var) else const(a) for a in args]
    issued = dispatcher_call(frame, getattr(ops, name).default, wrapped, {})
    return dispatcher_call(frame, ops.wait_tensor.default, [issued], {})


def _write_back(frame: Frame, target: Var, result: Var) -> Var:
    """``target.copy_(result)``: the in-place API's effect, as a traced mutation; returns None (no Work)."""
    call(frame, Var("tensor_method", "copy_", items=(target,)), [result], {})
    return const(None)


def _synchronous(bound: dict[str, Any], fn: str) -> None:
    if _value(bound.get("async_op", False), "async_op"):
        raise Unsupported(f"{fn}(async_op=True) returns a Work object, which a graph cannot hold")


def _all_reduce(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    import torch.distributed as dist

    bound = _bind(dist.all_reduce, args, kwargs)
    _synchronous(bound, "all_reduce")
    tensor = _tensor(bound["tensor"], "all_reduce")
    group = _group(frame, bound["group"])
    result = _issue_and_wait(frame, "all_reduce", [tensor, _reduce_op(bound["op"]), group.group_name])
    return _write_back(frame, tensor, result)


# c10d functions that write into an output tensor -> (output, input parameter names, takes a reduce op).
_INTO_OUTPUT = {
    "all_gather_into_tensor": ("output_tensor", "input_tensor", False),
    "reduce_scatter_tensor": ("output", "input", True),
}


def _into_output(name: str) -> _Rule:
    """The rule of ``dist.<name>(output, input, ...)``: the functional op, its wait, a copy into output."""
    out_param, in_param, reduces = _INTO_OUTPUT[name]

    def rule(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
        import torch.distributed as dist

        bound = _bind(getattr(dist, name), args, kwargs)
        _synchronous(bound, name)
        output = _tensor(bound[out_param], name)
        group = _group(frame, bound["group"])
        op_args: list[Any] = [_tensor(bound[in_param], name)]
        if reduces:
            op_args.append(_reduce_op(bound["op"]))
        result = _issue_and_wait(frame, name, [*op_args, dist.get_world_size(group), group.group_name])
        # c10d accepts an output of shape (world * n, ...) or (world, n, ...); the functional
        # op gives the former, so it is viewed as the caller's output before the copy.
        viewed = call(frame, Var("tensor_method", "view_as", items=(result,)), [output], {})
        return _write_back(frame, output, viewed)

    return rule


def _broadcast(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    import torch.distributed as dist

    bound = _bind(dist.broadcast, args, kwargs)
    _synchronous(bound, "broadcast")
    tensor = _tensor(bound["tensor"], "broadcast")
    group = _group(frame, bound["group"])
    src, group_src = _value(bound.get("src"), "src"), _value(bound.get("group_src"), "group_src")
    if group_src is None:
        if src is None:
            raise Unsupported("broadcast() needs src or group_src")
        # c10d takes src as a global rank; the functional op takes the rank within the group.
        group_src = dist.get_group_rank(group, src)
    result = _issue_and_wait(frame, "broadcast", [tensor, group_src, group.group_name])
    return _write_back(frame, tensor, result)


def _functional_group_name(frame: Frame, group: Any, tag: Any) -> str:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    value = _value(group, "process group")
    if isinstance(value, dist.ProcessGroup) and isinstance(group, Var) and group.source is not None:
        frame.state.guards.add(Guard("id", group.source, value))
    try:
        name: str = funcol._resolve_group_name(value, _value(tag, "tag"))
    except Exception as exc:
        raise Unsupported(f"cannot resolve the process group of a functional collective ({type(exc).__name__}: {exc})") from exc
    return name


def _group_size(name: str) -> int:
    import torch.distributed as dist

    size: int = dist.distributed_c10d._get_group_size_by_name(dist.distributed_c10d.GroupName(name))
    return size


def _functional_all_reduce(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    bound = _bind(fn.value, args, kwargs)
    name = _functional_group_name(frame, bound["group"], bound["tag"])
    return _issue_and_wait(frame, "all_reduce", [_tensor(bound["self"], "all_reduce"), _reduce_op(bound["reduceOp"]), name])


def _functional_all_gather(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    bound = _bind(fn.value, args, kwargs)
    name = _functional_group_name(frame, bound["group"], bound["tag"])
    size = _group_size(name)
    result = _issue_and_wait(frame, "all_gather_into_tensor", [_tensor(bound["self"], "all_gather_tensor"), size, name])
    dim = int(_value(bound["gather_dim"], "gather_dim"))
    if dim == 0:
        return result
    # The op gathers along dim 0; another dim is the chunks laid side by side (as funcol does).
    chunks = call(frame, const(torch.chunk), [result, const(size)], {"dim": const(0)})
    return call(frame, const(torch.cat), [chunks], {"dim": const(dim)})


def _functional_reduce_scatter(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    bound = _bind(fn.value, args, kwargs)
    name = _functional_group_name(frame, bound["group"], bound["tag"])
    size = _group_size(name)
    source = _tensor(bound["self"], "reduce_scatter_tensor")
    dim = int(_value(bound["scatter_dim"], "scatter_dim"))
    if dim != 0:
        # The op scatters along dim 0: bring the scattered dim's chunks to the front first.
        chunks = call(frame, const(torch.chunk), [source, const(size)], {"dim": const(dim)})
        source = call(frame, const(torch.cat), [chunks], {})
    return _issue_and_wait(frame, "reduce_scatter_tensor", [source, _reduce_op(bound["reduceOp"]), size, name])


def _functional_broadcast(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    bound = _bind(fn.value, args, kwargs)
    name = _functional_group_name(frame, bound["group"], bound["tag"])
    src = int(_value(bound["src"], "src"))
    return _issue_and_wait(frame, "broadcast", [_tensor(bound["self"], "broadcast"), src, name])


def _functional_wait(frame: Frame, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # Traced collectives are waited on where they are issued, so their results are plain
    # tensors and waiting on one again is the identity (as for an eager plain tensor).
    bound = _bind(fn.value, args, kwargs)
    return _tensor(bound["tensor"], "wait_tensor")


def _fold_constant(fn: Any) -> _Rule:
    def rule(frame: Frame, fn_var: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
        values = [_value(a, "argument") for a in args]
        if any(v is not None for v in values) or kwargs:
            raise Unsupported(f"{fn.__name__}() of a group other than the default one is not supported")
        return const(fn())

    return rule


def _register() -> None:
    if not torch.distributed.is_available():
        return
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    rules: dict[Any, _Rule] = {
        dist.all_reduce: _all_reduce,
        dist.all_gather_into_tensor: _into_output("all_gather_into_tensor"),
        dist.reduce_scatter_tensor: _into_output("reduce_scatter_tensor"),
        dist.broadcast: _broadcast,
        # Rank and world size of the default group are fixed for the life of the process group.
        dist.get_rank: _fold_constant(dist.get_rank),
        dist.get_world_size: _fold_constant(dist.get_world_size),
        funcol.all_reduce: _functional_all_reduce,
        funcol.all_gather_tensor: _functional_all_gather,
        funcol.reduce_scatter_tensor: _functional_reduce_scatter,
        funcol.broadcast: _functional_broadcast,
        funcol.wait_tensor: _functional_wait,
    }
    # The newer names of the same functional collectives, where this torch has them.
    newer: dict[str, _Rule] = {"all_gather_single": _functional_all_gather, "reduce_scatter_single": _functional_reduce_scatter}
    for name, newer_rule in newer.items():
        if hasattr(funcol, name):
            rules[getattr(funcol, name)] = newer_rule
    # dist.ReduceOp.SUM: an immutable enum. dist.group.WORLD: a process group's name and ranks
    # never change, and the graph holds only its name; both are read as constants.
    PLAIN_DATA_TYPES.update((type(dist.ReduceOp.SUM), dist.ProcessGroup))
    for fn, rule in rules.items():
        BUILTINS[id(fn)] = rule
        # c10d's public functions are logging wrappers; the function inside may be called too.
        inner = getattr(fn, "__wrapped__", None)
        if inner is not None:
            BUILTINS[id(inner)] = rule


_register()
