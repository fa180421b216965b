"""Anchor sampling and anchor-bounded packing of many sequences into one flat batch.

Each sequence contributes (a) its injected context: the concatenated target hidden states at the
draft's target layers, for positions before its last anchor, and (b) one block per sampled anchor.
Everything is flat with token-level indices (`TokenIndex`), no padding to a common length, so
the work per batch scales with anchors x block size (plus one linear pass over the context),
never with context length squared.

Conventions (the "anchor-as-slot-0" contract SGLang's DSpark relies on): an anchor at position p
is a token the target has already emitted; block prediction k (k = 0..gamma-1) is the token at
p + 1 + k; the target distribution for it comes from the target's final hidden state at p + k;
the context a block sees is positions < p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from .packed_attention import TokenIndex


@dataclass
class SequenceSample:
    """One target forward: what a target worker sends to the trainer for one sequence."""

    input_ids: torch.Tensor  # [L] int64
    loss_mask: torch.Tensor  # [L] bool: position t is an assistant token to be predicted
    # [L, m * H]: target layers' outputs, concatenated in target_layer_ids order
    aux_hidden: torch.Tensor
    final_hidden: torch.Tensor  # [L, H]: target's final normed hidden state (LM head input)

    def to_device(self, device) -> SequenceSample:
        return SequenceSample(*(getattr(self, f.name).to(device) for f in fields(self)))

    def validate(self, name: str = "sample") -> None:
        length = self.input_ids.shape[0]
        if self.input_ids.dim() != 1:
            raise ValueError(
                f"{name}.input_ids must be 1-D, got shape {tuple(self.input_ids.shape)}"
            )
        for field_name in ("loss_mask", "aux_hidden", "final_hidden"):
            t = getattr(self, field_name)
            if t.shape[0] != length:
                raise ValueError(
                    f"{name}.{field_name} has {t.shape[0]} positions but input_ids has {length}"
                )


@dataclass
class PackedBatch:
    """A flat batch of blocks. N blocks, S input slots per block, G = gamma predictions."""

    ctx_features: torch.Tensor  # [T, m * H] injected target states
    ctx_input_ids: torch.Tensor  # [T] token at each context position
    ctx_index: TokenIndex
    block_input_ids: torch.Tensor  # [N, S]: anchor, then mask tokens
    block_seq: torch.Tensor  # [N] sequence id of each block
    block_anchor: torch.Tensor  # [N] anchor position p
    anchor_ctx_row: torch.Tensor  # [N] row of (seq, p - 1) in ctx_features
    prev_tokens: torch.Tensor  # [N, G] teacher-forced previous token of prediction k: x_{p+k}
    labels: torch.Tensor  # [N, G] x_{p+1+k}
    label_mask: torch.Tensor  # [N, G] bool: label k and every earlier label are loss tokens
    target_hidden: torch.Tensor  # [N, G, H] target final hidden at p + k (zeros where masked)

    @property
    def num_blocks(self) -> int:
        return int(self.block_input_ids.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.block_input_ids.shape[1])

    def block_index(self) -> TokenIndex:
        n, s = self.block_input_ids.shape
        slot = torch.arange(s, device=self.block_anchor.device).repeat(n)
        block = torch.arange(n, device=self.block_anchor.device).repeat_interleave(s)
        return TokenIndex(
            seq=self.block_seq[block], pos=self.block_anchor[block] + slot, block=block, slot=slot
        )

    def to(self, device=None, dtype=None) -> PackedBatch:
        """Move to a device; cast only the floating tensors (hidden states) to `dtype`."""

        def move(t):
            if isinstance(t, TokenIndex):
                return TokenIndex(*(f.to(device) for f in t.fields()))
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        return PackedBatch(**{f.name: move(getattr(self, f.name)) for f in fields(self)})


def anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions p whose own token and next token (the block's first prediction) are both loss
    tokens, as in DeepSpec: an anchor is a token the target emitted, which is what serving anchors
    its blocks on (the last prompt token never is). The reference also admits p = 0; a loss token
    at position 0 cannot occur in rendered chat (every template opens with a role header), and a
    block there would have no target state before its anchor, so p starts at 1 here."""
    mask = loss_mask.bool()
    cand = torch.zeros_like(mask)
    cand[1:-1] = mask[1:-1] & mask[2:]
    return torch.nonzero(cand).squeeze(1)


def sample_anchors(
    loss_mask: torch.Tensor, num_anchors: int, generator: torch.Generator
) -> torch.Tensor:
    """Up to `num_anchors` distinct anchor positions among the candidates, sorted, seeded."""
    cand = anchor_candidates(loss_mask)
    if cand.numel() <= num_anchors:
        return cand
    pick = torch.randperm(cand.numel(), generator=generator)[:num_anchors]
    return cand[pick].sort().values


