"""A mixture of experts at decode widths: one Triton GEMV per (token, expert) pair.

At a batch-1 step (one token, or a verify block of a few) the top-k experts of each token are a
handful of matrix-vector products. Sorting the pairs by expert for two grouped GEMMs costs more
small kernels (argsort, gather, counts, cumsum, scatter) than the products themselves, and a
grouped GEMM tiles rows of one token. Here each program reads one tile of one pair's expert
weights, contiguous along the reduced dimension, and dots it with that pair's input row: no sort,
no gather of inputs, the routing weight applied in the second product's epilogue, and the k
outputs of a token summed by a reshape. Used for at most `MAX_PAIRS` pairs (a width-1 step);
wider steps and prefills keep the grouped GEMMs, where an expert's weights are read once for all
its tokens (on one H200, Qwen3-30B-A3B shape: width 1 7.43 against 8.44 ms a graphed step, width
8 13.00 against 10.50; docs/results/runtime_h200).

Needs Triton and a CUDA device (`available()`); CPU runs never import it.
"""

from typing import Optional

import torch

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

MAX_PAIRS = 16  # (token, expert) pairs up to which the GEMV path runs: one token's


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def kernels():
    """The Triton function (compiled on first launch; tests/test_kernels_compile.py compiles it
    for sm_90 ahead of time): pair_gemv."""
    import triton
    import triton.language as tl

    @triton.jit
    def pair_gemv(
        x, w, expert, scale, out, K, N, row_div,
        HAS_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        pair = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        e = tl.load(expert + pair).to(tl.int64)
        row = x + (pair // row_div).to(tl.int64) * K
        tile = w + e * N * K + cols[:, None].to(tl.int64) * K
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            xk = tl.load(row + ks, mask=ks < K, other=0.0).to(tl.float32)
            wk = tl.load(
                tile + ks[None, :], mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0
            )
            acc += tl.sum(wk.to(tl.float32) * xk[None, :], axis=1)
        if HAS_SCALE:
            acc = acc * tl.load(scale + pair).to(tl.float32)
        tl.store(out + pair.to(tl.int64) * N + cols, acc.to(out.dtype.element_ty), mask=cols < N)

    return pair_gemv


@once
def _op():
    """The custom op (built once, on first use): torch.compile traces it as an opaque kernel."""
    import triton
    from torch.library import triton_op, wrap_triton

    kernel = kernels()

    @triton_op("splitserve::pair_gemv", mutates_args={})
    def gemv(
        x: torch.Tensor, w: torch.Tensor, expert: torch.Tensor, scale: Optional[torch.Tensor],  # noqa: UP045 (the op's schema is read from it)
        row_div: int,
    ) -> torch.Tensor:  # fmt: skip
        pairs, (_, n, k) = expert.numel(), w.shape
        out = x.new_empty((pairs, n))
        block_n = 32 if n * pairs < 64 * 1024 else 64  # more programs when there are few pairs
        grid = (pairs, triton.cdiv(n, block_n))
        wrap_triton(kernel)[grid](
            x, w, expert, scale if scale is not None else expert, out, k, n, row_div,
            HAS_SCALE=scale is not None, BLOCK_N=block_n, BLOCK_K=128, num_warps=4,
        )  # fmt: skip
        return out

    return gemv


def pair_gemv(x, w, expert, scale=None, row_div: int = 1) -> torch.Tensor:
    """out[p] = w[expert[p]] @ x[p // row_div] (times scale[p]) for every pair p: x [R, K]
    contiguous, w [E, N, K] contiguous, expert [P] integer; out [P, N] in x's dtype."""
    if not torch.compiler.is_compiling():  # registered on first use (never while tracing)
        _op()
    return torch.ops.splitserve.pair_gemv(x.contiguous(), w, expert.contiguous(), scale, row_div)


def routed_mlp(t, gate_up, down, expert, weight, act) -> torch.Tensor:
    """sum_j weight[i, j] * down[e] @ (act(gate) * up) with gate, up = gate_up[e] @ t[i] and
    e = expert[i, j]: t [T, H], gate_up [E, 2I, H], down [E, H, I], expert / weight [T, k]."""
    n, k = expert.shape
    flat = expert.reshape(-1)
    gate, up = pair_gemv(t, gate_up, flat, row_div=k).chunk(2, -1)
    ys = pair_gemv(act(gate) * up, down, flat, scale=weight.reshape(-1).contiguous())
    return ys.view(n, k, -1).sum(1)
