"""The Triton runtime: launch heuristics, autotune candidates and cache, module cache, compiling
generated kernels for a real GPU target (no GPU needed), and the CUDA launch path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from test_triton_kernels import _rand, check_triton, compile_triton, trace_core

import ptc_spec
from ptc_inductor.codegen.triton_heuristics import (
    MAX_RBLOCK,
    MAX_XBLOCK_FLAT,
    MAX_XBLOCK_INNER,
    LaunchConfig,
    candidate_configs,
    default_config,
)
from ptc_inductor.config import Config
from ptc_inductor.cuda_launch import launcher_module
from ptc_inductor.triton_interpret import interpreting
from ptc_inductor.triton_runtime import (
    _DEFERRED,
    LoadedKernel,
    _read_autotune,
    _shared_layouts,
    _write_autotune,
    scratch_args,
    triton_options,
    tune_after_calls,
    write_module,
)

aten = torch.ops.aten
TESTS = Path(__file__).parent
SRC = TESTS.parent / "src"


@pytest.mark.parametrize("style,xnumel,rnumel,rblock", [("flat", 1 << 26, 0, 0), ("flat", 100, 0, 0), ("persistent", 8192, 8192, 8192),
                                                        ("persistent", 1 << 16, 64, 64), ("looped", 4, 100_000, 0)])
@pytest.mark.parametrize("mode", ["none", "default", "max-autotune"])
def test_candidates_respect_the_block_bounds_masks_rely_on(style: str, xnumel: int, rnumel: int, rblock: int, mode: str) -> None:
    configs = candidate_configs(style, xnumel, rnumel, rblock, mode)
    assert configs[0] == default_config(style, xnumel, rnumel, rblock)
    for cfg in configs:
        assert cfg.xblock <= (MAX_XBLOCK_FLAT if style == "flat" else MAX_XBLOCK_INNER)
        assert style != "looped" or cfg.rblock <= MAX_RBLOCK
        assert style != "persistent" or cfg.rblock == rblock
        assert cfg.xblock & (cfg.xblock - 1) == 0 and 1 <= cfg.num_warps <= 32


def test_a_row_loops_rows_per_step_divide_its_chunk_and_size_its_warps() -> None:
    from ptc_inductor.codegen.triton_heuristics import rowloop_rows

    # GPT-2's 768 features (RBLOCK 1024) in chunks of 32 rows: 4 rows a step; a chunk of 8
    # rows of 128 lanes takes all 8 (a 32-row tile would not divide it); 4096 lanes: one row.
    assert (rowloop_rows(1024, 32), rowloop_rows(128, 8), rowloop_rows(4096, 32), rowloop_rows(64, 24)) == (4, 8, 1, 8)
    # The warps follow the tile the kernel holds, not the widest tile its RBLOCK allows.
    assert default_config("rowloop", 256, 768, 1024, rows=4).num_warps == 8
    assert default_config("rowloop", 256, 100, 128, rows=8).num_warps == 2
    assert default_config("rowloop", 256, 100, 128, rows=32).num_warps == 8


def test_autotuning_is_off_for_small_kernels_and_widens_under_max_autotune() -> None:
    assert len(candidate_configs("flat", 4096, 0, 0, "default")) == 1
    small = candidate_configs("flat", 1 << 26, 0, 0, "default")
    wide = candidate_configs("flat", 1 << 26, 0, 0, "max-autotune")
    assert 1 < len(small) < len(wide)
    assert len(candidate_configs("flat", 1 << 26, 0, 0, "none")) == 1


def test_autotune_results_and_kernel_modules_are_cached_on_disk(tmp_path: Path) -> None:
    cfg = LaunchConfig(64, 128, 8, 2)
    _write_autotune(str(tmp_path), "src|dev|default", cfg)
    assert LaunchConfig(**_read_autotune(str(tmp_path))["src|dev|default"]) == cfg
    compiled = check_triton(lambda x: aten.mul.Tensor(x, 3.0), _rand(10))
    k = compiled.kernels[0]
    first = write_module(k, str(tmp_path))
    mtime = os.path.getmtime(first)
    assert write_module(k, str(tmp_path)) == first and os.path.getmtime(first) == mtime


def test_a_kernel_written_in_place_is_timed_later_on_scratch_tensors_of_its_layouts() -> None:
    # An output written over its input reaches the kernel as the same tensor twice: timed
    # launches on it would clobber the input the real launch reads, and a copy would add the
    # whole buffer to the call's peak; the timing runs after the call on scratch instead.
    shared, other = torch.arange(4.0), torch.ones(3, 2).t()
    assert _shared_layouts([shared, other, 7], 2) is None
    layouts = _shared_layouts([shared, other, shared, 7], 3)
    assert layouts is not None
    for _ in range(3):  # freed memory holding non-zero values, which the allocator may hand out again
        torch.ones(4).add_(1)
        torch.ones(2, 3).add_(1)
    trial = scratch_args(layouts, 3)
    assert trial[0] is trial[2] and trial[0] is not shared and trial[1] is not other
    for made, real in ((trial[0], shared), (trial[1], other)):
        assert (made.shape, made.stride(), made.dtype, made.device) == (real.shape, real.stride(), real.dtype, real.device)
        # Zeroed: an index loaded from scratch must stay in bounds.
        assert not made.any()
    assert trial[3] == 7


class _Deferred:
    def __init__(self, runs: bool) -> None:
        self.config, self._tensors, self.runs, self.timed = "first", 1, runs, []
        self.kernel = types.SimpleNamespace(name="k0")

    def candidates(self) -> list[str]:
        return ["first", "second"]

    def _tune(self, trial: list[object], key: str, configs: list[str]) -> bool:
        self.timed.append((trial, key, configs))
        self.config = "second"
        return self.runs

    def _set_config(self, cfg: str) -> None:
        self.config = cfg


@pytest.mark.parametrize("runs", [True, False])
def test_a_wrapper_tunes_the_deferred_kernels_after_it_returns(runs: bool) -> None:
    order: list[str] = []
    namespace = {"call_boxed": lambda args: order.append("call") or len(args)}
    tune_after_calls(namespace)
    pending = _Deferred(runs)
    _DEFERRED.append((pending, "k", [((2, 3), (3, 1), torch.float16, torch.device("cpu")), 5]))  # type: ignore[arg-type]
    assert namespace["call_boxed"]([1, 2]) == 2
    assert order == ["call"] and not _DEFERRED
    ((trial, key, configs),) = pending.timed
    assert key == "k" and configs == ["first", "second"] and trial[1] == 5
    assert trial[0].shape == (2, 3) and trial[0].dtype == torch.float16
    # A kernel none of whose configs runs on the scratch keeps the one its real launch ran.
    assert pending.config == ("second" if runs else "first")
    namespace["call_boxed"]([])
    assert len(pending.timed) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or interpreting(), reason="needs CUDA and TRITON_INTERPRET=0")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dynamic", [False, True])
def test_an_in_place_kernel_adds_nothing_to_the_first_calls_peak_and_is_still_tuned(
    tmp_path: Path, dtype: torch.dtype, dynamic: bool
) -> None:
    import ptc_inductor
    from ptc_inductor.config import config_from_env

    torch.manual_seed(0)
    # Rows of 4096: a persistent softmax with several configs to tune, written in place over
    # the matmul's result; under dynamic the row count is a symbol and a second count follows.
    def inputs(rows: int) -> tuple[torch.Tensor, ...]:
        x, w = torch.randn(rows, 32, device="cuda"), torch.randn(32, 4096, device="cuda") / 8
        return x.to(dtype), w.to(dtype), (torch.randn(4096, 8, device="cuda") / 64).to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        s = aten.mm.default(x, w)
        e = aten.exp.default(aten.sub.Tensor(s, aten.amax.default(s, [-1], True)))
        return aten.mm.default(aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), w2)

    def assert_as_close_as_eager(out: torch.Tensor, args: tuple[torch.Tensor, ...]) -> None:
        # Low precision: ptc's error against a float64 reference may not exceed eager's by much.
        ref = fn(*(a.double() for a in args))
        eager_err = (fn(*args).double() - ref).abs().max().item()
        assert out.dtype == dtype and out.shape == ref.shape
        assert (out.double() - ref).abs().max().item() <= 2 * eager_err + 1e-6 * ref.abs().max().item()

    args = inputs(1024)
    fn(*args)  # makes cuBLAS allocate its workspace before the peaks below
    if dynamic:
        env = ptc_spec.SymbolEnv()
        metas = [ptc_spec.dynamic_meta(ptc_spec.TensorMeta.from_tensor(args[0]), [0], env)]
        metas += [ptc_spec.TensorMeta.from_tensor(a) for a in args[1:]]
        gm = ptc_spec.trace(fn, *metas, shape_env=env, dialect="core/1")
    else:
        gm = trace_core(fn, *args)
    compiled = ptc_inductor.compile(gm, config=config_from_env(cache_dir=str(tmp_path)))
    assert compiled.memory_plan is not None
    launchers = [c.fn for c in compiled.kernel_calls.values()
                 if any(written in c.params and taken in c.params for written, taken in compiled.memory_plan.in_place)]
    assert launchers and all(len(launcher.candidates()) > 1 for launcher in launchers)
    peaks = []
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = compiled(*args)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        del out
    assert peaks[0] <= peaks[1], peaks
    assert not _DEFERRED
    tuned = [LaunchConfig(**v) for v in _read_autotune(str(tmp_path)).values()]
    assert all(launcher.config in tuned for launcher in launchers), (tuned, [launcher.config for launcher in launchers])
    assert_as_close_as_eager(compiled(*args), args)
    if dynamic:
        other = inputs(777)
        assert_as_close_as_eager(compiled(*other), other)
        assert not _DEFERRED


def test_environment_selects_autotune_mode_and_backend() -> None:
    from ptc_inductor.config import config_from_env

    opts = triton_options(config_from_env({"PTC_INDUCTOR_TRITON_AUTOTUNE": "max-autotune", "PTC_INDUCTOR_BACKEND": "triton"}))
    assert opts.autotune == "max-autotune" and opts.force_for_cpu


@pytest.mark.slow
def test_generated_kernels_compile_for_an_sm90_target_without_a_gpu(tmp_path: Path) -> None:
    # The interpreter does not type-check like the compiler does; compile real PTX/cubin.
    script = textwrap.dedent(
        """
        import torch, test_triton_kernels as T
        from ptc_inductor.codegen.triton_heuristics import default_config
        from ptc_inductor.triton_runtime import _compile_in_worker, _constexprs, canonical, signature
        aten = torch.ops.aten
        def softmax(x):
            e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
            return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True)), aten.argmax.default(x, 1)
        graphs = [(softmax, T._rand(37, 129)), (softmax, T._rand(3, 9000)), (lambda x: aten.sum.dim_IntList(x, [0]), T._rand(300, 40)),
                  (lambda x: aten.remainder.Tensor(aten._to_copy.default(x, dtype=torch.bfloat16), aten.add.Tensor(x, 3.0)), T._rand(1000))]
        n = 0
        for fn, x in graphs:
            for k in T.compile_triton(T.trace_core(fn, x)).kernels:
                cfg = default_config(k.style, k.xnumel, k.rnumel, k.rblock, k.strided, k.rows)
                la_path = __import__("ptc_inductor.triton_runtime").triton_runtime.write_module(k, CACHE_DIR)
                b = _compile_in_worker(la_path, canonical(k).symbol, signature(k), _constexprs(k, cfg), tuple(True for _ in k.params), cfg.num_warps, 1, ("cuda", 90, 32))
                # What a worker hands back: a cubin that ptc's launcher can run (no scratch memory).
                assert b.plain and b.cubin[:4] == bytes([0x7F]) + b"ELF" and b.num_warps == cfg.num_warps, b
                n += 1
        print("compiled", n)
        """
    ).replace("CACHE_DIR", repr(str(tmp_path)))
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS.parent.parent / "ptc-spec" / "src"), str(TESTS)]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "compiled" in out.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or interpreting(), reason="needs CUDA and TRITON_INTERPRET=0")
def test_cuda_launch_path_matches_eager_and_reuses_its_config() -> None:
    x = torch.randn(4096, 1000, device="cuda")
    compiled = compile_triton(trace_core(lambda x: aten.mul.Tensor(aten.sum.dim_IntList(x, [1], True), x), x))
    torch.testing.assert_close(compiled(x), x.sum(1, keepdim=True) * x, rtol=1e-4, atol=1e-3)
    launcher = compiled.launchers[compiled.kernels[0].name]
    chosen = launcher.config
    compiled(x)
    assert launcher.config == chosen and launcher._variants
    # Launched by ptc's own launcher from the binary a compile worker made.
    assert all(type(v) is LoadedKernel for v in launcher._variants.values())
    assert launcher.binaries


def test_the_launcher_extension_builds_without_cuda_and_says_what_is_missing(tmp_path: Path) -> None:
    module = launcher_module(Config(cache_dir=str(tmp_path)))
    assert module is not None
    with pytest.raises(TypeError, match=r"launch\(function, grid, threads, shared, stream, \*pointers\)"):
        module.launch(0, 1)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cannot open the CUDA driver library"):
            module.launch(0, 1, 32, 0, 0)


def test_kernels_that_differ_only_in_names_share_one_canonical_module(tmp_path: Path) -> None:
    from ptc_inductor.triton_runtime import canonical

    x = _rand(4, 300)

    def block(t: torch.Tensor) -> torch.Tensor:
        return aten.mul.Tensor(aten.sin.default(t), 2.0)

    def two_blocks(unused: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # The same block twice, separated by a product (an extern call), so two kernels.
        return block(aten.mm.default(block(t), unused))

    first = compile_triton(trace_core(block, x)).kernels
    pair = check_triton(two_blocks, _rand(300, 300, seed=2), x, rtol=1e-3, atol=1e-3).kernels
    assert len(first) == 1 and len(pair) == 2
    assert first[0].params != pair[0].params or first[0].name != pair[0].name  # different graph names...
    assert canonical(first[0]).symbol == canonical(pair[0]).symbol  # ...one module
    assert write_module(first[0], str(tmp_path)) == write_module(pair[0], str(tmp_path))
    # Another constant, or another shape, is another kernel.
    other = compile_triton(trace_core(lambda t: aten.mul.Tensor(aten.sin.default(t), 3.0), x)).kernels
    wider = compile_triton(trace_core(block, _rand(4, 301))).kernels
    assert len({canonical(k).symbol for k in (first[0], other[0], wider[0])}) == 3


def _use_the_compile_pool() -> None:
    from ptc_inductor.triton_runtime import warm_compile_pool

    warm_compile_pool(2)


def test_a_process_multiprocessing_started_exits_after_using_the_compile_pool() -> None:
    # mp.spawn's ranks (the usual way to start distributed training by hand) join their child
    # processes before atexit runs: idle compile workers used to keep such a rank alive forever.
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=_use_the_compile_pool)
    process.start()
    process.join(timeout=120)
    alive = process.is_alive()
    if alive:
        process.kill()
    assert not alive and process.exitcode == 0, f"alive={alive}, exit code {process.exitcode}"
