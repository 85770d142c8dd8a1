"""The callable an artifact loads into: checks a call's inputs, runs the wrapper, rebuilds the outputs.

A program description (the manifest's ``program``, written by ``ptc.export``) says:

- ``in_spec`` / ``out_spec``: the pytree structure of ``(args, kwargs)`` and of the result,
  as ``torch.utils._pytree.treespec_dumps`` JSON;
- ``leaves``: per input leaf, where it is (``where``, e.g. ``idx``), and for a tensor its dtype,
  device and dims (an int, or the name of a size symbol); other leaves must equal ``value``;
- ``symbols``: per size symbol, the user's name for it and its range (``min``, ``max``);
- ``guards``: one Python expression over the symbols that every admitted call satisfies;
- ``inputs``: per graph input, ``["state", name]`` or ``["leaf", index]``;
- ``outputs``: per output leaf, ``["graph", i]``, ``["leaf", i]``, ``["state", name]`` or ``["value", v]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from .errors import InputError
from .namespace import DTYPES


class _TensorCheck:
    __slots__ = ("index", "where", "dtype", "device", "device_index", "dims", "static")

    def __init__(self, index: int, leaf: Mapping[str, Any]) -> None:
        self.index = index
        self.where = leaf["where"]
        self.dtype = DTYPES[leaf["dtype"]]
        self.device = torch.device(leaf["device"])
        # What Tensor.get_device() returns for it: an int compare, not a torch.device per call.
        self.device_index = -1 if self.device.type == "cpu" else (self.device.index or 0)
        self.dims: tuple[int | str, ...] = tuple(leaf["shape"])
        self.static = torch.Size(self.dims) if all(isinstance(d, int) for d in self.dims) else None  # type: ignore[arg-type]


class Program:
    """A loaded artifact: ``program(*args, **kwargs)`` runs it on the model's arguments."""

    def __init__(self, call: Callable[..., Any], description: Mapping[str, Any], state: Mapping[str, torch.Tensor], path: str) -> None:
        self.path = path
        self.description = description
        self._call = call
        self._in_spec = pytree.treespec_loads(description["in_spec"])
        self._out_spec = pytree.treespec_loads(description["out_spec"])
        leaves = description["leaves"]
        # The common call passes every leaf positionally: its arguments are its leaves.
        self._positional = len(leaves) if self._in_spec == pytree.tree_flatten((tuple(range(len(leaves))), {}))[1] else -1
        self._tensors = [_TensorCheck(i, leaf) for i, leaf in enumerate(leaves) if leaf["kind"] == "tensor"]
        self._values = [(i, leaf["where"], leaf["value"]) for i, leaf in enumerate(leaves) if leaf["kind"] == "value"]
        self._symbols: dict[str, Mapping[str, Any]] = dict(description["symbols"])
        self._sized = bool(self._symbols) or description["guards"] != "True"
        self._guards = _guard_function(description["guards"], sorted(self._symbols))
        # Graph inputs: state tensors are bound once, leaves filled in per call.
        self._state = [state[name] if kind == "state" else None for kind, name in description["inputs"]]
        self._slots = [(i, int(index)) for i, (kind, index) in enumerate(description["inputs"]) if kind == "leaf"]
        # A model of tensor arguments only (no state): the graph takes the call's leaves as they are.
        self._leaves_are_inputs = self._slots == [(i, i) for i in range(len(leaves))] and len(self._state) == len(leaves)
        self._outputs = [tuple(o) for o in description["outputs"]]
        self._one_output = self._out_spec.is_leaf() and self._outputs == [("graph", 0)]
        self._admits = _admission_function(self._tensors)
        self.state = dict(state)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the artifact on ``args``/``kwargs`` (as the exported model takes them)."""
        leaves: Sequence[Any] = args
        if kwargs or len(args) != self._positional:
            leaves, spec = pytree.tree_flatten((args, kwargs))
            if spec != self._in_spec:
                raise InputError(f"the call's arguments have structure {spec}, but {self.path} was exported for {self._in_spec}")
        self._check(leaves)
        if self._leaves_are_inputs:
            inputs = leaves
        else:
            inputs = list(self._state)
            for slot, index in self._slots:
                inputs[slot] = leaves[index]
        # Entering no_grad costs more than a small graph's whole check: callers that serve under
        # no_grad or inference_mode already have grad off, and then nothing needs switching.
        if torch.is_grad_enabled():
            with torch.no_grad():
                result = self._call(*inputs)
        else:
            result = self._call(*inputs)
        if not isinstance(result, tuple):
            result = (result,)
        if self._one_output:
            return result[0]
        out = []
        for kind, value in self._outputs:
            if kind == "graph":
                out.append(result[value])
            elif kind == "leaf":
                out.append(leaves[value])
            elif kind == "state":
                out.append(self.state[value])
            else:
                out.append(value)
        return pytree.tree_unflatten(out, self._out_spec)

    def _check(self, leaves: Sequence[Any]) -> None:
        if not self._admits(leaves):
            # The same tests one tensor at a time, to say which input is wrong and how.
            for check in self._tensors:
                self._refuse(check, leaves[check.index])
        for index, where, value in self._values:
            if leaves[index] != value:
                raise InputError(f"input {where} is {leaves[index]!r}; the artifact was exported with the constant {value!r} there")
        if self._sized:
            self._check_sizes(leaves)

    def _refuse(self, check: _TensorCheck, t: Any) -> None:
        """Raise the one error that says how input ``t`` differs from what the artifact takes, if it does."""
        if not isinstance(t, torch.Tensor):
            raise InputError(f"input {check.where} is a {type(t).__name__}; the artifact takes a tensor there")
        if t.dtype != check.dtype:
            raise InputError(f"input {check.where} has dtype {t.dtype}; the artifact was exported for {check.dtype}")
        if t.device.type != check.device.type or t.get_device() != check.device_index:
            raise InputError(f"input {check.where} is on {t.device}; the artifact runs on {check.device}")
        if len(t.shape) != len(check.dims):
            raise InputError(f"input {check.where} has {len(t.shape)} dims; the artifact was exported for {len(check.dims)}")
        for d, want in enumerate(check.dims):
            if isinstance(want, int) and t.shape[d] != want:
                raise InputError(f"input {check.where} has size {t.shape[d]} in dim {d}; the artifact was exported with static size {want} there")

    def _check_sizes(self, leaves: Sequence[Any]) -> None:
        values: dict[str, int] = {}
        for check in self._tensors:
            if check.static is not None:
                continue
            shape = leaves[check.index].shape
            if len(shape) != len(check.dims):
                self._refuse(check, leaves[check.index])
            for d, want in enumerate(check.dims):
                if isinstance(want, int):
                    if shape[d] != want:
                        self._refuse(check, leaves[check.index])
                elif values.setdefault(want, shape[d]) != shape[d]:
                    raise InputError(
                        f"input {check.where} has size {shape[d]} in dim {d}, but '{self._name(want)}' is {values[want]} in another input"
                    )
        for name, size in values.items():
            sym = self._symbols[name]
            low, high = sym.get("min"), sym.get("max")
            if (low is not None and size < low) or (high is not None and size > high):
                raise InputError(
                    f"dynamic size '{self._name(name)}' is {size}, outside the range [{low}, {'inf' if high is None else high}] "
                    "the artifact admits"
                )
        if not self._guards(values):
            raise InputError(
                f"the sizes {', '.join(f'{self._name(k)}={v}' for k, v in sorted(values.items()))} break the artifact's "
                f"size guards ({self.description['guards']}); export with sizes that satisfy them"
            )

    def _name(self, symbol: str) -> str:
        return str(self._symbols.get(symbol, {}).get("name") or symbol)


def _admission_function(checks: Sequence[_TensorCheck]) -> Callable[[Sequence[Any]], bool]:
    """One function that is true when every tensor leaf has its exported type, dtype, device and
    (static) shape: the tests of ``Program._check`` in one expression, with no loop or lookups."""
    scope: dict[str, Any] = {"__builtins__": {"isinstance": isinstance}, "Tensor": torch.Tensor}
    terms = ["True"]
    for n, check in enumerate(checks):
        t = f"leaves[{check.index}]"
        scope[f"dtype{n}"] = check.dtype
        terms.append(f"isinstance({t}, Tensor) and {t}.dtype is dtype{n} and {_device_test(t, check, n, scope)}")
        if check.static is not None:
            scope[f"shape{n}"] = check.static
            terms.append(f"{t}.shape == shape{n}")
    # Only integers and names made here enter the source; nothing of the manifest is read as code.
    exec(compile(f"def _admits(leaves):\n    return {' and '.join(terms)}\n", "<artifact input check>", "exec"), scope)
    fn: Callable[[Sequence[Any]], bool] = scope["_admits"]
    return fn


def _device_test(t: str, check: _TensorCheck, n: int, scope: dict[str, Any]) -> str:
    # get_device() alone is -1 for a meta tensor as for a CPU one, and a CPU kernel handed a meta
    # tensor's null data pointer crashes the process: the device type is tested as well.
    if check.device.type == "cpu":
        return f"{t}.is_cpu"
    if check.device.type == "cuda":
        return f"{t}.is_cuda and {t}.get_device() == {check.device_index}"
    scope[f"type{n}"] = check.device.type
    return f"{t}.device.type == type{n} and {t}.get_device() == {check.device_index}"


def _guard_function(source: str, symbols: list[str]) -> Callable[[Mapping[str, int]], bool]:
    """``source`` (a Python boolean expression over symbol names, as ptc printed it) as a function of their values."""
    lines = ["def _guards(v):"]
    lines += [f"    {name} = v.get({name!r}, 0)" for name in symbols]
    lines.append(f"    return bool({source})")
    scope: dict[str, Any] = {"__builtins__": {"bool": bool, "max": max, "min": min, "float": float, "int": int}}
    exec(compile("\n".join(lines), "<artifact guards>", "exec"), scope)
    fn: Callable[[Mapping[str, int]], bool] = scope["_guards"]
    return fn
