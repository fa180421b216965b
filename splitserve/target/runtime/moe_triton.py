"""The Triton code of the MoE's width-1 kernels (moe_kernels, which documents the method and
imports this module only where Triton and a CUDA device, or Triton's interpreter, are)."""

import triton
import triton.language as tl


@triton.jit
def top_k(
    logits, E, TOP: tl.constexpr, RENORM: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_TOP: tl.constexpr,
):  # fmt: skip
    """One token's router over its E logits at `logits`: softmax (fp32), the TOP largest
    probabilities in descending order (the lowest id first among equals), renormalised to
    sum 1 when RENORM. Returns (weights fp32, ids int64), [BLOCK_TOP] each."""
    ids = tl.arange(0, BLOCK_E)
    x = tl.load(logits + ids, mask=ids < E, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, 0))
    z = tl.sum(p, 0)  # padded ids: exp(-inf) = 0; NaN after a NaN or inf logit
    p = p / z
    # taken and padded ids fall below every probability; so does NaN (a NaN or inf logit:
    # a GPU's max skips NaN, and no id may then be picked out of range)
    left = tl.where((ids < E) & (p == p), p, -1.0)
    slot = tl.arange(0, BLOCK_TOP)
    top = tl.zeros((BLOCK_TOP,), tl.float32)
    which = tl.zeros((BLOCK_TOP,), tl.int64)
    for j in tl.static_range(TOP):
        best = tl.max(left, 0)
        pick = tl.minimum(tl.min(tl.where(left == best, ids, BLOCK_E), 0), E - 1)
        top = tl.where(slot == j, best, top)
        which = tl.where(slot == j, pick.to(tl.int64), which)
        left = tl.where(ids == pick, -1.0, left)
    if RENORM:
        top = top / tl.sum(tl.where(slot < TOP, top, 0.0), 0)
    top = tl.where(z == z, top, float("nan"))  # a broken row's weights stay NaN, as PyTorch's
    return top, which


@triton.jit
def pair_gemv(
    x, w, expert, scale, logits, out, K, N, row_div, E,
    HAS_SCALE: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr, TOP: tl.constexpr,
    RENORM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_E: tl.constexpr, BLOCK_TOP: tl.constexpr,
):  # fmt: skip
    """out[p] = w[expert[p]] @ x[p // row_div] (times scale[p] with HAS_SCALE); GATED: x's
    rows are [gate | up] (2K wide) and the product is with silu(gate) * up, rounded to x's
    dtype where the eager ops round (the GPU's sigmoid is approximate: equal to rounding).
    ROUTED (no scale): pair p is token p // TOP's (p % TOP)-th expert by `top_k` over its
    router logits (E a token); each program routes its own token (a softmax and TOP maxima
    over E values), so no routing kernel runs before, and the first program of a pair writes
    its expert and its weight (in scale's dtype) to `expert` and `scale` for the next GEMV."""
    pair = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if ROUTED:
        top, which = top_k(
            logits + (pair // TOP).to(tl.int64) * E, E, TOP, RENORM, BLOCK_E, BLOCK_TOP
        )
        mine = tl.arange(0, BLOCK_TOP) == pair % TOP
        e = tl.sum(tl.where(mine, which, 0), 0)
        if tl.program_id(1) == 0:
            tl.store(expert + pair, e)
            tl.store(scale + pair, tl.sum(tl.where(mine, top, 0.0), 0).to(scale.dtype.element_ty))
    else:
        e = tl.load(expert + pair).to(tl.int64)
    row = x + (pair // row_div).to(tl.int64) * (2 * K if GATED else K)
    tile = w + e * N * K + cols[:, None].to(tl.int64) * K
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        xk = tl.load(row + ks, mask=ks < K, other=0.0)
        if GATED:  # F.silu(gate) in x's dtype, then * up in x's dtype
            g = xk.to(tl.float32)
            a = (g * tl.sigmoid(g)).to(xk.dtype).to(tl.float32)
            up = tl.load(row + K + ks, mask=ks < K, other=0.0).to(tl.float32)
            xk = (a * up).to(xk.dtype)
        wk = tl.load(tile + ks[None, :], mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0)
        acc += tl.sum(wk.to(tl.float32) * xk.to(tl.float32)[None, :], axis=1)
    if HAS_SCALE:
        acc = acc * tl.load(scale + pair).to(tl.float32)
    tl.store(out + pair.to(tl.int64) * N + cols, acc.to(out.dtype.element_ty), mask=cols < N)


@triton.jit
def norm_router_kernel(
    x, a, norm_w, router, x_out, h_out, logits_out, H, E, eps,
    BLOCK_H: tl.constexpr, BLOCK_EC: tl.constexpr,
):  # fmt: skip
    """Token t's residual x + a, its RMSNorm h (fp32 inside, weight applied before the cast,
    as F.rms_norm) and router logits for BLOCK_EC experts (fp32 sums, rounded to x's dtype
    as F.linear's are). Every program of the token computes the norm (a row of H): the
    first writes the sum and h."""
    t = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    cols = tl.arange(0, BLOCK_H)
    live = cols < H
    xs = tl.load(x + t * H + cols, mask=live, other=0.0)
    add = tl.load(a + t * H + cols, mask=live, other=0.0)
    s = (xs.to(tl.float32) + add.to(tl.float32)).to(xs.dtype)
    sf = s.to(tl.float32)
    eps32 = tl.cast(eps, tl.float32)  # Inductor passes a Python float as fp64
    rstd = 1.0 / tl.sqrt(tl.sum(sf * sf, 0) / H + eps32)
    wn = tl.load(norm_w + cols, mask=live, other=0.0).to(tl.float32)
    h = (sf * rstd * wn).to(xs.dtype)
    if tile == 0:
        tl.store(x_out + t * H + cols, s, mask=live)
        tl.store(h_out + t * H + cols, h, mask=live)
    es = tile * BLOCK_EC + tl.arange(0, BLOCK_EC)
    wr = tl.load(
        router + es[:, None].to(tl.int64) * H + cols[None, :],
        mask=(es[:, None] < E) & live[None, :], other=0.0,
    )  # fmt: skip
    logit = tl.sum(wr.to(tl.float32) * h.to(tl.float32)[None, :], axis=1)
    tl.store(logits_out + t * E + es, logit.to(logits_out.dtype.element_ty), mask=es < E)


@triton.jit
def route_kernel(
    logits, weight, expert, E, TOP: tl.constexpr, RENORM: tl.constexpr,
    BLOCK_E: tl.constexpr, BLOCK_TOP: tl.constexpr,
):  # fmt: skip
    """`top_k` of one token's logits: weights in weight's dtype, ids int64."""
    t = tl.program_id(0).to(tl.int64)
    top, which = top_k(logits + t * E, E, TOP, RENORM, BLOCK_E, BLOCK_TOP)
    slot = tl.arange(0, BLOCK_TOP)
    tl.store(weight + t * TOP + slot, top.to(weight.dtype.element_ty), mask=slot < TOP)
    tl.store(expert + t * TOP + slot, which, mask=slot < TOP)
