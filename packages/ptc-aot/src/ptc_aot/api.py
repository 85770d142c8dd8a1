"""``aot``: the entry point, and the one function that shows the pipeline in order."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from ptc_spec import META_KEY, TensorMeta, dialect_of, roundtrip, save

from .config import Config, config_from_env
from .errors import PtcAotError
from .functionalize import functionalize
from .partition import partition, tangents
from .runtime import CompiledProgram
from .tracing import trace_program

log = logging.getLogger("ptc.aot.api")

Compiler = Callable[[torch.fx.GraphModule], Callable[..., Any]]
"""Receives an aten-dialect GraphModule (``ptc_meta`` on every node) and returns a callable."""


def _as_is(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    return gm


def compile_program(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    training: bool,
    fw_compiler: Compiler,
    bw_compiler: Compiler,
    config: Config,
    tag: str = "",
) -> CompiledProgram:
    """Trace joint -> functionalize -> partition -> compile -> wrap, for one input signature."""
    program = trace_program(fn, inputs, joint=training)
    functional = functionalize(program.gm)
    metas = program.inputs
    if not program.joint:
        _dump(config, f"inference{tag}", functional.gm)
        forward = fw_compiler(_boundary(config, functional.gm))
        return CompiledProgram(forward, None, functional.num_outputs, functional.mutated_inputs, program.differentiable, program.outputs, program.out_spec)
    split = partition(functional, len(metas), config.partition)
    _dump(config, f"joint{tag}", functional.gm)
    _dump(config, f"forward{tag}", split.forward)
    _dump(config, f"backward{tag}", split.backward)
    forward = fw_compiler(_boundary(config, split.forward))
    backward = bw_compiler(_boundary(config, split.backward))
    return CompiledProgram(
        forward, backward, functional.num_outputs, functional.mutated_inputs, program.differentiable, program.outputs, program.out_spec,
        tangents(functional, len(metas)),
    )  # fmt: skip


def _boundary(config: Config, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return roundtrip(gm) if config.check_boundaries else gm


def _dump(config: Config, name: str, gm: torch.fx.GraphModule) -> None:
    if config.dump_dir is None:
        return
    os.makedirs(config.dump_dir, exist_ok=True)
    path = os.path.join(config.dump_dir, f"{name}.ptcg")
    save(gm, path)
    log.info("wrote %s", path)


def _meta_of(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta.from_tensor(value)
    return value


def _layout_of(value: Any) -> Any:
    # Everything TensorMeta records, as cheap raw values (torch.Size hashes like a tuple).
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype, value.device, value.requires_grad, value.storage_offset())
    return (type(value), value)  # 1, 1.0 and True are equal keys but bake in different programs


class AotFunction:
    """The callable ``aot`` returns: compiles one program per input signature and grad mode."""

    def __init__(self, fn: Callable[..., Any], example_inputs: Sequence[Any], fw_compiler: Compiler, bw_compiler: Compiler, config: Config) -> None:
        self._fn = fn
        self._fw_compiler = fw_compiler
        self._bw_compiler = bw_compiler
        self._config = config
        self._programs: dict[tuple[Any, ...], CompiledProgram] = {}
        # Per-call dispatch on raw sizes/strides: building a TensorMeta per input on every call
        # cost ~10 us a tensor, most of a small model's step. Keys map to the programs above.
        self._by_layout: dict[tuple[Any, ...], CompiledProgram] = {}
        inputs = [_meta_of(v) for v in example_inputs]
        training = torch.is_grad_enabled() and any(isinstance(m, TensorMeta) and m.requires_grad for m in inputs)
        self._program(training, inputs)

    def _program(self, training: bool, inputs: list[Any]) -> CompiledProgram:
        key = (training, *(v if isinstance(v, TensorMeta) else (type(v), v) for v in inputs))
        try:
            found = self._programs.get(key)
        except TypeError as exc:
            raise PtcAotError(
                "a non-tensor argument is not hashable, so ptc_aot cannot tell which program it needs;"
                " pass tensors or hashable Python values (tuples, not lists)"
            ) from exc
        if found is None:
            tag = "" if not self._programs else f"_{len(self._programs)}"
            log.info("compiling %s program %s", "training" if training else "inference", tag or "0")
            found = compile_program(self._fn, inputs, training, self._fw_compiler, self._bw_compiler, self._config, tag)
            self._programs[key] = found
        return found

    @property
    def programs(self) -> tuple[CompiledProgram, ...]:
        """The programs compiled so far, oldest first."""
        return tuple(self._programs.values())

    def __call__(self, *args: Any) -> Any:
        """Run the compiled program matching ``args`` (compiling it on first use)."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        key = (training, *map(_layout_of, args))
        try:
            program = self._by_layout.get(key)
        except TypeError:
            program = None  # an unhashable argument: _program explains
        if program is None:
            program = self._program(training, [_meta_of(a) for a in args])
            self._by_layout[key] = program
        return program(tensors)


def aot(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any] | None,
    fw_compiler: Compiler | None = None,
    bw_compiler: Compiler | None = None,
    partition: str | None = None,
    dump_dir: str | None = None,
    config: Config | None = None,
) -> AotFunction:
    """Return a callable running ``fn`` through compiled functional aten forward/backward graphs.

    ``fn`` is a torch-dialect GraphModule or any callable; ``example_inputs`` are tensors,
    TensorMetas or Python values (baked in), or None to take a GraphModule's placeholder metadata.
    """
    chosen = config if config is not None else config_from_env()
    if partition is not None:
        chosen = replace(chosen, partition=partition)
    if dump_dir is not None:
        chosen = replace(chosen, dump_dir=dump_dir)
    if example_inputs is None:
        example_inputs = _placeholder_metas(fn)
    if isinstance(fn, torch.fx.GraphModule) and dialect_of(fn) not in (None, "torch", "aten"):
        raise PtcAotError(f"ptc_aot traces torch- or aten-dialect graphs, but this graph is in {dialect_of(fn)}")
    if isinstance(fn, torch.fx.GraphModule) and dialect_of(fn) is not None and chosen.check_boundaries:
        fn = roundtrip(fn)
    return AotFunction(fn, list(example_inputs), fw_compiler or _as_is, bw_compiler or _as_is, chosen)


def _placeholder_metas(fn: Callable[..., Any]) -> list[Any]:
    if not isinstance(fn, torch.fx.GraphModule):
        raise PtcAotError("example_inputs may be None only for a GraphModule whose placeholders carry ptc_meta")
    metas = []
    for node in fn.graph.nodes:
        if node.op == "placeholder":
            meta = node.meta.get(META_KEY)
            if not isinstance(meta, TensorMeta):
                raise PtcAotError(f"placeholder {node.name} has no TensorMeta; pass example_inputs")
            metas.append(meta)
    return metas
