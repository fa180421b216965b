"""Decode attention over the static cache: each row's real context, split over the keys.

A decode or verify step has a handful of queries per row, so SDPA's kernels (tiles of 64+ query
rows, every cache position up to the step's extent read and masked) read far more than they use:
on one H200 a SmolLM2 regeneration step spent 1.9 of 6.4 ms in attention (and a variant of the
8B-shape step 24 of 37 ms). Here one program
takes one (row, key head, key chunk): every query of the row whose head reads that key head (the
W tokens x G query heads, as one tile), the keys of its chunk up to the row's newest query
position only (earlier rows of a regeneration batch stop early), the mask (causal by position, a
sliding window) applied in the tile, and an online softmax; a second kernel merges the chunks.
Chunks are sized so that even one row (batch-1 decoding) spreads over the device.

Needs Triton and a CUDA device (`available()`); CPU runs never import it.
"""

import torch

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

MAX_ROWS = 128  # query rows per (row, key head) tile: W x G up to this (64 at head dim 256)


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def kernels():
    """The Triton functions (compiled on first launch; tests/test_kernels_compile.py compiles
    them for sm_90 ahead of time): partial_kernel, merge_kernel."""
    import triton
    import triton.language as tl

    @triton.jit
    def partial_kernel(
        q, kc, vc, rows, pos, m_out, l_out, acc_out,
        sq_b, sq_w, sq_h, sc_r, sc_h, sc_l, Hk, W, chunk, scale, window,
        G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
        WINDOW: tl.constexpr,
    ):  # fmt: skip
        bh, split = tl.program_id(0), tl.program_id(1)
        splits = tl.num_programs(1)
        b, h = bh // Hk, bh % Hk
        r = tl.arange(0, BLOCK_R)
        live = r < W * G
        w_idx, g_idx = r // G, r % G
        qpos = tl.load(pos + b * W + w_idx, mask=live, other=0)
        d = tl.arange(0, D)
        qt = tl.load(
            q + b * sq_b + w_idx[:, None] * sq_w + (h * G + g_idx)[:, None] * sq_h + d[None, :],
            mask=live[:, None], other=0.0,
        )  # fmt: skip
        row = tl.load(rows + b).to(tl.int64)
        base = row * sc_r + h * sc_h
        hi = tl.minimum((split + 1) * chunk, tl.max(qpos, 0) + 1)  # keys up to the newest query
        lo = split * chunk
        if WINDOW:  # no query sees a key `window` or more behind it: start at the block of
            # the oldest key the oldest query sees
            oldest = tl.maximum(tl.min(tl.where(live, qpos, 1 << 30), 0) - window + 1, 0)
            lo = tl.maximum(lo, oldest // BLOCK_K * BLOCK_K)
        m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_R,), tl.float32)
        acc = tl.zeros((BLOCK_R, D), tl.float32)
        # inside torch.compile, Inductor passes the Python float `scale` as fp64: cast it once,
        # or every score tile is multiplied in fp64
        scale32 = tl.cast(scale, tl.float32)
        for k0 in range(lo, hi, BLOCK_K):
            kidx = k0 + tl.arange(0, BLOCK_K)
            kin = kidx < hi
            offs = base + kidx[:, None].to(tl.int64) * sc_l + d[None, :]
            kt = tl.load(kc + offs, mask=kin[:, None], other=0.0)
            s = tl.dot(qt, tl.trans(kt)) * scale32
            seen = (kidx[None, :] <= qpos[:, None]) & kin[None, :]
            if WINDOW:
                seen = seen & (kidx[None, :] > qpos[:, None] - window)
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            vt = tl.load(vc + offs, mask=kin[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
            m_i = m_new
        out = (bh * splits + split) * BLOCK_R + r
        tl.store(m_out + out, m_i)
        tl.store(l_out + out, l_i)
        tl.store(acc_out + out[:, None] * D + d[None, :], acc)

    @triton.jit
    def merge_kernel(
        m_in, l_in, acc_in, o, so_b, so_w, so_h, Hk, W, splits,
        G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        b, h = bh // Hk, bh % Hk
        r = tl.arange(0, BLOCK_R)
        d = tl.arange(0, D)
        m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        l_sum = tl.zeros((BLOCK_R,), tl.float32)
        acc = tl.zeros((BLOCK_R, D), tl.float32)
        for split in range(0, splits):
            at = (bh * splits + split) * BLOCK_R + r
            m_s = tl.load(m_in + at)
            m_new = tl.maximum(m, m_s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            a_old, a_new = tl.exp(m - m_safe), tl.exp(m_s - m_safe)
            l_sum = l_sum * a_old + tl.load(l_in + at) * a_new
            part = tl.load(acc_in + at[:, None] * D + d[None, :])
            acc = acc * a_old[:, None] + part * a_new[:, None]
            m = m_new
        live = r < W * G
        w_idx, g_idx = r // G, r % G
        res = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
        dst = o + b * so_b + w_idx[:, None] * so_w + (h * G + g_idx)[:, None] * so_h + d[None, :]
        tl.store(dst, res.to(o.dtype.element_ty), mask=live[:, None])

    return partial_kernel, merge_kernel


@once
def _op():
    """The custom op (built once, on first use): graphs and torch.compile take it whole."""
    import triton
    from torch.library import triton_op, wrap_triton

    partial_kernel, merge_kernel = kernels()

    @triton_op("splitserve::decode_attention", mutates_args={})
    def attend(
        q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, rows: torch.Tensor,
        pos: torch.Tensor, scale: float, window: int, length: int,
    ) -> torch.Tensor:  # fmt: skip
        b, w, hq, d = q.shape
        hk = k_cache.shape[1]
        g = hq // hk
        block_r = max(16, triton.next_power_of_2(w * g))
        block_k = 64
        # enough programs to fill the device: split the keys when rows x key heads are few
        splits = max(1, min(triton.cdiv(length, block_k), triton.cdiv(264, b * hk)))
        chunk = triton.cdiv(triton.cdiv(length, splits), block_k) * block_k
        splits = triton.cdiv(length, chunk)
        part = (b * hk, splits, block_r)
        m = torch.empty(part, dtype=torch.float32, device=q.device)
        l_ = torch.empty(part, dtype=torch.float32, device=q.device)
        acc = torch.empty((*part, d), dtype=torch.float32, device=q.device)
        warps = 8 if block_r * d >= 64 * 128 else 4
        wrap_triton(partial_kernel)[(b * hk, splits)](
            q, k_cache, v_cache, rows, pos, m, l_, acc,
            q.stride(0), q.stride(1), q.stride(2),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), hk, w, chunk, scale,
            max(window, 1), G=g, D=d, BLOCK_R=block_r, BLOCK_K=block_k, WINDOW=window > 0,
            num_warps=warps,
        )  # fmt: skip
        out = q.new_empty((b, w, hq, d))
        wrap_triton(merge_kernel)[(b * hk,)](
            m, l_, acc, out, out.stride(0), out.stride(1), out.stride(2), hk, w, splits,
            G=g, D=d, BLOCK_R=block_r, num_warps=warps,
        )  # fmt: skip
        return out

    return attend


def max_rows(head_dim: int) -> int:
    """Query rows (W x G) a tile takes at this head dim: 128, or 64 at 256 (the tile's
    accumulator and the key block must fit the registers and shared memory)."""
    return MAX_ROWS if head_dim <= 128 else MAX_ROWS // 2


def decode_attention(
    q, k_cache, v_cache, rows, pos, scale: float, window: int | None, length: int | None = None
):  # fmt: skip
    """Attention of q [B, W, Hq, D] (last dim contiguous) over cache rows `rows` [B] of k_cache,
    v_cache [R, Hk, L, D]: the query at pos[b, w] sees the keys at positions <= it (and, with a
    `window`, > pos - window); every position must be below `length` (default L), which sizes
    the key splits (a short context in a long cache still spreads over the device). Returns
    [B, W, Hq, D]."""
    if not torch.compiler.is_compiling():  # registered on first use (never while tracing)
        _op()
    return torch.ops.splitserve.decode_attention(
        q, k_cache, v_cache, rows.contiguous(), pos.contiguous(), scale, window or 0,
        length or k_cache.shape[2],
    )  # fmt: skip
