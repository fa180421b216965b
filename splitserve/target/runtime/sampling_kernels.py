"""The regeneration sampler as one Triton program per row: no sort, no [B, V] temporaries.

`sampling.sample_rows` in PyTorch makes about a dozen passes over a [B, V] tensor per step (a
cast, the softmax, a segmented radix sort for the nucleus, three cumulative sums, in fp64), which
at 1,024 rows of a 49k vocabulary is hundreds of MB of traffic and several milliseconds. Here a
program reads its row's logits (98 KB in bf16; mostly from L2 on later passes) and:

1. one pass: the greedy token (first maximum), and at temperature T > 0 the maximum, minimum and
   the softmax's normaliser of logits / T (an online softmax);
2. with top_p < 1, the nucleus's smallest kept value by a 16-way search over the scaled logits'
   order-preserving integer keys: each pass sums the mass above 15 candidate keys, so 8 passes
   narrow the finite floats' keys to one. The kept set is every token whose scaled logit is at
   least that value, the rule of `sample_rows` (the smallest value whose strictly greater mass
   is at most top_p; ties all kept);
3. two passes: the kept total, then the draw, walking the kept mass in vocabulary order to the
   row's counter uniform times that total (clamped to the last token of nonzero probability
   against rounding).

Same law and the same rule as the PyTorch sampler; sums are fp32 rather than fp64 (and logits
are scaled by 1 / T, one more rounding than a division), so a token whose mass sits within
rounding of a boundary may be drawn differently.

Needs Triton and a CUDA device (`available()`); CPU runs never import it (its tests also run
under Triton's interpreter).
"""

import torch

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

