"""Dynamic shapes end to end: one compile for many sizes, every stage, values and gradients as eager.

Each test runs the model at sizes other than the ones it was compiled for and compares with
eager; STATS counts the graphs the pipeline compiled (a training graph counts its forward and
backward).
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ptc
import ptc_spec
from ptc.pipeline import STATS
from ptc_spec.testing import assert_same, compare_with_eager

BACKENDS = ["aot_eager", "inductor"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def counted() -> None:
    STATS.reset()


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, block: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class TinyGPT(nn.Module):
    """nanoGPT's shape: token and position embeddings, pre-norm blocks, tied head."""

    def __init__(self, vocab: int = 97, dim: int = 32, heads: int = 4, layers: int = 2, block: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln1": nn.LayerNorm(dim),
                    "attn": _Attention(dim, heads, block),
                    "ln2": nn.LayerNorm(dim),
                    "mlp": nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.0)),
                }
            )
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t = idx.size()
        assert t <= self.pos.num_embeddings, f"cannot forward a sequence of {t}"
        x = self.tok(idx) + self.pos(torch.arange(0, t, dtype=torch.long, device=idx.device))
        for block in self.blocks:
            x = x + block["attn"](block["ln1"](x))
            x = x + block["mlp"](block["ln2"](x))
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _gpts() -> tuple[TinyGPT, TinyGPT]:
    torch.manual_seed(0)
    eager, model = TinyGPT(), TinyGPT()
    model.load_state_dict(eager.state_dict())
    return eager, model


LENGTHS = list(range(5, 21))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("dynamic", "graphs"), [(None, 2), (True, 1)])
def test_gpt_inference_over_sixteen_sequence_lengths(backend: str, dynamic: bool | None, graphs: int) -> None:
    eager, model = _gpts()
    eager.eval(), model.eval()
    compiled = ptc.compile(model, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        for t in LENGTHS:
            idx = torch.randint(0, 97, (2, t))
            assert_same(compiled(idx)[0], eager(idx)[0], what=f"logits at length {t}")
    assert STATS.graphs == graphs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpt_inference_under_autocast_over_sequence_lengths(dtype: torch.dtype) -> None:
    eager, model = _gpts()
    eager.eval(), model.eval()
    compiled = ptc.compile(model, dynamic=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        for t in (5, 11, 8, 19):
            idx = torch.randint(0, 97, (2, t))
            out, expected = compiled(idx)[0], eager(idx)[0]
            assert out.dtype == expected.dtype
            # Fused kernels round once where eager rounds after every op: judged on the scale.
            scale = float(expected.float().abs().max())
            assert float((out.float() - expected.float()).abs().max()) <= 0.05 * scale, f"length {t}"
    assert STATS.graphs == 1


def _train_over_lengths(backend: str, lengths: tuple[int, ...], device: str = "cpu") -> None:
    """SGD steps at each length, eager beside compiled: losses and gradients as eager's."""
    eager, model = _gpts()
    eager, model = eager.to(device), model.to(device)
    compiled = ptc.compile(model, backend=backend, dynamic=True)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.05)
    for t in lengths:
        idx, targets = torch.randint(0, 97, (3, t), device=device), torch.randint(0, 97, (3, t), device=device)
        loss_e = eager(idx, targets)[1]
        loss_c = compiled(idx, targets)[1]
        assert loss_e is not None and loss_c is not None
        assert_same(loss_c, loss_e, what=f"loss at length {t}")
        loss_e.backward()
        loss_c.backward()
        for (name, pe), pc in zip(eager.named_parameters(), model.parameters()):
            assert_same(pc.grad, pe.grad, what=f"grad of {name} at length {t}")
        opt_e.step(), opt_c.step()
        opt_e.zero_grad(), opt_c.zero_grad()
    # One forward and one backward for every length.
    assert STATS.graphs == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_training_over_sequence_lengths(backend: str) -> None:
    _train_over_lengths(backend, (7, 12, 9, 16, 7))


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_net_over_batch_sizes(backend: str) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).eval()  # fmt: skip
    compiled = ptc.compile(net, backend=backend)
    with torch.no_grad():
        for batch in (2, 3, 5, 8, 13, 4):
            compare_with_eager(compiled, net, torch.randn(batch, 3, 16, 16))
    assert STATS.graphs == 2


