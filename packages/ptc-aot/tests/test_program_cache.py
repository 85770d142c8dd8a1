"""A program read back from a cache entry behaves exactly as the program compiled fresh."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
import torch.fx
import torch.utils._pytree as pytree

import ptc_aot.api
from ptc_aot import AotFunction, CompiledProgram, Config, CorruptProgramError, JointRewrite, aot
from ptc_spec import TensorMeta, dynamic_meta
from ptc_spec.shapes import SymbolEnv
from ptc_spec.testing import compare_with_eager

T = TypeVar("T")


class DictCache:
    """The smallest ProgramCache: entries in a dict, each a directory under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries: dict[bytes, str] = {}
        self.hits = 0
        self.puts = 0
        self.corrupt = 0

    def get(self, material: bytes, load: Callable[[str], T]) -> T | None:
        path = self.entries.get(material)
        if path is None:
            return None
        try:
            found = load(path)
        except CorruptProgramError:
            self.corrupt += 1
            del self.entries[material]
            return None
        self.hits += 1
        return found

    def put(self, material: bytes, write: Callable[[str], None]) -> None:
        path = tempfile.mkdtemp(dir=self.root)
        write(path)
        self.entries[material] = path
        self.puts += 1


def _inference(x: torch.Tensor, w: torch.Tensor) -> Any:
    return torch.relu(x @ w).sum(1)


def _training(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> Any:
    h = torch.tanh(x @ w1)
    return (h @ w2).softmax(-1), h.sum()


def _mutation(x: torch.Tensor, w: torch.Tensor) -> Any:
    x.add_(1)
    return x * w


def _views(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x * w
    return x.t(), x[1:], y, y.view(-1), y[0], {"again": y}


def _constants(x: torch.Tensor, n: int, scale: float) -> Any:
    return x * n + scale, n + 1, None, "tag", (2.5, True)


def _graph(fn: Callable[..., Any]) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).requires_grad_(True)


def _base(*shape: int) -> torch.Tensor:
    # A non-leaf that requires grad: eager may return views of it.
    return (torch.randn(*shape, requires_grad=True) * 1).clone()


CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[Any]]]] = {
    "inference": (_inference, lambda: [torch.randn(4, 6), torch.randn(6, 5)]),
    "training": (_training, lambda: [torch.randn(4, 6), _leaf(6, 8), _leaf(8, 3)]),
    "input_mutation": (_mutation, lambda: [torch.randn(4, 3), _leaf(3)]),
    "views_of_inputs_and_outputs": (_views, lambda: [_base(4, 3), _leaf(3)]),
    "constants_and_python_inputs": (_constants, lambda: [_leaf(3, 2), 3, 0.5]),
}


def _storages(outputs: Any, inputs: list[Any]) -> list[Any]:
    """Per tensor output, which input or earlier output shares its storage (aliasing as data)."""
    seen: dict[int, str] = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            seen.setdefault(x.untyped_storage().data_ptr(), f"input {i}")
    found: list[Any] = []
    for i, out in enumerate(pytree.tree_leaves(outputs)):
        if isinstance(out, torch.Tensor):
            ptr = out.untyped_storage().data_ptr()
            found.append(seen.setdefault(ptr, f"output {i}"))
    return found


def _same_program(hit: CompiledProgram, fresh: CompiledProgram) -> None:
    for field in ("num_outputs", "mutated_inputs", "differentiable", "outputs", "out_spec", "tangents"):
        assert getattr(hit, field) == getattr(fresh, field), field
    assert (hit.backward is None) == (fresh.backward is None)
    if fresh.shape_env is None:
        assert hit.shape_env is None
    else:
        assert hit.shape_env is not None and hit.shape_env.state() == fresh.shape_env.state()


