"""What symbolic sizes turn into: kernel arguments, run-time loop bounds and parallel decisions,
one reading of each size per call, memory reuse only between provably equal sizes, tiles chosen
from value ranges, and clear refusals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch
from dynamic_harness import BACKENDS, D, compile_dynamic, sizes_of

import ptc_inductor
import ptc_spec
from ptc_inductor.config import config_from_env
from ptc_inductor.ir import ExternNode
from ptc_spec import SymbolEnv, TensorMeta
from ptc_spec.testing import compare_with_eager

aten = torch.ops.aten
TRITON = BACKENDS[1:]


def _softmax(x: Any) -> Any:
    e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [-1], True)))
    return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True))


def test_cpp_kernels_take_sizes_as_int64_arguments_and_decide_threads_at_run_time() -> None:
    dyn = compile_dynamic(_softmax, D((6, 10), (0, 1)))
    source = dyn.compiled.cpp_source
    assert "float* __restrict__ buf2, int64_t s0, int64_t s1)" in source
    assert "for (int64_t x0 = 0; x0 < s0; ++x0)" in source and "for (int64_t r0 = 0; r0 < s1; ++r0)" in source
    # Whether the work is worth threads is decided per call, between two copies of the loop
    # nest: a small call never enters the OpenMP runtime.
    assert "if ((3*s0*s1) >= 32768)" in source and source.count("#pragma omp parallel for") == 1
    wrapper = dyn.compiled.wrapper_source
    assert wrapper.count("s0, s1 = arg0.shape") == 1
    assert "kernel0(arg0.data_ptr(), buf2.data_ptr(), s0, s1)" in wrapper


def test_a_size_known_to_be_large_needs_no_run_time_decision() -> None:
    env = SymbolEnv()
    rows = env.create_symbol(40000, lower=40000)
    gm = ptc_spec.trace(lambda a: aten.exp.default(a), TensorMeta.of((rows,)), shape_env=env, dialect="core/1")
    compiled = ptc_inductor.compile(gm)
    assert "#pragma omp parallel for simd\n" in compiled.cpp_source
    compare_with_eager(compiled, gm, torch.randn(40003))


@pytest.mark.parametrize("backend", TRITON)
def test_triton_kernels_compute_their_grid_from_the_sizes_at_each_call(backend: str) -> None:
    dyn = compile_dynamic(_softmax, D((6, 10), (0, 1)), backend=backend)
    source = dyn.compiled.cpp_source
    assert "s0, s1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):" in source
    # An unbounded row may be longer than any tile: the reduction loops over it.
    assert "looped kernel" in source and "for roffset in range(0, s1, RBLOCK):" in source
    assert "xmask = xindex < xnumel" in source and "rmask = rindex < s1" in source
    dyn.run_all(sizes_of(s0=[6, 1025, 2], s1=[10, 3, 4099]))


@pytest.mark.parametrize("backend", TRITON)
def test_bounded_sizes_get_persistent_tiles_and_32_bit_indices(backend: str) -> None:
    env = SymbolEnv()
    rows, cols = env.create_symbol(6, upper=64), env.create_symbol(100, upper=1000)
    meta = TensorMeta.of((rows, cols))
    gm = ptc_spec.roundtrip(ptc_spec.trace(_softmax, meta, shape_env=env, dialect="core/1"))
    compiled = ptc_inductor.compile(gm, config=config_from_env(backend=backend))
    source = compiled.cpp_source
    # The range's top (1000) fits one tile of 1024 lanes at every size the guards admit.
    assert "persistent kernel" in source and "s1 = s1.to(tl.int32)" in source
    for shape in [(6, 100), (2, 2), (64, 1000), (3, 513)]:
        compare_with_eager(compiled, gm, torch.randn(*shape))


@pytest.mark.parametrize("backend", TRITON)
def test_a_contiguous_symbolic_kernel_addresses_by_its_flat_index(backend: str) -> None:
    # A (batch, seq, features) GELU-like chain plus a bias over features, batch and seq symbolic:
    # the contiguous loads and the store go through one run of all three dims (xindex itself),
    # the bias through the last dim's.
    def fn(x: Any, b: Any) -> Any:
        return aten.mul.Tensor(aten.erf.default(aten.add.Tensor(x, b)), 0.5)

    dyn = compile_dynamic(fn, D((2, 5, 24), (0, 1)), D((24,), ()), backend=backend)
    source = dyn.compiled.cpp_source
    assert "xr0_2 = xindex\n" in source and "tl.load(arg0 + xr0_2," in source and "tl.load(arg1 + x2," in source, source
    assert re.search(r"tl\.store\(\w+ \+ xr0_2\b", source), source
    dyn.run_all(sizes_of(s0=[2, 3, 4], s1=[5, 7, 33]))


def test_each_symbol_is_read_once_from_the_first_input_that_has_it() -> None:
    def fn(a: Any, b: Any) -> Any:
        return aten.add.Tensor(aten.sum.dim_IntList(a, [0]), aten.sum.dim_IntList(b, [1]))

    dyn = compile_dynamic(fn, D((4, 7), (0, 1)), D((7, 5), (0, 1)))
    # The trace learnt that a's columns and b's rows are one size: s2 is written s1.
    assert [(s.name, s.input, s.kind, s.dim) for s in dyn.compiled.symbols] == [("s0", 0, "size", 0), ("s1", 0, "size", 1), ("s3", 1, "size", 1)]
    assert dyn.compiled.symbol_values(torch.empty(3, 9), torch.empty(9, 2)) == {"s0": 3, "s1": 9, "s3": 2}
    dyn.run_all(sizes_of(s0=[4, 2], s1=[7, 3], s2=[7, 3], s3=[5, 2]))


def test_a_symbolic_scalar_input_is_read_from_the_argument() -> None:
    env = SymbolEnv()
    x = ptc_spec.dynamic_meta(TensorMeta.of((6, 8)), [0], env)
    scale = env.create_symbol(3)
    gm = ptc_spec.trace(lambda a: aten.mul.Tensor(a, a.shape[0]), x, shape_env=env, dialect="core/1")
    # A SymInt graph input (as capture makes them): the multiplier becomes that input.
    graph = gm.graph
    first = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_after(first):
        k = graph.placeholder("k")
    k.meta[ptc_spec.META_KEY] = scale
    mul = next(n for n in graph.nodes if n.target is aten.mul.Tensor)
    mul.args = (mul.args[0], k)
    graph.eliminate_dead_code()
    gm.recompile()
    compiled = ptc_inductor.compile(gm)
    assert [(s.name, s.kind) for s in compiled.symbols] == [("s0", "size"), ("s1", "scalar")]
    a = torch.randn(5, 8)
    compare_with_eager(compiled, gm, a, 7)


def test_storage_is_reused_only_between_buffers_of_provably_equal_size() -> None:
    def fn(x: Any, y: Any, w: Any, v: Any) -> Any:
        g1 = aten.mm.default(aten.sin.default(aten.mm.default(aten.exp.default(x), w)), v)
        g2 = aten.mm.default(aten.sin.default(aten.mm.default(aten.exp.default(y), w)), v)
        return g2, aten.mm.default(aten.cos.default(g1), v)

    # x and y have the same example size: a plan by hints would let y's buffers take x's storage.
    dyn = compile_dynamic(fn, D((6, 4), (0,)), D((6, 4), (0,)), D((4, 3)), D((3, 3)))
    plan, buffers = dyn.compiled.memory_plan, {b.name: b for s in dyn.compiled.schedule.kernels for n in s.nodes for b in n.outputs}
    # A kernel may write over an extern result it reads last (in-place reuse): those count too.
    buffers.update({b.name: b for s in dyn.compiled.schedule.steps if isinstance(s, ExternNode) for b in s.outputs if b is not None})
    shared = [(name, storage) for name, storage in plan.storage.items() if name != storage]
    assert shared and all(buffers[name].layout.size == buffers[storage].layout.size for name, storage in shared)
    dyn.run_all(sizes_of(s0=[6, 2, 9], s1=[6, 11, 3]))


def test_a_symbol_only_inside_an_input_size_expression_is_refused_clearly() -> None:
    env = SymbolEnv()
    half = env.create_symbol(3)
    gm = ptc_spec.trace(lambda a: aten.exp.default(a), TensorMeta.of((2 * half,)), shape_env=env, dialect="core/1")
    with pytest.raises(ptc_inductor.LoweringError, match=r"s0 are not a whole dim or stride of any graph input"):
        ptc_inductor.compile(gm)


def test_a_graph_of_static_sizes_reads_no_symbols() -> None:
    gm = ptc_spec.trace(_softmax, TensorMeta.of((4, 6)), dialect="core/1")
    compiled = ptc_inductor.compile(gm)
    assert compiled.symbols == () and "int64_t" not in compiled.cpp_source.split('extern "C"')[1].split(")")[0]


def test_large_outputs_of_changing_size_are_recycled_and_never_shared_while_alive() -> None:
    dyn = compile_dynamic(lambda a: aten.exp.default(a), D((300, 1024), (0,)))
    assert "take_sized((s0, 1024, ), (1024, 1, ), (4096 * s0))" in dyn.compiled.wrapper_source
    kept = []
    for rows in (300, 600, 300, 10, 700):
        x = torch.randn(rows, 1024)
        out = dyn.compiled(x)
        torch.testing.assert_close(out, x.exp())
        kept.append(out)
    pointers = [t.data_ptr() for t in kept]
    assert len(set(pointers)) == len(pointers)
    for t, rows in zip(kept, (300, 600, 300, 10, 700)):
        assert t.shape == (rows, 1024)


@pytest.mark.slow
def test_dynamic_triton_kernels_compile_for_an_sm90_target_without_a_gpu(tmp_path: Path) -> None:
    # The interpreter does not type-check like the compiler: compile real cubins, with the size
    # arguments typed i64 and not specialized, for looped, persistent (bounded) and flat kernels.
    script = textwrap.dedent(
        """
        import torch, ptc_spec, ptc_inductor
        from ptc_spec import SymbolEnv, TensorMeta, dynamic_meta
        from ptc_inductor import sizes
        from ptc_inductor.codegen.triton import generate_triton_kernel
        from ptc_inductor.codegen.triton_heuristics import default_config
        from ptc_inductor.lowering import lower_graph
        from ptc_inductor.scheduler import schedule
        from ptc_inductor.triton_runtime import _compile_in_worker, _constexprs, canonical, signature, write_module
        aten = torch.ops.aten
        def softmax(x):
            e = aten.exp.default(aten.sub.Tensor(x, aten.amax.default(x, [1], True)))
            return aten.div.Tensor(e, aten.sum.dim_IntList(e, [1], True)), aten.argmax.default(x, 1)
        cfg = ptc_inductor.config_from_env(backend="triton")
        env = SymbolEnv()
        free = dynamic_meta(TensorMeta.of((37, 129)), [0, 1], env)
        bounded = TensorMeta.of((env.create_symbol(6, upper=64), env.create_symbol(100, upper=1000)))
        graphs = [(softmax, free), (softmax, bounded), (lambda x: aten.mul.Tensor(aten.exp.default(x), x.shape[0]), free)]
        n = 0
        for fn, meta in graphs:
            low = lower_graph(ptc_spec.trace(fn, meta, shape_env=env, dialect="core/1"), cfg)
            with sizes.use(low.sizes):
                sched = schedule(low.nodes, cfg, low.output_buffers)
                kernels = [generate_triton_kernel(k, low.buffers, sched.accesses, cfg) for k in sched.kernels]
            for k in kernels:
                assert k.sizes, k.name
                c = default_config(k.style, k.xnumel_hint, k.rnumel_hint, k.rblock, k.strided, k.rows)
                path = write_module(k, CACHE_DIR)
                b = _compile_in_worker(path, canonical(k).symbol, signature(k), _constexprs(k, c), tuple(True for _ in k.params), c.num_warps, 1, ("cuda", 90, 32))
                assert b.plain and b.cubin[:4] == bytes([0x7F]) + b"ELF", b
                n += 1
        assert n >= 3, n
        print("compiled", n)
        """
    ).replace("CACHE_DIR", repr(str(tmp_path)))
    tests = Path(__file__).parent
    paths = [str(tests.parent / "src"), str(tests.parent.parent / "ptc-spec" / "src"), str(tests)]
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "compiled" in out.stdout


def test_a_symbolic_row_is_cached_when_it_fits_and_recomputed_otherwise() -> None:
    dyn = compile_dynamic(_softmax, D((6, 10), (0, 1)))
    source = dyn.compiled.cpp_source
    assert "if (s1 <= 8192)" in source and "alignas(64) float row0[8192];" in source
    # Rows on both sides of the buffer's size, with threads and without.
    dyn.run_all(sizes_of(s0=[6, 2, 40, 3], s1=[10, 8192, 8193, 9000]))


def _efficient_attention(q: Any, k: Any, v: Any, mask: Any) -> Any:
    # What eager's scaled_dot_product_attention hands the memory-efficient kernel: the bias
    # padded to rows of 16 and sliced back (a view with aligned row strides).
    t = mask.shape[-1]
    bias = aten.slice.Tensor(aten.constant_pad_nd.default(mask, [0, (16 - t % 16) % 16]), -1, 0, t)
    return aten._scaled_dot_product_efficient_attention.default(q, k, v, bias, False)[0]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_memory_efficient_attention_gets_its_bias_in_aligned_rows(dynamic: bool) -> None:
    from ptc_inductor.ir import BufferArg, ExternNode
    from ptc_inductor.lowering import lower_graph

    env = SymbolEnv()
    cuda = torch.device("cuda")
    metas = [TensorMeta.of((2, 4, 17, 8), device=cuda) for _ in range(3)] + [TensorMeta.of((2, 4, 17, 17), device=cuda)]
    if dynamic:
        metas = [ptc_spec.dynamic_meta(m, [2] if i < 3 else [2, 3], env) for i, m in enumerate(metas)]
    gm = ptc_spec.trace(_efficient_attention, *metas, shape_env=env, dialect="core/1")
    lowered = lower_graph(gm, config_from_env(backend="triton"))
    (call,) = [n for n in lowered.nodes if isinstance(n, ExternNode)]
    bias = call.args[3]
    assert isinstance(bias, BufferArg) and bias.stride[-1] == 1
    # The kernel rejects a bias whose strides are not multiples of 16 bytes' worth of elements
    # (a compact 17x17 bias has row stride 17 and head stride 289).
    for length in (17, 5, 31, 64):
        values = dict.fromkeys(env.symbols, length)
        strides = [int(sympy.sympify(s).subs(values)) for s in bias.stride[:-1]]
        padded = -(-length // 16) * 16 if dynamic else 32
        assert strides[-1] == padded and all(s % 16 == 0 for s in strides), (length, strides)
        if not dynamic:
            break


@pytest.mark.parametrize("backend", TRITON)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_over_one_symbolic_row_share_one_loop_at_every_size(backend: str, dtype: torch.dtype) -> None:
    def fn(x: Any) -> Any:
        wide = aten._to_copy.default(x, dtype=torch.float32)
        return aten.sum.dim_IntList(wide, [1]), aten.sum.dim_IntList(aten.mul.Tensor(wide, wide), [1]), aten.amax.default(wide, [1])

    dyn = compile_dynamic(fn, D((6, 10), (0, 1), dtype), backend=backend)
    assert dyn.compiled.cpp_source.count("for roffset in range(0, s1, RBLOCK):") == 1, dyn.compiled.cpp_source
    dyn.run_all(sizes_of(s0=[6, 1025, 2], s1=[10, 3, 4099]))