def test_conv_net_training_over_batch_sizes() -> None:
    torch.manual_seed(0)

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))

    eager, model = make(), make()
    compiled = ptc.compile(model, dynamic=True)
    for batch in (2, 5, 3):
        x = torch.randn(batch, 3, 8, 8)
        out_e, out_c = eager(x), compiled(x)
        assert_same(out_c, out_e, what=f"output at batch {batch}")
        out_e.square().mean().backward()
        out_c.square().mean().backward()
        for (name, pe), pc in zip(eager.named_parameters(), model.parameters()):
            assert_same(pc.grad, pe.grad, what=f"grad of {name} at batch {batch}")
        for (name, be), bc in zip(eager.named_buffers(), model.buffers()):
            assert_same(bc, be, what=f"buffer {name} at batch {batch}")
    assert STATS.graphs == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool_training_over_image_sizes(dtype: torch.dtype) -> None:
    """Max pooling's backward at symbolic image sizes (odd, non-square, with ceil-mode windows)."""

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1),
            nn.Conv2d(4, 4, 1), nn.MaxPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        ).to(dtype)  # fmt: skip

    eager, model = make(), make()
    compiled = ptc.compile(model, dynamic=True)
    for height, width in ((16, 16), (13, 11), (20, 9)):
        x = torch.randn(2, 3, height, width, dtype=dtype)
        out_e, out_c = eager(x), compiled(x)
        assert_same(out_c, out_e, what=f"output at {height}x{width}")
        out_e.float().square().mean().backward()
        out_c.float().square().mean().backward()
        for (name, pe), pc in zip(eager.named_parameters(), model.parameters()):
            assert_same(pc.grad, pe.grad, what=f"grad of {name} at {height}x{width}")
    # One forward and one backward graph served every size: the sizes were symbolic throughout.
    assert STATS.graphs == 2, STATS


