"""The Triton pair GEMV and router of a mixture of experts
(splitserve/target/runtime/moe_kernels.py) against fp32 arithmetic, PyTorch's routing and the
grouped-GEMM path, eagerly, in a CUDA graph and compiled (skipped without a GPU and Triton; run on
the device machine: `python -m pytest -q tests/test_gpu_moe.py`). The arithmetic tests also run
on CPU tensors in fp32 under Triton's interpreter (tests/test_kernels_interpreted.py)."""

import pytest
import torch
import torch.nn.functional as F
from interpreted import DEVICE, DTYPE, INTERPRETED, STEP_TOL, TOL, kernels_run, on_gpu_only

from splitserve.target.runtime import moe_kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not kernels_run(moe_kernels), reason="needs a CUDA device and Triton"),
]


def problem(tokens: int, experts=16, k=8, hidden=200, inter=96, seed=0):
    """Dims not multiples of the kernel's tiles, so its masks are exercised."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, device=DEVICE, dtype=DTYPE)  # noqa: E731
    t = r(tokens, hidden)
    gate_up, down = r(experts, 2 * inter, hidden) * 0.1, r(experts, hidden, inter) * 0.1
    probs = F.softmax(r(tokens, experts).float(), -1)
    weight, expert = probs.topk(k, dim=-1)
    return t, gate_up, down, expert, weight.to(DTYPE)


def reference(t, gate_up, down, expert, weight):
    out = torch.zeros(t.shape, dtype=torch.float32, device=DEVICE)
    for i in range(t.shape[0]):
        for j in range(expert.shape[1]):
            e = int(expert[i, j])
            gate, up = (gate_up[e].float() @ t[i].float()).chunk(2)
            a = (F.silu(gate) * up).to(DTYPE).float()  # the second GEMV reads it in DTYPE
            out[i] += weight[i, j].float() * (down[e].float() @ a)
    return out


@pytest.mark.parametrize("tokens", [1, 8, 16])
def test_pair_gemv_equals_fp32_arithmetic(tokens):
    """With SiLU applied by the second GEMV (the default) and as its own op."""
    args = problem(tokens)
    for fuse_act in (True, False):
        got = moe_kernels.routed_mlp(*args, act=F.silu, fuse_act=fuse_act)
        assert got.dtype == DTYPE and got.shape == args[0].shape
        torch.testing.assert_close(got.float(), reference(*args), **TOL)


@pytest.mark.parametrize("renorm", [True, False])
def test_route_equals_softmax_top_k(renorm):
    """The router kernel against PyTorch's softmax, top-k and renormalisation (Qwen3-MoE's),
    over 20 experts (not a power of 2), 1 to 9 tokens of distinct logits (CUDA's top-k orders
    ties arbitrarily); equal logits give the lowest ids first; a NaN logit still gives ids in
    range (the weights are NaN, as PyTorch's are)."""
    g = torch.Generator().manual_seed(1)
    for tokens in (1, 9):
        ranks = torch.stack([torch.randperm(20, generator=g) for _ in range(tokens)])
        logits = (ranks.float() * 0.25 - 2.0).to(DEVICE, DTYPE)  # distinct in bf16 too
        weight, expert = moe_kernels.route(logits, 8, renorm, DTYPE)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        want_w, want_e = probs.topk(8, dim=-1)
        if renorm:
            want_w = want_w / want_w.sum(-1, keepdim=True)
        assert expert.dtype == torch.long and weight.dtype == DTYPE
        assert torch.equal(expert, want_e)
        torch.testing.assert_close(weight, want_w.to(DTYPE), **TOL)
    tied = torch.zeros(1, 20, device=DEVICE, dtype=DTYPE)
    tied[0, [3, 11]] = 1.0
    weight, expert = moe_kernels.route(tied, 4, False, DTYPE)
    assert expert[0].tolist() == [3, 11, 0, 1]
    for experts in (20, 32):  # padded lanes, and none
        bad = torch.zeros(2, experts, device=DEVICE, dtype=DTYPE)
        bad[0, 5] = float("nan")
        bad[1, 7] = float("inf")
        for renorm in (True, False):
            weight, expert = moe_kernels.route(bad, 4, renorm, DTYPE)
            assert expert.min() >= 0 and expert.max() < experts, expert
            assert weight.isnan().all(), weight
    with pytest.raises(ValueError, match="1 <= k <= 20 experts; got k=21"):
        moe_kernels.route(tied, 21, False, DTYPE)


@on_gpu_only
def test_pair_gemv_in_a_cuda_graph_and_compiled():
    t, gate_up, down, expert, weight = problem(8)
    run = lambda: moe_kernels.routed_mlp(t, gate_up, down, expert, weight, F.silu)  # noqa: E731
    eager = run()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm-up outside the capture (the kernel compiles here)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    t.copy_(problem(8, seed=1)[0])  # new inputs, same buffers
    graph.replay()
    torch.testing.assert_close(out, run(), rtol=0, atol=0)
    assert not torch.equal(out, eager)
    compiled = torch.compile(run, fullgraph=True)  # the op traced whole; with SiLU between the
    # GEMVs inductor fused it in fp32 and bf16 rounding differed (exact: 1 failed, H200)
    torch.testing.assert_close(compiled(), run(), rtol=2e-2, atol=2e-2)


def test_static_decoder_steps_with_the_pair_gemv_as_with_grouped_gemms():
    """A tiny Qwen3-MoE target (bf16 on CUDA, fp32 interpreted): verify steps of widths 1 and 8
    (pairs <= MAX_PAIRS) through the pair GEMV give the other path's logits and states (grouped
    GEMMs on CUDA, every expert weighted on CPU) to rounding."""
    from test_static_families import family_target

    from splitserve.target.runtime.static_model import StaticDecoder

    model = family_target("qwen3_moe").to(DEVICE, DTYPE)
    seq = torch.randint(1, 96, (1, 12), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    pair = StaticDecoder(model, max_rows=1, max_len=24, capture_ids=[0, 2])
    grouped = StaticDecoder(model, max_rows=1, max_len=24, capture_ids=[0, 2])
    assert pair.pair_gemv or INTERPRETED  # (the runtime takes it on CUDA only)
    pair.pair_gemv, grouped.pair_gemv = True, False
    for net in (pair, grouped):
        net(seq, torch.arange(12, device=DEVICE)[None], fresh=True)  # the same prompt in both
    for width, fused in ((1, True), (8, True), (1, False)):  # routing and SiLU fused, or not
        pair.fused_moe = fused
        ids, pos = seq[:, :width], torch.arange(12, 12 + width, device=DEVICE)[None]
        for a, b in zip(pair(ids, pos), grouped(ids, pos), strict=True):
            torch.testing.assert_close(a.float(), b.float(), **STEP_TOL)
