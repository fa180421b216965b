"""Attention over a flat, packed batch of draft blocks and their injected target context.

Queries are the draft-block tokens of many sequences packed together; keys are the injected
context tokens (target hidden states of every sequence) followed by the block tokens. Which key a
query may see is a token-level rule over four index vectors (see `TokenIndex`):

- a context key of the same sequence whose position is *before the block's anchor*
  (and within `window` of the query when a sliding window is set);
- a key of the same block (bidirectional; for EAGLE-3 chains only earlier or equal slots).

Backend choice. The default is **flex_attention** with a BlockMask built from this rule: the rule
is ragged per block (each block sees its own prefix of its own sequence), so a dense [Q, K] mask
would cost anchors x block x total-context memory and SDPA would still compute every masked tile;
flex skips fully masked 128x128 tiles, so compute is proportional to the keys each block really
sees (sum over blocks of anchor position + block size) and no [Q, K] tensor is ever materialised.
Flex is fast only when compiled, which is what we do on GPU. On CPU (tests, the embedded recipe)
the **sdpa** backend evaluates the same rule one sequence at a time with a dense boolean mask,
which bounds memory by the largest sequence's (blocks x block size) x (context + blocks) and
never forms cross-sequence pairs (finding the sequences reads the device once per forward). The
**dense** backend is for decoding: a single [Q, K] mask built from the index tensors alone, with
no read of the device, or with `rows=(R, C)` one mask per request of R decoded at once (the
proposers' layout: each row over its own keys). All backends share `allowed_pairs`, and tests
check they agree. An `AttentionPlan` builds the masks once per forward; every layer reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class TokenIndex:
    """Token-level indices of a flat token set. Context tokens have block = slot = -1."""

    seq: torch.Tensor  # [T] sequence id within the packed batch
    pos: torch.Tensor  # [T] absolute position of the token in its sequence
    block: torch.Tensor  # [T] block id within the packed batch, -1 for context
    slot: torch.Tensor  # [T] slot inside the block, -1 for context

    def __len__(self) -> int:
        return int(self.seq.shape[0])

    def cat(self, other: TokenIndex) -> TokenIndex:
        return TokenIndex(
            *(torch.cat((a, b)) for a, b in zip(self.fields(), other.fields(), strict=True))
        )

    def select(self, idx: torch.Tensor) -> TokenIndex:
        return TokenIndex(*(f[idx] for f in self.fields()))

    def fields(self) -> tuple[torch.Tensor, ...]:
        return (self.seq, self.pos, self.block, self.slot)

    @classmethod
    def context(cls, length: int, device) -> TokenIndex:
        """Positions 0..length-1 of one sequence as injected context (decoding)."""
        minus_one = torch.full((length,), -1, dtype=torch.long, device=device)
        return cls(
            seq=torch.zeros(length, dtype=torch.long, device=device),
            pos=torch.arange(length, device=device),
            block=minus_one,
            slot=minus_one.clone(),
        )

    @classmethod
    def rows_context(cls, rows: int, length: int, device) -> TokenIndex:
        """Positions 0..length-1 of each of `rows` sequences (requests decoded at once), row-major:
        row r's context is tokens r * length .. (r + 1) * length - 1, of sequence r."""
        minus_one = torch.full((rows * length,), -1, dtype=torch.long, device=device)
        return cls(
            seq=torch.arange(rows, device=device).repeat_interleave(length),
            pos=torch.arange(length, device=device).repeat(rows),
            block=minus_one,
            slot=minus_one.clone(),
        )

    @classmethod
    def single_block(cls, anchor_pos: int, slots: int, device, first_slot: int = 0) -> TokenIndex:
        """Slots first_slot..first_slot+slots-1 of one block anchored at `anchor_pos` (decoding)."""
        slot = torch.arange(first_slot, first_slot + slots, device=device)
        zeros = torch.zeros(slots, dtype=torch.long, device=device)
        return cls(seq=zeros, pos=anchor_pos + slot, block=zeros, slot=slot)


