"""A mixture of experts at decode widths: one Triton GEMV per (token, expert) pair.

At a batch-1 step (one token, or a verify block of a few) the top-k experts of each token are a
handful of matrix-vector products. Sorting the pairs by expert for two grouped GEMMs costs more
small kernels (argsort, gather, counts, cumsum, scatter) than the products themselves, and a
grouped GEMM tiles rows of one token. Here each program reads one tile of one pair's expert
weights, contiguous along the reduced dimension, and dots it with that pair's input row: no sort,
no gather of inputs, the routing weight applied in the second product's epilogue, and the k
outputs of a token summed by a reshape. With SiLU the second product computes silu(gate) * up
from the first one's output as it reads it (one kernel fewer a layer), and `route` turns the
router's logits into the top-k experts and weights in one program per token (the softmax, top-k
and renormalisation otherwise take three kernels). Fewer kernels a layer is the point: a
width-1 MoE step is bound by kernel count (docs/results/runtime_h200: on one H100, Qwen3-30B-A3B
shape, graphed, 5.48 ms a step with these two fusions against 6.48 without, same lease). Used for
at most `MAX_PAIRS` pairs (a width-1 step); wider steps and prefills keep the grouped GEMMs,
where an expert's weights are read once for all its tokens (on one H200, Qwen3-30B-A3B shape:
width 1 7.43 against 8.44 ms a graphed step, width 8 13.00 against 10.50;
docs/results/runtime_h200).

Needs Triton and a CUDA device (`available()`); CPU runs never import it.
"""

from typing import Optional

import torch
import torch.nn.functional as F

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

