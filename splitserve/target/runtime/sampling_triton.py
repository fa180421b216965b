"""The Triton code of the regeneration sampler (sampling_kernels, which documents the method
and imports this module only where Triton and a CUDA device, or Triton's interpreter, are)."""

import triton
import triton.language as tl


@triton.jit
def key_of(f):
    """A float's order-preserving integer key (its bits, the magnitude flipped where
    negative; the same map both ways)."""
    b = f.to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b).to(tl.int64)


@triton.jit
def value_of(k):
    b = k.to(tl.int32)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b).to(tl.float32, bitcast=True)


@triton.jit
def scaled(src, ids, start, n, t, COMPACT: tl.constexpr, BLOCK: tl.constexpr):
    """A block of scaled logits, their vocabulary ids and which exist: read from the row
    (logits / T, rounded as PyTorch divides: a multiply by 1 / T, which the compiler may also
    fuse into the next subtraction, would round differently) or from the candidates (stored
    scaled, with their ids)."""
    j = start + tl.arange(0, BLOCK)
    inside = j < n
    if COMPACT:
        s = tl.load(src + j, mask=inside, other=float("-inf"))
        idx = tl.load(ids + j, mask=inside, other=0).to(tl.int64)
    else:
        s = tl.math.div_rn(tl.load(src + j, mask=inside, other=float("-inf")).to(tl.float32), t)
        idx = j.to(tl.int64)
    return s, idx, inside