def _compile_twice(fn: Any, examples: list[Any], cache: DictCache, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[AotFunction, AotFunction]:
    fresh = aot(fn, examples, cache=cache, **kwargs)
    assert cache.puts == 1 and cache.hits == 0
    with monkeypatch.context() as patch:
        patch.setattr(ptc_aot.api, "trace_program", _no_trace)
        hit = aot(fn, examples, cache=cache, **kwargs)
    assert cache.hits == 1 and cache.puts == 1
    _same_program(hit.programs[0], fresh.programs[0])
    return fresh, hit


def _no_trace(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a cache hit traced the function")


def _check(fn: Callable[..., Any], make: Callable[[], list[Any]], compiled: AotFunction, grads: bool) -> None:
    args = make()
    compare_with_eager(compiled, fn, *args, grads=grads, check_stride=True)
    eager_args, compiled_args = make(), make()
    for e, c in zip(eager_args, compiled_args):
        if isinstance(e, torch.Tensor):
            with torch.no_grad():
                c.copy_(e)
    assert _storages(compiled(*compiled_args), compiled_args) == _storages(fn(*eager_args), eager_args)


@pytest.mark.parametrize("name", list(CASES))
def test_a_cache_hit_runs_like_the_fresh_program_and_eager(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fn, make = CASES[name]
    gm = _graph(fn)
    cache = DictCache(tmp_path)
    examples = make()
    fresh, hit = _compile_twice(gm, examples, cache, monkeypatch)
    training = fresh.programs[0].backward is not None
    assert training == (name not in ("inference",))
    torch.manual_seed(0)
    for compiled in (fresh, hit):
        _check(fn, make, compiled, grads=training)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_a_symbolic_program_hits_and_serves_other_sizes(training: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fn(x: torch.Tensor) -> Any:
        y = x * 2
        return y, x.size(0) * 3, x.view(x.size(0) * x.size(1)), y.unflatten(0, (1, x.size(0)))

    env = SymbolEnv()
    meta = dynamic_meta(TensorMeta.of((6, 4), requires_grad=training), [0, 1], env)
    cache = DictCache(tmp_path)
    fresh, hit = _compile_twice(_graph(fn), [meta], cache, monkeypatch, shape_env=env)
    assert hit.programs[0].shape_env is not None
    for compiled in (fresh, hit):
        for shape in [(6, 4), (3, 8), (7, 6)]:
            _check(fn, functools.partial(_symbolic_input, shape, training), compiled, grads=training)
        assert len(compiled.programs) == 1


def _symbolic_input(shape: tuple[int, int], training: bool) -> list[Any]:
    return [_base(*shape) if training else torch.randn(*shape)]


def test_the_key_follows_training_partition_and_inputs(tmp_path: Path) -> None:
    gm = _graph(_training)
    cache = DictCache(tmp_path)
    args = CASES["training"][1]()
    aot(gm, args, cache=cache)
    aot(gm, args, cache=cache, partition="save_all")
    with torch.no_grad():
        aot(gm, args, cache=cache)
    aot(gm, [args[0].double(), *args[1:]], cache=cache)
    assert (cache.puts, cache.hits) == (4, 0)
    aot(gm, args, cache=cache, partition="save_all")
    assert cache.hits == 1


def test_callables_that_are_not_graph_modules_are_not_cached(tmp_path: Path) -> None:
    cache = DictCache(tmp_path)
    aot(_inference, CASES["inference"][1](), cache=cache)
    aot(_graph(_inference), CASES["inference"][1](), config=Config(dump_dir=str(tmp_path / "dump")), cache=cache)
    assert cache.puts == 0


def test_a_corrupt_entry_raises_a_clear_error_and_is_compiled_again(tmp_path: Path) -> None:
    gm = _graph(_training)
    cache = DictCache(tmp_path)
    make = CASES["training"][1]
    aot(gm, make(), cache=cache)
    (entry,) = cache.entries.values()
    with pytest.raises(CorruptProgramError, match="cannot be read"):
        (Path(entry) / "plan.json").write_text("{not json")
        ptc_aot.api.read_program(entry)
    compiled = aot(gm, make(), cache=cache)
    assert cache.corrupt == 1 and cache.puts == 2
    compare_with_eager(compiled, _training, *make(), grads=True)


def test_the_key_follows_the_joint_rewrite(tmp_path: Path) -> None:
    # A rewrite changes what is partitioned, so a program made with another (or none) is not it.
    gm = _graph(_training)
    cache = DictCache(tmp_path)
    args = CASES["training"][1]()
    first, second = (JointRewrite(name, lambda joint: joint) for name in ("first", "second"))
    for rewrite in (None, first, second, first):
        aot(gm, args, cache=cache, config=Config(joint_rewrite=rewrite))
    assert (cache.puts, cache.hits) == (3, 1)