MAX_PAIRS = 16  # (token, expert) pairs up to which the GEMV path runs: one token's


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def kernels():
    """The Triton functions (compiled on first launch; tests/test_kernels_compile.py compiles
    them for sm_90 ahead of time): pair_gemv and route_kernel."""
    import triton
    import triton.language as tl

    @triton.jit
    def pair_gemv(
        x, w, expert, scale, out, K, N, row_div,
        HAS_SCALE: tl.constexpr, GATED: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        """out[p] = w[expert[p]] @ x[p // row_div]; GATED: x's rows are [gate | up] (2K wide)
        and the product is with silu(gate) * up, rounded to x's dtype where the eager ops round
        (the GPU's sigmoid is approximate: equal to rounding)."""
        pair = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
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
            wk = tl.load(
                tile + ks[None, :], mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0
            )
            acc += tl.sum(wk.to(tl.float32) * xk.to(tl.float32)[None, :], axis=1)
        if HAS_SCALE:
            acc = acc * tl.load(scale + pair).to(tl.float32)
        tl.store(out + pair.to(tl.int64) * N + cols, acc.to(out.dtype.element_ty), mask=cols < N)

    @triton.jit
    def route_kernel(
        logits, weight, expert, E, TOP: tl.constexpr, RENORM: tl.constexpr,
        BLOCK_E: tl.constexpr, BLOCK_TOP: tl.constexpr,
    ):  # fmt: skip
        """One token's router: softmax over its E logits (fp32), the TOP largest probabilities
        in descending order (the lowest id first among equals), renormalised to sum 1 when
        RENORM; weights in weight's dtype, ids int64."""
        t = tl.program_id(0).to(tl.int64)
        ids = tl.arange(0, BLOCK_E)
        x = tl.load(logits + t * E + ids, mask=ids < E, other=float("-inf")).to(tl.float32)
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
        tl.store(weight + t * TOP + slot, top.to(weight.dtype.element_ty), mask=slot < TOP)
        tl.store(expert + t * TOP + slot, which, mask=slot < TOP)

    return pair_gemv, route_kernel


@once
def _op():
    """The custom op (built once, on first use): torch.compile traces it as an opaque kernel."""
    import triton
    from torch.library import triton_op, wrap_triton

    gemv_kernel, route_kernel = kernels()

    @triton_op("splitserve::pair_gemv", mutates_args={})
    def gemv(
        x: torch.Tensor, w: torch.Tensor, expert: torch.Tensor, scale: Optional[torch.Tensor],  # noqa: UP045 (the op's schema is read from it)
        row_div: int, gated: bool,
    ) -> torch.Tensor:  # fmt: skip
        pairs, (_, n, k) = expert.numel(), w.shape
        out = x.new_empty((pairs, n))
        block_n = 32 if n * pairs < 64 * 1024 else 64  # more programs when there are few pairs
        grid = (pairs, triton.cdiv(n, block_n))
        wrap_triton(gemv_kernel)[grid](
            x, w, expert, scale if scale is not None else expert, out, k, n, row_div,
            HAS_SCALE=scale is not None, GATED=gated, BLOCK_N=block_n, BLOCK_K=128, num_warps=4,
        )  # fmt: skip
        return out

    @triton_op("splitserve::route", mutates_args={})
    def route(
        logits: torch.Tensor, top: int, renorm: bool, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, e = logits.shape
        weight = logits.new_empty((tokens, top), dtype=dtype)
        expert = torch.empty((tokens, top), dtype=torch.long, device=logits.device)
        wrap_triton(route_kernel)[(tokens,)](
            logits, weight, expert, e, TOP=top, RENORM=renorm,
            BLOCK_E=triton.next_power_of_2(e), BLOCK_TOP=triton.next_power_of_2(top),
            num_warps=1,  # E values a token: its reductions stay within one warp
        )  # fmt: skip
        return weight, expert

    return gemv, route


def pair_gemv(x, w, expert, scale=None, row_div: int = 1, gated: bool = False) -> torch.Tensor:
    """out[p] = w[expert[p]] @ x[p // row_div] (times scale[p]) for every pair p: x [R, K]
    contiguous, w [E, N, K] contiguous, expert [P] integer; out [P, N] in x's dtype. `gated`:
    x [R, 2K] holds [gate | up] and the product is with silu(gate) * up."""
    if not torch.compiler.is_compiling():  # registered on first use (never while tracing)
        _op()
    return torch.ops.splitserve.pair_gemv(
        x.contiguous(), w, expert.contiguous(), scale, row_div, gated
    )


def route(logits, top: int, renorm: bool, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight [T, top] in `dtype`, expert [T, top] int64) from router logits [T, E]: softmax in
    fp32, the `top` largest in descending order, renormalised to sum 1 when `renorm` (as
    Qwen3-MoE routes; the lowest id first among equal probabilities)."""
    if not 1 <= top <= logits.shape[-1]:
        raise ValueError(f"top-k routing needs 1 <= k <= {logits.shape[-1]} experts; got k={top}")
    if not torch.compiler.is_compiling():
        _op()
    return torch.ops.splitserve.route(logits.contiguous(), top, renorm, dtype)


def is_silu(act) -> bool:
    """Whether `act` is SiLU (F.silu, nn.SiLU or transformers' SiLUActivation), which the
    second GEMV can apply itself."""
    return act is F.silu or isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"


def routed_mlp(t, gate_up, down, expert, weight, act, fuse_act: bool = True) -> torch.Tensor:
    """sum_j weight[i, j] * down[e] @ (act(gate) * up) with gate, up = gate_up[e] @ t[i] and
    e = expert[i, j]: t [T, H], gate_up [E, 2I, H], down [E, H, I], expert / weight [T, k].
    `fuse_act`: a SiLU is applied by the second GEMV as it reads gate and up."""
    n, k = expert.shape
    flat = expert.reshape(-1)
    scale = weight.reshape(-1).contiguous()
    gate_up_out = pair_gemv(t, gate_up, flat, row_div=k)
    if fuse_act and is_silu(act):
        ys = pair_gemv(gate_up_out, down, flat, scale=scale, gated=True)
    else:
        gate, up = gate_up_out.chunk(2, -1)
        ys = pair_gemv(act(gate) * up, down, flat, scale=scale)
    return ys.view(n, k, -1).sum(1)
