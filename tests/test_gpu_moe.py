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


def test_add_norm_router_equals_the_add_the_norm_and_the_router():
    """One kernel for the residual add, F.rms_norm and the router's F.linear: 1 and 3 tokens,
    hidden 1,000 (a masked row) and 20 experts (three tiles of 8, the last masked); the sum to
    rounding of the dtype's add, the norm and the logits to the kernel tolerance. Bad shapes
    are refused by name."""
    g = torch.Generator(device=DEVICE).manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g, device=DEVICE, dtype=DTYPE)  # noqa: E731
    norm_w, router = r(1000), r(20, 1000) * 0.05
    for tokens in (1, 3):
        x, a = r(tokens, 1000), r(tokens, 1000)
        got_x, got_h, logits = moe_kernels.add_norm_router(x, a, norm_w, router, 1e-6)
        want_x = x + a
        want_h = F.rms_norm(want_x, (1000,), norm_w, 1e-6)
        assert got_x.dtype == got_h.dtype == logits.dtype == DTYPE and logits.shape == (tokens, 20)
        torch.testing.assert_close(got_x, want_x, rtol=0, atol=0)
        torch.testing.assert_close(got_h.float(), want_h.float(), **TOL)
        torch.testing.assert_close(logits.float(), F.linear(want_h, router).float(), **TOL)
    with pytest.raises(ValueError, match=r"x, a \[T, H\] and a router \[E, H\]; got \(3, 1000\)"):
        moe_kernels.add_norm_router(x, a[:, :999], norm_w, router, 1e-6)


@pytest.mark.parametrize("tokens", [1, 2])
def test_experts_routed_inside_the_gemvs_equal_route_then_pair_gemv(tokens):
    """routed_mlp_from_logits (the first GEMV routes each token from the logits and hands the
    second its experts and weights) against `route` then routed_mlp: with and without
    renormalisation, SiLU fused into the second GEMV and GELU (its own op); 20 experts (not a
    power of 2), top 8."""
    t, gate_up, down, _, _ = problem(tokens, experts=20)
    logits = torch.randn(tokens, 20, generator=torch.Generator().manual_seed(4)).to(DEVICE, DTYPE)
    for renorm in (True, False):
        weight, expert = moe_kernels.route(logits, 8, renorm, DTYPE)
        _, got_e, got_w = moe_kernels.routed_gemv(t, gate_up, logits, 8, renorm, row_div=8)
        assert torch.equal(got_e, expert.reshape(-1)) and torch.equal(got_w, weight.reshape(-1))
        for act in (F.silu, F.gelu):
            got = moe_kernels.routed_mlp_from_logits(t, gate_up, down, logits, 8, renorm, act)
            want = moe_kernels.routed_mlp(t, gate_up, down, expert, weight, act)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="1 <= k <= 20 experts; got k=0"):
        moe_kernels.routed_mlp_from_logits(t, gate_up, down, logits, 0, True, F.silu)


@on_gpu_only
@pytest.mark.parametrize("fused", [False, True])
def test_pair_gemv_in_a_cuda_graph_and_compiled(fused):
    """The pair GEMVs given experts and weights, or (`fused`) the add, norm and router kernel
    and then GEMVs that route inside: replayed in a CUDA graph on new inputs and compiled."""
    t, gate_up, down, expert, weight = problem(8)
    a, norm_w = torch.randn_like(t), torch.rand_like(t[0]) + 0.5
    router = torch.randn(gate_up.shape[0], t.shape[1], device=DEVICE, dtype=DTYPE) * 0.05

    def run():
        if not fused:
            return moe_kernels.routed_mlp(t, gate_up, down, expert, weight, F.silu)
        x, h, logits = moe_kernels.add_norm_router(t, a, norm_w, router, 1e-6)
        return x + moe_kernels.routed_mlp_from_logits(h, gate_up, down, logits, 8, True, F.silu)

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
    (pairs <= MAX_PAIRS) through the pair GEMV, with each fusion on and off, give the other
    path's logits and states (grouped GEMMs on CUDA, every expert weighted on CPU) to rounding."""
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
    # the add, norm and router fused with routing inside the GEMVs; routing and SiLU fused;
    # neither
    cases = ((1, True, True), (8, True, True), (1, True, False), (1, False, False))
    for width, fused, router in cases:
        pair.fused_moe, pair.fused_router = fused, router
        assert pair._router_fused(pair.layers[0], width) == (fused and router)
        ids, pos = seq[:, :width], torch.arange(12, 12 + width, device=DEVICE)[None]
        for a, b in zip(pair(ids, pos), grouped(ids, pos), strict=True):
            torch.testing.assert_close(a.float(), b.float(), **STEP_TOL)
