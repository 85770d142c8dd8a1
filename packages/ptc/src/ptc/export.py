"""``ptc.export``, ``ptc.load_exported`` and ``ptc.aot_compile``: one whole graph of a model, saved,
and compiled once into an artifact that ``ptc_inductor.runtime.load`` runs without any compiler.

The order: capture the frame with fullgraph semantics (ptc-capture) -> trace the inference
forward graph (ptc-aot) -> describe inputs, state and outputs -> (aot_compile) decompose
(ptc-decomp) -> compile and run once (ptc-inductor) -> write the artifact.
"""

from __future__ import annotations

import inspect
import json
import os
import types
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import safetensors.torch
import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

import ptc_spec

from . import cache
from .errors import PtcError, UnknownOptionError

EXPORT_FORMAT = "ptc-export/1"
"""The format of an exported program's directory (``program.json``, ``graph.ptcg``, ``weights.safetensors``)."""
_PROGRAM, _GRAPH, _WEIGHTS = "program.json", "graph.ptcg", "weights.safetensors"

DynamicShapes = Mapping[str, Mapping[int, str | tuple[str, int | None, int | None]]]
"""Per argument name, per dim, the dim's name (or ``(name, min, max)``)."""


class ExportError(PtcError):
    """A model cannot be exported (a graph break, an unsupported output), or an export cannot be read."""