def pack_blocks(
    samples: Sequence[SequenceSample],
    anchors: Sequence[torch.Tensor],
    *,
    block_size: int,
    num_slots: int,
    mask_token_id: int,
) -> PackedBatch:
    """Pack the blocks opened by `anchors[i]` in `samples[i]` into one flat batch.

    `num_slots` is block_size for DSpark (anchor + gamma-1 masks) and block_size + 1 for DFlash
    and EAGLE-3 (anchor + gamma masks / chain steps). Sequences without anchors contribute nothing.
    """
    if len(samples) != len(anchors):
        raise ValueError(f"{len(samples)} samples but {len(anchors)} anchor lists")
    ctx_feat, ctx_ids, ctx_seq, ctx_pos = [], [], [], []
    blk_ids, blk_seq, blk_anchor, blk_ctx_row = [], [], [], []
    prev, labels, lmask, thid = [], [], [], []
    ctx_rows = 0
    gamma = block_size
    seq_id = 0
    for i, (s, a) in enumerate(zip(samples, anchors, strict=True)):
        s.validate(f"samples[{i}]")
        if a.numel() == 0:
            continue
        length = s.input_ids.shape[0]
        if int(a.min()) < 1 or int(a.max()) >= length - 1:
            raise ValueError(
                f"samples[{i}]: anchors must lie in [1, {length - 2}], got {a.tolist()}"
            )
        # Index tensors live where the hidden states are (GPU on a trainer that received them).
        dev = s.aux_hidden.device
        a = a.long().to(dev)
        input_ids, loss_mask = s.input_ids.to(dev), s.loss_mask.to(dev).bool()
        n_ctx = int(a.max())  # positions 0 .. last_anchor-1 are the only context any block sees
        ctx_feat.append(s.aux_hidden[:n_ctx])
        ctx_ids.append(input_ids[:n_ctx])
        ctx_seq.append(torch.full((n_ctx,), seq_id, dtype=torch.long, device=dev))
        ctx_pos.append(torch.arange(n_ctx, device=dev))

        k = torch.arange(gamma, device=dev)
        pred_pos = a[:, None] + 1 + k  # [n, G] positions being predicted
        valid = pred_pos < length
        safe_pred = pred_pos.clamp(max=length - 1)
        prev_pos = (a[:, None] + k).clamp(max=length - 1)
        ids = torch.full((a.numel(), num_slots), mask_token_id, dtype=torch.long, device=dev)
        ids[:, 0] = input_ids[a]
        blk_ids.append(ids)
        blk_seq.append(torch.full((a.numel(),), seq_id, dtype=torch.long, device=dev))
        blk_anchor.append(a)
        blk_ctx_row.append(ctx_rows + a - 1)
        prev.append(input_ids[prev_pos])
        labels.append(input_ids[safe_pred])
        # supervision stops at the first label outside the loss mask (or past the end), as in
        # DeepSpec: a user turn inside a block ends that block's supervision
        m = torch.cumprod((valid & loss_mask[safe_pred]).long(), dim=1).bool()
        lmask.append(m)
        thid.append(s.final_hidden[prev_pos] * m[..., None].to(s.final_hidden.dtype))
        ctx_rows += n_ctx
        seq_id += 1
    if not blk_ids:
        raise ValueError(
            "no anchors in this batch: no sequence has an assistant (loss-masked) token to predict"
        )
    ctx_seq_t = torch.cat(ctx_seq)
    minus_one = torch.full_like(ctx_seq_t, -1)
    return PackedBatch(
        ctx_features=torch.cat(ctx_feat),
        ctx_input_ids=torch.cat(ctx_ids),
        ctx_index=TokenIndex(
            seq=ctx_seq_t, pos=torch.cat(ctx_pos), block=minus_one, slot=minus_one.clone()
        ),
        block_input_ids=torch.cat(blk_ids),
        block_seq=torch.cat(blk_seq),
        block_anchor=torch.cat(blk_anchor),
        anchor_ctx_row=torch.cat(blk_ctx_row),
        prev_tokens=torch.cat(prev),
        labels=torch.cat(labels),
        label_mask=torch.cat(lmask),
        target_hidden=torch.cat(thid),
    )


def pack_sequences(
    samples: Sequence[SequenceSample],
    *,
    num_anchors: int,
    block_size: int,
    num_slots: int,
    mask_token_id: int,
    seed: int,
    sample_ids: Sequence[int] | None = None,
) -> PackedBatch:
    """Sample anchors (seeded per sample id, so any process packs a sample identically) and pack."""
    sample_ids = list(range(len(samples))) if sample_ids is None else list(sample_ids)
    anchors = []
    for sid, s in zip(sample_ids, samples, strict=True):
        g = torch.Generator().manual_seed((int(seed) * 0x9E37_79B9 + int(sid)) % (1 << 63))
        anchors.append(sample_anchors(s.loss_mask.cpu(), num_anchors, g))
    return pack_blocks(
        samples, anchors, block_size=block_size, num_slots=num_slots, mask_token_id=mask_token_id
    )