def _branch(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] * 2 > 17:
        return x.softmax(-1) * x.shape[0]
    return x.sum(0) - x.shape[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_on_a_size_takes_both_sides_correctly(backend: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ptc.capture.recompiles")
    compiled = ptc.compile(_branch, backend=backend, dynamic=True)
    for n in (12, 9, 30, 3, 8, 2, 16):
        compare_with_eager(compiled, _branch, torch.randn(n, 5))
    # One graph for each side; the guard failing sent n = 3 to a second compile.
    assert STATS.graphs == 2
    assert "guard (2 * s0) > 17 failed with s0 = 3 (s0 is x.size(0))" in caplog.text


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_independent_dynamic_dims(backend: str) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x @ y).relu().sum(-1, keepdim=True) / x.shape[1] + x.mean(1, keepdim=True)

    compiled = ptc.compile(f, backend=backend)
    for n, k in ((4, 6), (7, 6), (4, 11), (9, 3), (13, 17)):
        compare_with_eager(compiled, f, torch.randn(n, k), torch.randn(k, 5))
    # Static first; (7, 6) makes n symbolic, (4, 11) makes k symbolic too; the rest hit.
    assert STATS.graphs == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_a_flattened_batch_beside_its_flattened_targets_reshapes_back(train: bool, dtype: torch.dtype) -> None:
    # The reshape back to (batch, seq, classes) equates seq with the targets' batch*seq over
    # batch; substituting that quotient put "1/s0" into a layout, and the compile failed.
    def f(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat = targets.flatten().unsqueeze(1).to(logits.dtype) + logits.flatten(0, 1)
        return (flat.view(logits.shape) * 2).tanh()

    compiled = ptc.compile(f, dynamic=True)
    for batch, seq in ((2, 3), (2, 5), (3, 9)):
        logits = torch.randn(batch, seq, 7, dtype=dtype, requires_grad=train)
        compare_with_eager(compiled, f, logits, torch.randint(0, 7, (batch, seq)), grads=train)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcasting_with_a_size_one_input(backend: str) -> None:
    def f(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return x * bias + bias.sum(0)

    compiled = ptc.compile(f, backend=backend, dynamic=True)
    for rows, bias_rows in ((6, 1), (9, 1), (6, 6), (11, 11), (3, 1)):
        compare_with_eager(compiled, f, torch.randn(rows, 8), torch.randn(bias_rows, 8))
    # Sizes of 1 are specialized: a bias of one row and a bias of n rows are two graphs.
    assert STATS.graphs == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_false_compiles_each_size(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x).sum(0)

    compiled = ptc.compile(f, backend=backend, dynamic=False)
    for n in (4, 5, 6, 7):
        compare_with_eager(compiled, f, torch.randn(n, 3))
    assert STATS.graphs == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_mark_dynamic_makes_the_first_compile_symbolic(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.layer_norm(x, x.shape[1:]) * 2

    compiled = ptc.compile(f, backend=backend)
    first = torch.randn(6, 10)
    ptc.mark_dynamic(first, 0)
    # (compare_with_eager passes copies, which would not carry the mark.)
    assert_same(compiled(first), f(first))
    for n in (7, 19, 3):
        compare_with_eager(compiled, f, torch.randn(n, 10))
    assert STATS.graphs == 1
    # The other dim stayed static: a change there recompiles.
    compare_with_eager(compiled, f, torch.randn(4, 12))
    assert STATS.graphs == 2


def test_mark_static_keeps_a_dim_static_under_dynamic_true() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(0) + x.shape[0]

    compiled = ptc.compile(f, dynamic=True)
    for n in (5, 6, 7):
        x = torch.randn(n, 4)
        ptc.mark_static(x, 0)
        assert_same(compiled(x), f(x))
    assert STATS.graphs == 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_views_and_reshapes_with_symbolic_sizes(backend: str, dtype: torch.dtype) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        y = x.reshape(b * t, c).t().unsqueeze(0)
        z = x.view(b, t, 2, c // 2).permute(0, 2, 1, 3).flatten(0, 1)
        return y.sum(-1).expand(b, -1) + z.amax(1).reshape(b, -1)[:, :c] + x[:, -1] + x.narrow(1, 1, t - 1).mean(1)

    compiled = ptc.compile(f, backend=backend, dynamic=True)
    for b, t in ((2, 5), (3, 9), (4, 4), (2, 17)):
        compare_with_eager(compiled, f, torch.randn(b, t, 6, dtype=dtype))
    assert STATS.graphs == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_split_and_pad_with_symbolic_sizes(backend: str, dtype: torch.dtype) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        both = torch.cat([x, y.relu(), x * 2], dim=0)
        head, tail = both.split([x.shape[0], both.shape[0] - x.shape[0]], dim=0)
        chunks = torch.chunk(tail, 2, dim=0)
        padded = F.pad(head, (1, 2, 0, 3), value=0.5)
        return padded.sum(0) + chunks[0].mean(0).sum() + torch.stack([x, x + 1], 1).flatten(0, 1).sum()

    compiled = ptc.compile(f, backend=backend, dynamic=True)
    for n, m in ((3, 5), (4, 6), (7, 9), (5, 5)):
        compare_with_eager(compiled, f, torch.randn(n, 8, dtype=dtype), torch.randn(m, 8, dtype=dtype))
    # The split keeps x's length and the rest symbolic, so one graph serves every pair.
    assert STATS.graphs == 1


def test_sizes_returned_to_python_are_this_calls_sizes() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int, torch.Size]:
        y = x.flatten()
        return y * 2, y.numel() + 1, y.shape

    compiled = ptc.compile(f, dynamic=True)
    for n in (3, 8, 5):
        out, count, shape = compiled(torch.randn(n, 3))
        assert count == 3 * n + 1 and shape == torch.Size([3 * n]) and out.shape == (3 * n,)
    assert STATS.graphs == 1


def test_graph_files_with_symbolic_sizes_round_trip() -> None:
    seen: list[tuple[torch.fx.GraphModule, list[torch.Tensor]]] = []

    def recording(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        seen.append((gm, list(example_inputs)))
        return gm.forward

    eager, model = _gpts()
    eager.eval(), model.eval()
    with torch.no_grad():
        ptc.compile(model, backend=recording, dynamic=True)(torch.randint(0, 97, (2, 9)))
    ((gm, examples),) = seen
    again = ptc_spec.loads(ptc_spec.dumps(gm))
    env, env_again = ptc_spec.shape_env_of(gm), ptc_spec.shape_env_of(again)
    assert env is not None and env_again is not None and env.symbols
    assert env_again.guards == env.guards and env_again.symbols == env.symbols

    def metas(g: torch.fx.GraphModule) -> list[str]:
        return [str(n.meta[ptc_spec.META_KEY]) for n in g.graph.nodes if ptc_spec.META_KEY in n.meta]

    assert metas(again) == metas(gm)
    reloaded = [n.meta[ptc_spec.META_KEY] for n in again.graph.nodes if n.op == "placeholder"]
    assert any(isinstance(m, ptc_spec.TensorMeta) and m.is_symbolic for m in reloaded)
    # The reloaded graph runs at lengths it was not traced at: swap the token input for a longer one.
    (position,) = [i for i, t in enumerate(examples) if t.dtype == torch.long and t.shape == (2, 9)]
    with torch.no_grad():
        for t in (4, 13):
            idx = torch.randint(0, 97, (2, t))
            args = list(examples)
            args[position] = idx
            out = again(*args)
            logits = out[0] if isinstance(out, (tuple, list)) else out
            assert_same(logits, eager(idx)[0], what=f"reloaded graph at length {t}")


def test_data_dependent_sizes_run_as_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        picked = x[x > 0]
        n = int((x > 1).sum().item())
        return picked.sum() + torch.ones(n).sum() + x.nonzero().shape[0]

    compiled = ptc.compile(f, dynamic=True)
    for n in (5, 9, 12):
        compare_with_eager(compiled, f, torch.randn(n, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("dynamic", "graphs"), [(None, 2), (True, 1)])
def test_gpt_on_cuda_over_sequence_lengths(dtype: torch.dtype, dynamic: bool | None, graphs: int) -> None:
    eager, model = _gpts()
    eager, model = eager.cuda().to(dtype).eval(), model.cuda().to(dtype).eval()
    # bf16 results are judged against a float32 model of the same (rounded) weights: ptc's
    # error must be no worse than eager's own (its fused kernels round less often).
    reference = _gpts()[0].cuda().eval()
    reference.load_state_dict({k: v.float() for k, v in eager.state_dict().items()})
    compiled = ptc.compile(model, dynamic=dynamic)
    with torch.no_grad():
        # (Not 64, the causal mask's length: there the sliced mask is contiguous, which changes
        # the layout of what reads it; torch.compile recompiles at that length too.)
        for t in LENGTHS + [33, 47]:
            idx = torch.randint(0, 97, (2, t), device="cuda")
            out, expected = compiled(idx)[0], eager(idx)[0]
            if dtype == torch.float32:
                assert_same(out, expected, what=f"logits at length {t}")
                continue
            assert out.dtype == expected.dtype and out.shape == expected.shape
            exact = reference(idx)[0]
            ours, eagers = (out.float() - exact).square().mean().sqrt(), (expected.float() - exact).square().mean().sqrt()
            assert ours <= 1.25 * eagers, f"length {t}: RMS error {ours:.3e} against eager's {eagers:.3e}"
    assert STATS.graphs == graphs


@pytest.mark.gpu
def test_gpt_training_on_cuda_over_sequence_lengths() -> None:
    _train_over_lengths("inductor", (7, 12, 9, 16, 63), device="cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cross_entropy_over_symbolic_rows_trains_as_eager(dtype: torch.dtype) -> None:
    # log_softmax is decomposed in the joint graph before partitioning, over symbolic sizes
    # here: its guards join the program's, and every batch size gets eager's loss and gradients.
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 11).to(dtype)

    def step(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(x).float(), targets, ignore_index=3)

    compiled = ptc.compile(step, dynamic=True)
    for rows in (6, 9, 13):
        x, targets = torch.randn(rows, 16, dtype=dtype, requires_grad=True), torch.randint(0, 11, (rows,))
        compare_with_eager(compiled, step, x, targets, grads=True)
