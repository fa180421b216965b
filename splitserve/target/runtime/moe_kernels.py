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

Two more fusions cut the kernels before the experts from four to one (the static runtime's
`fused_router`; one H100, same lease, graphed width-1 step 5.29 against 5.50 ms without):
`add_norm_router` takes the residual add, the RMSNorm and the router GEMV in one kernel (each
program normalises the token's row itself and dots it with a tile of router rows, so no program
waits for another), and `routed_mlp_from_logits` has every program of the first GEMV route its
own token from those logits with the same top-k code as `route` (a softmax and k maxima over E
values: cheaper than a kernel launch) and hand the second GEMV its experts and weights, so no
routing kernel runs.

Needs Triton and a CUDA device (`available()`); CPU runs never import it (the Triton code is in
moe_triton).
"""

from typing import Optional

import torch
import torch.nn.functional as F

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

MAX_PAIRS = 16  # (token, expert) pairs up to which the GEMV path runs: one token's
ROUTER_TILE = 8192  # router weights a program of add_norm_router reads: 4 rows at hidden 2,048
# (32 programs a token for 128 experts)


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def kernels():
    """The Triton functions (moe_triton; compiled on first launch; tests/test_kernels_compile.py
    compiles them for sm_90 ahead of time): pair_gemv, route_kernel and norm_router_kernel."""
    from . import moe_triton

    return moe_triton.pair_gemv, moe_triton.route_kernel, moe_triton.norm_router_kernel


@once
def _op():
    """The custom op (built once, on first use): torch.compile traces it as an opaque kernel."""
    import triton
    from torch.library import triton_op, wrap_triton

    gemv_kernel, route_kernel, norm_router_kernel = kernels()

    def launch_gemv(x, w, expert, scale, row_div, gated, logits=None, top=1, renorm=False):
        """pair_gemv over expert.numel() pairs: of `expert` (times `scale` where given), or
        ROUTED by `logits` [T, E], writing each pair's expert and weight to `expert`, `scale`."""
        (_, n, k), routed, pairs = w.shape, logits is not None, expert.numel()
        out = x.new_empty((pairs, n))
        block_n = 32 if n * pairs < 64 * 1024 else 64  # more programs when there are few pairs
        e = logits.shape[1] if routed else 1
        wrap_triton(gemv_kernel)[(pairs, triton.cdiv(n, block_n))](
            x, w, expert, expert if scale is None else scale, x if logits is None else logits,
            out, k, n, row_div, e,
            HAS_SCALE=scale is not None and not routed, GATED=gated, ROUTED=routed, TOP=top,
            RENORM=renorm, BLOCK_N=block_n, BLOCK_K=128, BLOCK_E=triton.next_power_of_2(e),
            BLOCK_TOP=triton.next_power_of_2(top), num_warps=4,
        )  # fmt: skip
        return out

    @triton_op("splitserve::pair_gemv", mutates_args={})
    def gemv(
        x: torch.Tensor, w: torch.Tensor, expert: torch.Tensor, scale: Optional[torch.Tensor],  # noqa: UP045 (the op's schema is read from it)
        row_div: int, gated: bool,
    ) -> torch.Tensor:  # fmt: skip
        return launch_gemv(x, w, expert, scale, row_div, gated)

    @triton_op("splitserve::routed_gemv", mutates_args={})
    def routed_gemv(
        x: torch.Tensor, w: torch.Tensor, logits: torch.Tensor, top: int, renorm: bool,
        row_div: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        pairs = logits.shape[0] * top
        expert = torch.empty(pairs, dtype=torch.long, device=x.device)
        weight = x.new_empty(pairs)
        out = launch_gemv(x, w, expert, weight, row_div, False, logits, top, renorm)
        return out, expert, weight

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

    @triton_op("splitserve::add_norm_router", mutates_args={})
    def add_norm_router(
        x: torch.Tensor, a: torch.Tensor, norm_w: torch.Tensor, router: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        (tokens, h), e = x.shape, router.shape[0]
        x_out, h_out = torch.empty_like(x), torch.empty_like(x)
        logits = x.new_empty((tokens, e))
        block_h = triton.next_power_of_2(h)
        block_ec = max(1, min(triton.next_power_of_2(e), ROUTER_TILE // block_h))
        wrap_triton(norm_router_kernel)[(tokens, triton.cdiv(e, block_ec))](
            x, a, norm_w, router, x_out, h_out, logits, h, e, eps,
            BLOCK_H=block_h, BLOCK_EC=block_ec, num_warps=4,
        )  # fmt: skip
        return x_out, h_out, logits

    return gemv, routed_gemv, route, add_norm_router


def pair_gemv(x, w, expert, scale=None, row_div: int = 1, gated: bool = False) -> torch.Tensor:
    """out[p] = w[expert[p]] @ x[p // row_div] (times scale[p]) for every pair p: x [R, K]
    contiguous, w [E, N, K] contiguous, expert [P] integer; out [P, N] in x's dtype. `gated`:
    x [R, 2K] holds [gate | up] and the product is with silu(gate) * up."""
    if not torch.compiler.is_compiling():  # registered on first use (never while tracing)
        _op()
    return torch.ops.splitserve.pair_gemv(
        x.contiguous(), w, expert.contiguous(), scale, row_div, gated
    )


def _check_top(logits, top: int) -> None:
    if not 1 <= top <= logits.shape[-1]:
        raise ValueError(f"top-k routing needs 1 <= k <= {logits.shape[-1]} experts; got k={top}")


def route(logits, top: int, renorm: bool, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight [T, top] in `dtype`, expert [T, top] int64) from router logits [T, E]: softmax in
    fp32, the `top` largest in descending order, renormalised to sum 1 when `renorm` (as
    Qwen3-MoE routes; the lowest id first among equal probabilities)."""
    _check_top(logits, top)
    if not torch.compiler.is_compiling():
        _op()
    return torch.ops.splitserve.route(logits.contiguous(), top, renorm, dtype)


def routed_gemv(x, w, logits, top: int, renorm: bool, row_div: int = 1):
    """pair_gemv with each token's experts routed inside the kernel from its router logits
    [T, E], as `route` routes them (pairs T * top, token p // top's): (out [P, N], the pairs'
    experts [P] int64, their weights [P] in x's dtype) for the next GEMV."""
    _check_top(logits, top)
    if not torch.compiler.is_compiling():
        _op()
    return torch.ops.splitserve.routed_gemv(
        x.contiguous(), w, logits.contiguous(), top, renorm, row_div
    )


def add_norm_router(x, a, norm_w, router, eps: float):
    """(x + a, RMSNorm(x + a) * norm_w, router logits [T, E]) for x, a [T, H] in one kernel, as
    the residual add, F.rms_norm and F.linear give them to rounding: the three kernels before
    a MoE's experts (with `routed_mlp_from_logits`, four become one)."""
    if x.shape != a.shape or x.shape[-1] != router.shape[-1] or x.dim() != 2:
        raise ValueError(
            f"add_norm_router takes x, a [T, H] and a router [E, H]; got {tuple(x.shape)}, "
            f"{tuple(a.shape)} and {tuple(router.shape)}"
        )
    if not torch.compiler.is_compiling():
        _op()
    return torch.ops.splitserve.add_norm_router(x.contiguous(), a.contiguous(), norm_w, router, eps)


def is_silu(act) -> bool:
    """Whether `act` is SiLU (F.silu, nn.SiLU or transformers' SiLUActivation), which the
    second GEMV can apply itself."""
    return act is F.silu or isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"


def routed_mlp(t, gate_up, down, expert, weight, act, fuse_act: bool = True) -> torch.Tensor:
    """sum_j weight[i, j] * down[e] @ (act(gate) * up) with gate, up = gate_up[e] @ t[i] and
    e = expert[i, j]: t [T, H], gate_up [E, 2I, H], down [E, H, I], expert / weight [T, k].
    `fuse_act`: a SiLU is applied by the second GEMV as it reads gate and up."""
    flat, k = expert.reshape(-1), expert.shape[1]
    gate_up_out = pair_gemv(t, gate_up, flat, row_div=k)
    return _down(gate_up_out, down, flat, weight.reshape(-1).contiguous(), act, fuse_act, k)


def routed_mlp_from_logits(t, gate_up, down, logits, top, renorm, act, fuse_act=True):
    """`routed_mlp` with the routing (`route` of the router logits [T, E]) done inside the
    first GEMV, which hands the second its pairs' experts and weights: no routing kernel."""
    gate_up_out, flat, weight = routed_gemv(t, gate_up, logits, top, renorm, row_div=top)
    return _down(gate_up_out, down, flat, weight, act, fuse_act, top)


def _down(gate_up_out, down, flat, scale, act, fuse_act: bool, k: int) -> torch.Tensor:
    """The second GEMV of routed_mlp over the pairs `flat` (weighted by `scale`), summed over
    each token's k pairs."""
    if fuse_act and is_silu(act):
        ys = pair_gemv(gate_up_out, down, flat, scale=scale, gated=True)
    else:
        gate, up = gate_up_out.chunk(2, -1)
        ys = pair_gemv(act(gate) * up, down, flat, scale=scale)
    return ys.view(-1, k, ys.shape[-1]).sum(1)