@triton.jit
def gather(
    src, sids, n, t, shift, above, values, ids, capacity,
    COMPACT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Copy the entries with s - shift > above, from the row (or, COMPACT, from the scratch
    itself, in place) to the scratch in vocabulary order (the first `capacity` of them); their
    count. (Relative to m a bound survives logits of any size: m + a small negative number
    rounds to m once |m| exceeds 2^23, as at T = 1e-6.)"""
    count = tl.full((), 0, tl.int32)
    for c in range(0, n, BLOCK):
        s, idx, inside = scaled(src, sids, c, n, t, COMPACT, BLOCK)
        keep = (inside & (s - shift > above)).to(tl.int32)
        at = count + tl.cumsum(keep, 0) - 1  # at most the position read: in place is safe
        write = (keep > 0) & (at < capacity)
        if COMPACT:
            tl.debug_barrier()  # the block is read whole before any of it is overwritten
        tl.store(values + at, s, mask=write)
        tl.store(ids + at, idx.to(tl.int32), mask=write)
        count += tl.sum(keep, 0)
    tl.debug_barrier()  # the scratch is read back in other threads' layout
    return count


@triton.jit
def bracket(
    src, ids, n, t, m, d, cut, capacity,
    COMPACT: tl.constexpr, BLOCK: tl.constexpr, PROBES: tl.constexpr,
):  # fmt: skip
    """The mass and count above 16 values from m + d to m: a, the highest whose mass above
    exceeds cut (S(a) > cut, so the edge is above it), whether there is one, the key of b, the
    next value (S(b) <= cut; m if none), and the count above a (capacity + 1 if none)."""
    j = tl.arange(0, PROBES)
    probe = m + d * (PROBES - j).to(tl.float32) / PROBES
    mass = tl.zeros((PROBES,), tl.float32)
    count = tl.zeros((PROBES,), tl.int32)
    for c in range(0, n, BLOCK):
        s, idx, inside = scaled(src, ids, c, n, t, COMPACT, BLOCK)
        up = s[:, None] > probe[None, :]
        mass += tl.sum(tl.where(up, tl.exp(s - m)[:, None], 0.0), 0)
        count += tl.sum(up.to(tl.int32), 0)
    big = mass > cut  # a prefix of the probes
    a = tl.max(tl.where(big, probe, float("-inf")), 0)
    some = tl.max(big.to(tl.int32), 0) > 0
    hi = key_of(tl.min(tl.where(big, m, probe), 0))
    return a, some, hi, tl.min(tl.where(big, count, capacity + 1), 0)


@triton.jit
def draw(src, ids, n, t, m, edge, target, V, COMPACT: tl.constexpr, BLOCK: tl.constexpr):
    """The first id of nonzero mass whose kept mass so far (vocabulary order) passes
    `target`; the last such id if rounding leaves none. The running mass is carried as the
    block's last cumulative sum, not a separate sum: the two round differently, and a target in
    the gap would pick the next block's first kept id, maybe one of mass 0."""
    run = tl.full((), 0.0, tl.float32)
    pick = tl.full((), V, tl.int64)
    last = tl.full((), 0, tl.int64)
    for c in range(0, n, BLOCK):
        s, idx, inside = scaled(src, ids, c, n, t, COMPACT, BLOCK)
        e = tl.where(inside & (s >= edge), tl.exp(s - m), 0.0)
        cdf = run + tl.cumsum(e, 0)
        pick = tl.minimum(pick, tl.min(tl.where((e > 0) & (cdf > target), idx, V), 0))
        last = tl.maximum(last, tl.max(tl.where(e > 0, idx, 0), 0))
        run = tl.max(cdf, 0)  # e >= 0: the scan's last value
    return tl.minimum(pick, last)


@triton.jit
def nucleus_draw(
    src, ids, n, t, m, cut, lo, hi, target, V,
    COMPACT: tl.constexpr, BLOCK: tl.constexpr, PROBES: tl.constexpr,
    SEARCH_PASSES: tl.constexpr,
):  # fmt: skip
    """The edge by the key search in (lo, hi] (S(lo) > cut >= S(hi), S(k) the mass of
    values > k), then the draw over the kept entries at u = `target`."""
    j = tl.arange(0, PROBES)
    for _ in range(SEARCH_PASSES):
        if hi - lo > 1:  # a converged bracket skips its remaining passes
            probe = lo + ((hi - lo) * (j + 1).to(tl.int64)) // PROBES  # last: hi
            at = value_of(probe)
            mass = tl.zeros((PROBES,), tl.float32)
            for c in range(0, n, BLOCK):
                s, idx, inside = scaled(src, ids, c, n, t, COMPACT, BLOCK)
                e = tl.where(inside, tl.exp(s - m), 0.0)
                mass += tl.sum(tl.where(s[:, None] > at[None, :], e[:, None], 0.0), 0)
            small = mass <= cut  # non-decreasing in j, true at the last probe
            hi = tl.min(tl.where(small, probe, hi), 0)
            lo = tl.max(tl.where(small, lo, probe), 0)
    edge = value_of(hi)
    total = tl.full((), 0.0, tl.float32)
    for c in range(0, n, BLOCK):
        s, idx, inside = scaled(src, ids, c, n, t, COMPACT, BLOCK)
        total += tl.sum(tl.where(inside & (s >= edge), tl.exp(s - m), 0.0), 0)
    return draw(src, ids, n, t, m, edge, target * total, V, COMPACT, BLOCK)


@triton.jit
def sample_kernel(
    logits, stride, u, temperature, top_p, out, path, values, ids, V, capacity,
    NUCLEUS: tl.constexpr, BLOCK: tl.constexpr, PROBES: tl.constexpr,
    SEARCH_PASSES: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    base = logits + row.to(tl.int64) * stride
    lane = tl.arange(0, BLOCK)
    t_row = tl.load(temperature + row)
    t = tl.maximum(t_row, 1e-6)  # the PyTorch sampler's floor
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
        s = tl.math.div_rn(x, t)
        m_new = tl.maximum(m, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf only
        z = z * tl.exp(m - m_safe) + tl.sum(tl.where(inside, tl.exp(s - m_safe), 0.0), 0)
        m = m_new
        finite = inside & (s > float("-inf"))  # a -inf logit has no mass and no key below
        lo_s = tl.minimum(lo_s, tl.min(tl.where(finite, s, float("inf")), 0))
    if t_row <= 0:
        tl.store(out + row, arg)
        tl.store(path + row, 0)
    else:
        target = tl.load(u + row)
        if NUCLEUS:
            p = tl.load(top_p + row)
        else:
            p = tl.full((), 1.0, tl.float32)
        if p >= 1.0:  # every finite entry kept: z is the total
            tok = draw(base, base, V, t, m, lo_s, target * z, V, False, BLOCK)
            tl.store(out + row, tok)
            tl.store(path + row, 1)
        else:
            vals = values + row.to(tl.int64) * capacity
            vids = ids + row.to(tl.int64) * capacity
            cut = p * z
            # entries at or below m + d hold less than (1 - p) z together (V of them at most,
            # each under (1 - p) z / (e V)): none is in the nucleus
            d = tl.log((1.0 - p) * z / V) - 1.0
            n = gather(base, base, V, t, m, d, vals, vids, capacity, False, BLOCK)
            lo = key_of(lo_s) - 1  # below every finite entry: the search's start
            hi = key_of(m)
            mode = tl.where(n <= capacity, 2, 4)  # the path (PATHS in sampling_kernels)
            if n <= capacity:
                if n > BLOCK:  # many candidates: keep those above a bracket's lower end
                    a, some, hi_a, n_a = bracket(
                        vals, vids, n, t, m, d, cut, capacity, True, BLOCK, PROBES
                    )
                    if some:
                        n = gather(vals, vids, n, t, 0.0, a, vals, vids, capacity, True, BLOCK)
                        lo = key_of(a)
                        hi = hi_a
            else:  # too many to copy: a bracket from the whole row, then a copy if it fits
                a, some, hi_a, n_a = bracket(
                    base, base, V, t, m, d, cut, capacity, False, BLOCK, PROBES
                )
                lo = tl.where(some, key_of(a), lo)
                hi = hi_a
                if n_a <= capacity:
                    n = gather(base, base, V, t, 0.0, a, vals, vids, capacity, False, BLOCK)
                    mode = tl.full((), 3, tl.int32)
            if mode < 4:
                tok = nucleus_draw(
                    vals, vids, n, t, m, cut, lo, hi, target, V,
                    True, BLOCK, PROBES, SEARCH_PASSES,
                )  # fmt: skip
            else:
                tok = nucleus_draw(
                    base, base, V, t, m, cut, lo, hi, target, V,
                    False, BLOCK, PROBES, SEARCH_PASSES,
                )  # fmt: skip
            tl.store(out + row, tok)
            tl.store(path + row, mode.to(tl.int8))