class ExportedProgram:
    """One whole inference graph of a model (aten dialect), its named state and its input/output
    description; call it like the model, ``save`` it, or ``ptc.aot_compile`` it."""

    def __init__(self, graph: torch.fx.GraphModule, program: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
        from ptc_inductor.runtime import Program

        self.graph = graph
        self.program = program
        self.state = state
        # The run-time checks of an artifact, over the graph itself run eagerly.
        self._run = Program(graph, program, state, "the exported program")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the exported graph eagerly on the model's arguments (inputs checked as an artifact checks them)."""
        return self._run(*args, **kwargs)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the program into the directory ``path``: JSON and safetensors only, no pickle."""
        os.makedirs(path, exist_ok=True)
        ptc_spec.save(self.graph, os.path.join(path, _GRAPH))
        safetensors.torch.save_file({k: v.detach().contiguous().cpu() for k, v in self.state.items()}, os.path.join(path, _WEIGHTS))
        with open(os.path.join(path, _PROGRAM), "w", encoding="utf-8") as f:
            json.dump({"format": EXPORT_FORMAT, **self.program}, f, indent=1)


def load_exported(path: str | os.PathLike[str]) -> ExportedProgram:
    """Read a program ``ExportedProgram.save`` wrote (nothing in it is executed on load)."""
    try:
        with open(os.path.join(path, _PROGRAM), encoding="utf-8") as f:
            program = json.load(f)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path} is not a readable exported program ({exc})") from exc
    found = program.pop("format", None)
    if found != EXPORT_FORMAT:
        raise ExportError(f"{path} holds export format {found!r}; this ptc reads {EXPORT_FORMAT!r}: export the model again")
    graph = ptc_spec.load(os.path.join(path, _GRAPH))
    device = program.get("state_device", "cpu")
    state = safetensors.torch.load_file(os.path.join(path, _WEIGHTS), device=device)
    return ExportedProgram(graph, program, state)


# -- export ----------------------------------------------------------------------------------------
def export(
    model: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, dynamic_shapes: DynamicShapes | None = None
) -> ExportedProgram:
    """Capture ``model(*args, **kwargs)`` as one whole inference graph (a graph break raises
    :class:`ExportError` naming the reason and line); ``dynamic_shapes`` names the dims that may vary."""
    import ptc_capture

    args, kwargs = tuple(args), dict(kwargs or {})
    forward = _python_function(model)
    names = _argument_names(forward, model, args, kwargs)
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    wheres = [_where(path, names) for path, _ in pytree.tree_flatten_with_path((args, kwargs))[0]]
    user_names = _mark_dynamic(dynamic_shapes or {}, names, args, kwargs)
    recorded: dict[str, Any] = {}

    def backend(gm: torch.fx.GraphModule, examples: list[torch.Tensor]) -> Callable[..., Any]:
        recorded["gm"], recorded["examples"] = gm, examples

        def run(*inputs: Any) -> Any:
            recorded["outputs"] = gm(*inputs)
            return recorded["outputs"]

        return run

    saved = [dict(t.__dict__) for t in leaves if isinstance(t, torch.Tensor)]
    try:
        with torch.no_grad():
            capture = ptc_capture.capture_function(model, *args, backend=backend, fullgraph=True, **kwargs)
            if capture.replacement is None:
                raise ExportError(f"{getattr(forward, '__qualname__', model)} runs no tensor operation: there is nothing to export")
            replaced = types.FunctionType(capture.replacement, forward.__globals__, forward.__name__, forward.__defaults__, forward.__closure__)
            replaced.__kwdefaults__ = forward.__kwdefaults__
            result = replaced(model, *args, **kwargs) if isinstance(model, torch.nn.Module) else replaced(*args, **kwargs)
    except ptc_capture.PtcCaptureError as exc:
        raise ExportError(f"ptc.export needs one whole graph: {exc}") from exc
    finally:
        for t, attrs in zip((t for t in leaves if isinstance(t, torch.Tensor)), saved):
            t.__dict__.clear()
            t.__dict__.update(attrs)
    if "gm" not in recorded:
        raise ExportError("the model's result needs no graph (it returns its inputs or constants): there is nothing to export")
    return _describe(model, recorded, leaves, in_spec, wheres, result, user_names)


def _python_function(model: Callable[..., Any]) -> types.FunctionType:
    fn = type(model).forward if isinstance(model, torch.nn.Module) else model
    if not isinstance(fn, types.FunctionType):
        raise ExportError(f"ptc.export takes an nn.Module or a Python function, not a {type(model).__name__}")
    return fn


def _argument_names(forward: types.FunctionType, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    params = list(inspect.signature(forward).parameters.values())
    if isinstance(model, torch.nn.Module):
        params = params[1:]
    names = []
    for i in range(len(args)):
        p = params[min(i, len(params) - 1)] if params else None
        names.append(p.name if p is not None and p.kind != p.VAR_POSITIONAL else f"args[{i}]")
    return names


def _where(path: tuple[Any, ...], names: list[str]) -> str:
    """How an error names the input leaf at ``path`` of ``(args, kwargs)``: ``idx``, ``x['a']``."""
    head, rest = path[0], path[1:]
    first: str = names[rest[0].idx] if getattr(head, "idx", None) == 0 else str(rest[0].key)
    return first + str(pytree.keystr(tuple(rest[1:])))


def _mark_dynamic(dynamic: DynamicShapes, names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[tuple[int, int], str]:
    """Mark each named dim dynamic on its tensor; returns the user's name per (id of tensor, dim)."""
    import ptc_capture

    by_name = {**dict(zip(names, args)), **kwargs}
    user: dict[tuple[int, int], str] = {}
    for arg, dims in dynamic.items():
        tensor = by_name.get(arg)
        if not isinstance(tensor, torch.Tensor):
            raise ExportError(f"dynamic_shapes names {arg!r}, which is not a tensor argument of the model ({', '.join(by_name)})")
        for dim, spec in dims.items():
            name, low, high = (spec, None, None) if isinstance(spec, str) else spec
            ptc_capture.mark_dynamic(tensor, dim, min=low, max=high)
            user[(id(tensor), dim % tensor.dim())] = name
    return user


def _describe(
    model: Any, recorded: dict[str, Any], leaves: list[Any], in_spec: Any, wheres: list[str], result: Any,
    user_names: dict[tuple[int, int], str],
) -> ExportedProgram:  # fmt: skip
    import ptc_aot

    examples: list[torch.Tensor] = recorded["examples"]
    leaf_index = {id(t): i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)}
    named = chain(model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False)) if isinstance(
        model, torch.nn.Module) else ()
    state_names: dict[int, str] = {}
    for name, t in named:
        state_names.setdefault(id(t), name)
    state: dict[str, torch.Tensor] = {}
    inputs: list[list[Any]] = []
    for i, t in enumerate(examples):
        if id(t) in leaf_index:
            inputs.append(["leaf", leaf_index[id(t)]])
        else:
            name = state_names.get(id(t), f"_constant{i}")
            state[name] = t.detach()
            inputs.append(["state", name])
    forward: dict[str, torch.fx.GraphModule] = {}

    def keep(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        forward["gm"] = gm
        return gm

    with torch.no_grad():
        aot = ptc_aot.aot(recorded["gm"], examples, fw_compiler=keep)
    program = aot.programs[0]
    if program.mutated_inputs:
        raise ExportError("the model writes into its inputs or buffers (batch norm in training mode?): export runs inference, call model.eval()")
    gm = forward["gm"]
    outputs = _output_plan(recorded["outputs"], program.outputs, result, leaf_index, inputs, state_names)
    env = program.shape_env
    metas = [n.meta[ptc_spec.META_KEY] for n in gm.graph.nodes if n.op == "placeholder"]
    leaf_specs, symbols = _leaf_specs(leaves, wheres, inputs, metas, env, user_names, examples)
    try:
        out_spec = pytree.treespec_dumps(pytree.tree_flatten(result)[1])
        in_spec_text = pytree.treespec_dumps(in_spec)
    except Exception as exc:  # a container type pytree cannot serialize (no serialized_type_name)
        raise ExportError(f"the model's inputs or outputs use a container ptc.export cannot describe ({exc})") from exc
    description = {
        "in_spec": in_spec_text, "out_spec": out_spec, "leaves": leaf_specs, "inputs": inputs, "outputs": outputs,
        "symbols": symbols, "guards": env.guards_source() if env is not None else "True",
        "state_device": str(next(iter(state.values())).device) if state else "cpu",
    }  # fmt: skip
    return ExportedProgram(gm, description, state)


def _output_plan(
    graph_outputs: Any, plans: Sequence[Any], result: Any, leaf_index: dict[int, int], inputs: list[list[Any]], state_names: dict[int, str]
) -> list[list[Any]]:
    produced = {id(t): k for k, t in enumerate(graph_outputs)} if isinstance(graph_outputs, (tuple, list)) else {id(graph_outputs): 0}
    out: list[list[Any]] = []
    for leaf in pytree.tree_leaves(result):
        if isinstance(leaf, torch.Tensor) and id(leaf) in produced:
            plan = plans[produced[id(leaf)]]
            if plan.kind == "graph":
                out.append(["graph", plan.index])
            elif plan.kind == "input" and not plan.chain:
                out.append(list(inputs[plan.index]))
            else:
                raise ExportError(f"an output is a view of an input or of another output ({plan.kind}): return a .clone() to export it")
        elif isinstance(leaf, torch.Tensor) and id(leaf) in leaf_index:
            out.append(["leaf", leaf_index[id(leaf)]])
        elif isinstance(leaf, torch.Tensor) and id(leaf) in state_names:
            out.append(["state", state_names[id(leaf)]])
        elif leaf is None or isinstance(leaf, (bool, int, float, str)):
            out.append(["value", leaf])
        else:
            raise ExportError(f"the model returns a {type(leaf).__name__} that is not computed by its graph: ptc.export cannot save it")
    return out


def _leaf_specs(
    leaves: list[Any], wheres: list[str], inputs: list[list[Any]], metas: list[Any], env: Any, user_names: dict[tuple[int, int], str],
    examples: list[torch.Tensor],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:  # fmt: skip
    meta_of = {int(index): metas[i] for i, (kind, index) in enumerate(inputs) if kind == "leaf"}
    ranges = {str(sym): (lower, upper) for sym, _, lower, upper in env.state()["symbols"]} if env is not None else {}
    specs: list[dict[str, Any]] = []
    symbols: dict[str, dict[str, Any]] = {}
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            if leaf is not None and not isinstance(leaf, (bool, int, float, str)):
                raise ExportError(f"input {wheres[i]} is a {type(leaf).__name__}: ptc.export takes tensors and Python scalars")
            specs.append({"kind": "value", "where": wheres[i], "value": leaf})
            continue
        meta = meta_of.get(i)
        shape: list[int | str] = []
        for d, size in enumerate(meta.shape if meta is not None else leaf.shape):
            # Each dim keeps its own symbol (not its replacement): the guards relate them, and the
            # runtime reads every symbol a guard names from the input dim that made it.
            expr = size
            if isinstance(expr, sympy.Symbol):
                name = str(expr)
                low, high = ranges.get(name, (None, None))
                symbols.setdefault(name, {"name": user_names.get((id(leaf), d), name), "min": low, "max": high})
                shape.append(name)
            elif isinstance(expr, (int, sympy.Integer)):
                shape.append(int(expr))
            else:
                raise ExportError(f"dim {d} of input {wheres[i]} has the size {expr}, an expression over other dims: mark that dim static")
        specs.append({"kind": "tensor", "where": wheres[i], "dtype": str(leaf.dtype), "device": str(leaf.device), "shape": shape})
    return specs, symbols


# -- aot_compile -----------------------------------------------------------------------------------
def aot_compile(exported: ExportedProgram, path: str | os.PathLike[str], options: Mapping[str, Any] | None = None) -> str:
    """Compile ``exported`` into an artifact directory at ``path`` (kernels, wrapper, weights,
    manifest) that ``ptc_inductor.runtime.load`` runs without a compiler; returns the path.

    ``options`` overrides fields of ptc-inductor's Config (``{"backend": "triton"}``...)."""
    import ptc_decomp
    import ptc_inductor

    config = ptc_inductor.config_from_env(cache_dir=cache.inductor_cache_dir())
    if options:
        try:
            config = config.replace(**dict(options))
        except TypeError as exc:
            raise UnknownOptionError(f"aot_compile options must be fields of ptc_inductor.Config ({exc})") from exc
    core = ptc_decomp.decompose(exported.graph, target=ptc_spec.LATEST_CORE)
    program = dict(exported.program)
    env = ptc_spec.shape_env_of(core)
    if env is not None:
        # A decomposition that decided on a size added a guard: the artifact must check it too.
        program["guards"] = env.guards_source()
    compiled = ptc_inductor.compile(core, config=config)
    inputs = _example_inputs(exported, env)
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    # One run chooses each Triton kernel's launch config (autotuning on a GPU); the artifact keeps it.
    with torch.no_grad():
        compiled(*inputs)
    return str(ptc_inductor.save_aot_artifact(compiled, os.fspath(path), program, exported.state, device, config))


def _example_inputs(exported: ExportedProgram, env: Any) -> list[Any]:
    """Graph inputs at the sizes the program was exported with (the symbols' hints)."""
    hints = {str(sym): hint for sym, hint, _, _ in env.state()["symbols"]} if env is not None else {}
    inputs: list[Any] = []
    for kind, ref in exported.program["inputs"]:
        if kind == "state":
            inputs.append(exported.state[ref])
            continue
        leaf = exported.program["leaves"][ref]
        shape = [d if isinstance(d, int) else hints.get(d, 2) for d in leaf["shape"]]
        dtype = getattr(torch, leaf["dtype"].removeprefix("torch."))
        if dtype.is_floating_point or dtype.is_complex:
            inputs.append(torch.randn(shape, dtype=dtype, device=leaf["device"]))
        else:
            inputs.append(torch.ones(shape, dtype=dtype, device=leaf["device"]))
    return inputs


__all__ = ["EXPORT_FORMAT", "ExportError", "ExportedProgram", "aot_compile", "export", "load_exported"]