def allowed_pairs(q, k, window: int | None, block_causal: bool):
    """The visibility rule, written once for tensors that broadcast (dense masks) and for
    flex_attention's per-element mask_mod. `q` and `k` are (seq, pos, block, slot) tuples."""
    q_seq, q_pos, q_block, q_slot = q
    k_seq, k_pos, k_block, k_slot = k
    anchor = q_pos - q_slot
    context = (k_block < 0) & (k_seq == q_seq) & (k_pos < anchor)
    if window is not None:
        context = context & (q_pos - k_pos < window)
    own_block = k_block == q_block
    if block_causal:
        own_block = own_block & (k_slot <= q_slot)
    return context | own_block


BACKENDS = ("flex", "sdpa", "dense")


class AttentionPlan:
    """The keys every query may see, prepared once and shared by all layers of a forward: the
    per-sequence dense masks (sdpa) or the BlockMask (flex) are built on first use, not per
    layer."""

    def __init__(
        self,
        q_index: TokenIndex,
        k_index: TokenIndex,
        *,
        window: int | None = None,
        block_causal: bool = False,
        backend: str = "auto",
        rows: tuple[int, int] | None = None,
    ) -> None:
        """`rows=(R, C)` (dense backend): the tokens are R requests decoded at once, laid out
        row-major: the queries are R equal runs, the keys R runs of C context keys followed, if
        there are more keys, by the queries' own tokens. Each row then attends over its own keys
        only (a batched SDPA), not over every row's as a flat mask would."""
        if backend == "auto":
            backend = "flex" if q_index.seq.is_cuda else "sdpa"
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown attention backend {backend!r}; allowed: auto, {', '.join(BACKENDS)}"
            )
        self.q_index, self.k_index = q_index, k_index
        if rows is not None and backend != "dense":
            raise ValueError(f"rows= needs the dense backend, not {backend!r}")
        self.window, self.block_causal, self.backend = window, block_causal, backend
        self.rows = rows
        self._prepared = None

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q: [Q, Hq, D], k: [K, Hkv, D], v: [K, Hkv, Dv] -> [Q, Hq, Dv] (GQA when Hq > Hkv)."""
        if self.backend == "flex":
            if self._prepared is None:
                self._prepared = _flex_block_mask(self, q.shape[0], k.shape[0], q.device)
            return _flex(q, k, v, self._prepared, scale)
        if self.rows is not None:
            if self._prepared is None:
                self._prepared = _row_masks(self, k.shape[0])
            return _sdpa_rows(q, k, v, self._prepared, scale)
        if self._prepared is None:
            self._prepared = _dense_mask(self) if self.backend == "dense" else _sequence_masks(self)
        return _sdpa_per_sequence(q, k, v, self._prepared, scale)


def _dense_mask(plan: AttentionPlan):
    """One [Q, K] mask over every query and key (no host read): for small batches, e.g. decoding."""
    mask = allowed_pairs(
        tuple(f[:, None] for f in plan.q_index.fields()),
        tuple(f[None, :] for f in plan.k_index.fields()),
        plan.window,
        plan.block_causal,
    )
    return [(slice(None), slice(None), mask)]


def _row_masks(plan: AttentionPlan, n_keys: int):
    """(keys of each row [R, Kr] as flat key indices, or None for one row, mask
    [R, 1, Sq, Kr]) of a rows plan."""
    r, c = plan.rows
    n_q = len(plan.q_index)
    device = plan.q_index.seq.device
    row = torch.arange(r, device=device)[:, None]
    keys = row * c + torch.arange(c, device=device)[None]
    own = n_keys - r * c
    if own:  # the queries' own tokens, after every row's context
        if own != n_q:
            raise ValueError(f"{n_keys} keys are neither {r} x {c} context keys nor those + {n_q}")
        keys = torch.cat((keys, r * c + torch.arange(n_q, device=device).view(r, -1)), 1)
    mask = allowed_pairs(
        tuple(f.view(r, -1, 1) for f in plan.q_index.fields()),
        tuple(f[keys][:, None] for f in plan.k_index.fields()),
        plan.window,
        plan.block_causal,
    )
    # one row: the flat order is the row's order already, no gather (a copy) is needed
    return (keys if r > 1 else None), mask[:, None]


def _sdpa_rows(q, k, v, prepared, scale):
    keys, mask = prepared
    r = mask.shape[0]
    k, v = (k[None], v[None]) if keys is None else (k[keys], v[keys])
    o = F.scaled_dot_product_attention(
        q.view(r, -1, *q.shape[1:]).transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[1], v.shape[-1])


def _sequence_masks(plan: AttentionPlan):
    """[(query rows, key rows, dense mask)] per sequence: cross-sequence pairs are never formed."""
    out = []
    for s in torch.unique(plan.q_index.seq).tolist():
        qi = torch.nonzero(plan.q_index.seq == s).squeeze(1)
        ki = torch.nonzero(plan.k_index.seq == s).squeeze(1)
        mask = allowed_pairs(
            tuple(f[qi, None] for f in plan.q_index.fields()),
            tuple(f[None, ki] for f in plan.k_index.fields()),
            plan.window,
            plan.block_causal,
        )
        out.append((qi, ki, mask))
    return out


def _sdpa_per_sequence(q, k, v, masks, scale):
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    gqa = q.shape[1] != k.shape[1]
    for qi, ki, mask in masks:
        o = F.scaled_dot_product_attention(
            q[qi].transpose(0, 1),
            k[ki].transpose(0, 1),
            v[ki].transpose(0, 1),
            attn_mask=mask,
            scale=scale,
            enable_gqa=gqa,
        )
        out[qi] = o.transpose(0, 1)
    return out


_compiled_flex = None


TILE = 128  # flex_attention's default block size, both ways
# whole tiles skip the rule (see _flex_block_mask); False marks every kept tile partial, as
# before 2026-12-06 (scripts/bench_trainer.py --whole-tiles off: a same-run A/B)
WHOLE_TILES = True


def _flex_block_mask(plan: AttentionPlan, q_len: int, k_len: int, device):
    """The BlockMask of the visibility rule, built from per-tile bounds with plain tensor ops.

    Why not `create_block_mask`: compiled, it compiles again for each new packed shape before a
    step can run (on an H200 the first two training-shaped batches took 84 s and 103 s with it,
    18.5 s and 5 ms with this builder); eager, it materialises the [Q, K]
    mask. Here a 128x128 tile is kept when some pair in it may be allowed, judged from bounds
    over the tile: a query tile sees a key tile's context keys when their sequence ranges overlap
    and the keys' smallest position is below the queries' largest anchor (and, with a sliding
    window, the keys' largest position is within the window of the queries' smallest), and its
    block keys when their block-id ranges overlap (every query is a block token). Every
    kept tile is partial (flex evaluates the exact rule, mask_mod, inside it; a tile kept in
    excess costs compute, never correctness) unless the bounds prove every pair allowed: one
    sequence on both sides, 128 context keys all before the queries' smallest anchor (and all
    within the window), no ragged edge. Flex skips mask_mod in those full tiles, most of a long
    sequence's context (mask_mod gathers 8 index values a pair). Packing keeps both sides
    ordered by sequence, so the bounds are tight."""
    from torch.nn.attention.flex_attention import BlockMask

    qf, kf = plan.q_index.fields(), plan.k_index.fields()

    def mask_mod(b, h, qi, ki):
        return allowed_pairs(
            tuple(f[qi] for f in qf), tuple(f[ki] for f in kf), plan.window, plan.block_causal
        )

    q_seq, q_pos, q_block, q_slot = qf
    k_seq, k_pos, k_block, _ = kf
    qs_lo, qs_hi = _tile_bounds(q_seq, q_len)
    qb_lo, qb_hi = _tile_bounds(q_block, q_len)
    anchor_lo, anchor_hi = _tile_bounds(q_pos - q_slot, q_len)
    qp_lo, qp_hi = _tile_bounds(q_pos, q_len)
    ctx = k_block < 0
    ks_lo, ks_hi = _tile_bounds(k_seq, k_len, keep=ctx)
    kp_lo, kp_hi = _tile_bounds(k_pos, k_len, keep=ctx)
    kb_lo, kb_hi = _tile_bounds(k_block, k_len, keep=~ctx)
    same_seqs = (ks_lo[None] <= qs_hi[:, None]) & (qs_lo[:, None] <= ks_hi[None])
    sees_context = same_seqs & (kp_lo[None] < anchor_hi[:, None])
    # every pair allowed: whole tiles (no ragged edge), all keys context, one shared sequence,
    # the keys' largest position before the queries' smallest anchor
    whole_q = torch.arange(len(qs_lo), device=device) < q_len // TILE
    whole_k = torch.arange(len(ks_lo), device=device) < k_len // TILE
    whole_k &= _tile_bounds(ctx.long(), k_len)[0] == 1  # no block key
    one_seq = (qs_lo == qs_hi)[:, None] & (ks_lo == ks_hi)[None] & (qs_lo[:, None] == ks_lo[None])
    full = whole_q[:, None] & whole_k[None] & one_seq & (kp_hi[None] < anchor_lo[:, None])
    if plan.window is not None:  # some key within the window of some query; for full, all
        sees_context &= kp_hi[None] > qp_lo[:, None] - plan.window
        full &= qp_hi[:, None] - kp_lo[None] < plan.window
    sees_block = (kb_lo[None] <= qb_hi[:, None]) & (qb_lo[:, None] <= kb_hi[None])
    keep = sees_context | sees_block  # [query tiles, key tiles]; empty bounds never overlap
    full &= WHOLE_TILES
    partial = keep & ~full
    return BlockMask.from_kv_blocks(
        *_kept_first(partial), *_kept_first(full), BLOCK_SIZE=TILE, mask_mod=mask_mod,
        seq_lengths=(q_len, k_len),
    )  # fmt: skip


def _kept_first(keep: torch.Tensor):
    """(count [1, 1, Q tiles], key tile ids [1, 1, Q tiles, K tiles]) of a [Q tiles, K tiles]
    selection: the selected tiles first, in key order (a stable sort of "not selected")."""
    num = keep.sum(-1, dtype=torch.int32)
    order = torch.sort((~keep).to(torch.int8), dim=-1, stable=True).indices.to(torch.int32)
    return num[None, None], order[None, None]


def _tile_bounds(x: torch.Tensor, n: int, keep: torch.Tensor | None = None):
    """(min, max) of x over each TILE-long run of positions (the last run padded); positions
    where `keep` is False are left out (an empty tile gets min = +inf-like, max = -inf-like)."""
    big = torch.iinfo(torch.long).max
    tiles = -(-n // TILE)
    lo = torch.full((tiles * TILE,), big, dtype=torch.long, device=x.device)
    hi = torch.full((tiles * TILE,), -big, dtype=torch.long, device=x.device)
    lo[:n] = x if keep is None else torch.where(keep, x, big)
    hi[:n] = x if keep is None else torch.where(keep, x, -big)
    return lo.view(tiles, TILE).amin(-1), hi.view(tiles, TILE).amax(-1)


def _flex(q, k, v, block_mask, scale):
    from torch.nn.attention.flex_attention import flex_attention

    global _compiled_flex
    attend = flex_attention
    if q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=True)
        attend = _compiled_flex
    o = attend(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        block_mask=block_mask,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return o[0].transpose(0, 1)