BLOCK = 1024  # vocabulary entries a program reads per iteration
PROBES = 16  # the search splits its interval into this many parts a pass
# finite fp32 values span fewer than 16^8 keys, and a pass leaves at most ceil(width / 16)
SEARCH_PASSES = 8


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def _op():
    """The custom op (built once, on first use): CUDA graphs take it whole."""
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton

    @triton.jit
    def sample_kernel(
        logits, stride, u, temperature, top_p, out, V,
        NUCLEUS: tl.constexpr, BLOCK: tl.constexpr, PROBES: tl.constexpr,
        SEARCH_PASSES: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)
        base = logits + row.to(tl.int64) * stride
        lane = tl.arange(0, BLOCK)
        t = tl.load(temperature + row)
        inv = 1.0 / tl.maximum(t, 1e-6)
        # the first pass: greedy token; max, min and normaliser of the scaled logits
        best = tl.full((), float("-inf"), tl.float32)
        arg = tl.full((), 0, tl.int64)
        m = tl.full((), float("-inf"), tl.float32)
        lo_s = tl.full((), float("inf"), tl.float32)
        z = tl.full((), 0.0, tl.float32)
        for c in range(0, V, BLOCK):
            idx = c + lane
            inside = idx < V
            x = tl.load(base + idx, mask=inside, other=float("-inf")).to(tl.float32)
            cmax = tl.max(x, 0)
            carg = tl.min(tl.where(x == cmax, idx, V), 0).to(tl.int64)  # first maximum
            arg = tl.where(cmax > best, carg, arg)
            best = tl.maximum(best, cmax)
            s = x * inv
            m_new = tl.maximum(m, tl.max(s, 0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf only
            z = z * tl.exp(m - m_safe) + tl.sum(tl.where(inside, tl.exp(s - m_safe), 0.0), 0)
            m = m_new
            finite = inside & (s > float("-inf"))  # a -inf logit has no mass and no key below
            lo_s = tl.minimum(lo_s, tl.min(tl.where(finite, s, float("inf")), 0))
        if t <= 0:
            tl.store(out + row, arg)
        else:
            # the smallest kept scaled logit `edge`: the minimum unless a nucleus is searched.
            # The search runs over the floats' order-preserving integer keys (a float's bits,
            # the magnitude bits flipped where negative: the same map both ways), comparing
            # floats in the passes
            edge = lo_s
            if NUCLEUS:
                p = tl.load(top_p + row)
                if p < 1.0:  # S(k), the mass of values > k: S(lo) > p z >= S(hi)
                    mb = m.to(tl.int32, bitcast=True)
                    hi = tl.where(mb < 0, mb ^ 0x7FFFFFFF, mb).to(tl.int64)
                    lb = lo_s.to(tl.int32, bitcast=True)
                    lo = tl.where(lb < 0, lb ^ 0x7FFFFFFF, lb).to(tl.int64) - 1
                    cut = p * z
                    j = tl.arange(0, PROBES)
                    for _ in range(SEARCH_PASSES):
                        probe = lo + ((hi - lo) * (j + 1).to(tl.int64)) // PROBES  # last: hi
                        pb = probe.to(tl.int32)
                        at = tl.where(pb < 0, pb ^ 0x7FFFFFFF, pb).to(tl.float32, bitcast=True)
                        mass = tl.zeros((PROBES,), tl.float32)
                        for c in range(0, V, BLOCK):
                            idx = c + lane
                            inside = idx < V
                            x = tl.load(base + idx, mask=inside, other=float("-inf"))
                            s = x.to(tl.float32) * inv
                            e = tl.where(inside, tl.exp(s - m), 0.0)
                            mass += tl.sum(tl.where(s[:, None] > at[None, :], e[:, None], 0.0), 0)
                        small = mass <= cut  # non-decreasing in j, true at the last probe
                        hi = tl.min(tl.where(small, probe, hi), 0)
                        lo = tl.max(tl.where(small, lo, probe), 0)
                    hb = hi.to(tl.int32)
                    edge = tl.where(hb < 0, hb ^ 0x7FFFFFFF, hb).to(tl.float32, bitcast=True)
            # the draw in vocabulary order: first index whose kept mass so far passes u * total
            total = tl.full((), 0.0, tl.float32)
            for c in range(0, V, BLOCK):
                idx = c + lane
                inside = idx < V
                x = tl.load(base + idx, mask=inside, other=float("-inf")).to(tl.float32)
                s = x * inv
                total += tl.sum(tl.where(inside & (s >= edge), tl.exp(s - m), 0.0), 0)
            target = tl.load(u + row) * total
            run = tl.full((), 0.0, tl.float32)
            pick = tl.full((), V, tl.int64)
            last = tl.full((), 0, tl.int64)
            for c in range(0, V, BLOCK):
                idx = c + lane
                inside = idx < V
                x = tl.load(base + idx, mask=inside, other=float("-inf")).to(tl.float32)
                s = x * inv
                kept = inside & (s >= edge)
                e = tl.where(kept, tl.exp(s - m), 0.0)
                cdf = run + tl.cumsum(e, 0)
                pick = tl.minimum(pick, tl.min(tl.where(kept & (cdf > target), idx, V), 0))
                last = tl.maximum(last, tl.max(tl.where(e > 0, idx, 0), 0).to(tl.int64))
                run += tl.sum(e, 0)
            tl.store(out + row, tl.minimum(pick, last))

    @triton_op("splitserve::sample_rows", mutates_args={})
    def sample(
        logits: torch.Tensor, u: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
        nucleus: bool,
    ) -> torch.Tensor:  # fmt: skip
        b, v = logits.shape
        out = torch.empty(b, dtype=torch.long, device=logits.device)
        wrap_triton(sample_kernel)[(b,)](
            logits, logits.stride(0), u, temperature, top_p, out, v,
            NUCLEUS=nucleus, BLOCK=BLOCK, PROBES=PROBES, SEARCH_PASSES=SEARCH_PASSES,
            num_warps=8,
        )  # fmt: skip
        return out

    return sample


def sample_rows(logits, u, temperature, top_p, nucleus: bool) -> torch.Tensor:
    """Next token per row of logits [B, V] (rows contiguous): see the module docstring. `u` [B]
    fp32 in (0, 1), `temperature` / `top_p` [B] fp32."""
    if not torch.compiler.is_compiling():
        _op()
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    return torch.ops.splitserve.sample_rows(
        logits, u.float().contiguous(), temperature.float().contiguous(),
        top_p.float().contiguous(), nucleus,
    )  # fmt: skip
