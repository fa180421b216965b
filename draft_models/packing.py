"""Anchor sampling and anchor-bounded packing of many sequences into one flat batch.

Each sequence contributes (a) its injected context: the concatenated target hidden states at the
draft's target layers, for positions before its last anchor, and (b) one block per sampled anchor.
Everything is flat with token-level indices (`TokenIndex`), no padding to a common length, so
the work per batch scales with anchors x block size (plus one linear pass over the context),
never with context length squared.

Conventions (the "anchor-as-slot-0" contract SGLang's DSpark relies on): an anchor at position p
is a token the target has already emitted; block prediction k (k = 0..gamma-1) is the token at
p + 1 + k; the target distribution for it comes from the target's final hidden state at p + k;
the context a block sees is positions < p. Which slot makes prediction k (slot k, or slot k + 1
after the anchor's) is the model's to read (DraftConfig.samples_from_anchor); packing only sizes
the block (`num_slots`), so labels, previous tokens and weights are the same either way.
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

    def hidden_to(self, device) -> SequenceSample:
        """The hidden states on `device`, the tokens left where they are (packing plans on the
        host). Towards a GPU the copy is asynchronous when the states are in pinned memory, as
        the trainer's receiver leaves them; towards the host it is always complete on return."""
        async_copy = torch.device(device).type == "cuda"
        return SequenceSample(
            self.input_ids,
            self.loss_mask,
            self.aux_hidden.to(device, non_blocking=async_copy),
            self.final_hidden.to(device, non_blocking=async_copy),
        )

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
    # [R] flat indices of label_mask's true entries, found on the host by the packer, so the loss
    # selects its rows without reading the device (None: the loss finds them itself). Whoever
    # edits label_mask after packing must set this to None (or to the new rows).
    label_rows: torch.Tensor | None = None

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
            if t is None:
                return None
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


class NoAnchorsError(ValueError):
    """No sequence of a batch has a block to train on (every assistant token truncated away)."""


def host_tokens(samples: Sequence[SequenceSample]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each sample's input_ids (int64) and loss_mask (bool) on the host. Packing plans every index
    there, so the device is read at most once per batch (samples received on a GPU), never once
    per sample: each read waits for all the work queued before it. Validates the samples."""
    for i, s in enumerate(samples):
        s.validate(f"samples[{i}]")
    if all(s.input_ids.device.type == "cpu" and s.loss_mask.device.type == "cpu" for s in samples):
        return [s.input_ids.long() for s in samples], [s.loss_mask.bool() for s in samples]
    lengths = [int(s.input_ids.shape[0]) for s in samples]
    dev = samples[0].input_ids.device
    flat = torch.cat(
        [torch.stack((s.input_ids.long().to(dev), s.loss_mask.long().to(dev))) for s in samples],
        dim=1,
    ).cpu()
    ids, mask = flat[0].split(lengths), flat[1].bool().split(lengths)
    return list(ids), list(mask)


def pack_blocks(
    samples: Sequence[SequenceSample],
    anchors: Sequence[torch.Tensor],
    *,
    block_size: int,
    num_slots: int,
    mask_token_id: int,
    tokens: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
) -> PackedBatch:
    """Pack the blocks opened by `anchors[i]` in `samples[i]` into one flat batch.

    `num_slots` (DraftConfig.num_slots) is block_size when sampling from the anchor (DSpark:
    anchor + gamma-1 masks) and block_size + 1 otherwise (DFlash, DSpark with
    sample_from_anchor=false: anchor + gamma masks; EAGLE-3: chain steps). Sequences without
    anchors contribute nothing. Every index is computed on the host, over the whole batch at
    once, and reaches the batch's device (where the hidden states are) in one copy; the hidden
    states are gathered there. So a batch costs a fixed handful of kernel launches and host
    work linear in its tokens, and with its tokens on the host it never waits on the device
    (`tokens`: `host_tokens(samples)`, when the caller has it already;
    tests/test_gpu_packing.py checks this)."""
    if len(samples) != len(anchors):
        raise ValueError(f"{len(samples)} samples but {len(anchors)} anchor lists")
    all_ids, all_mask = host_tokens(samples) if tokens is None else tokens
    keep = [i for i, a in enumerate(anchors) if a.numel() > 0]
    if not keep:
        raise NoAnchorsError(
            "no anchors in this batch: no sequence has an assistant (loss-masked) token to predict"
        )
    ids_h, mask_h = [all_ids[i] for i in keep], [all_mask[i] for i in keep]
    anc = [anchors[i].long().cpu() for i in keep]
    lengths = torch.tensor([x.shape[0] for x in ids_h])
    for i, a, length in zip(keep, anc, lengths.tolist(), strict=True):
        if int(a.min()) < 1 or int(a.max()) >= length - 1:
            raise ValueError(
                f"samples[{i}]: anchors must lie in [1, {length - 2}], got {a.tolist()}"
            )
    seqs = torch.arange(len(keep))
    # context: positions 0 .. last_anchor-1 of each sequence, the only ones any block sees
    n_ctx = torch.stack([a.max() for a in anc])
    ctx_seq = seqs.repeat_interleave(n_ctx)
    ctx_start = torch.cumsum(n_ctx, 0) - n_ctx  # first context row of each sequence
    ctx_pos = torch.arange(int(n_ctx.sum())) - ctx_start[ctx_seq]
    tok_start = torch.cumsum(lengths, 0) - lengths  # first token of each sequence, flattened
    flat_ids, flat_mask = torch.cat(ids_h), torch.cat(mask_h)
    ctx_ids = flat_ids[tok_start[ctx_seq] + ctx_pos]
    # blocks: anchor p predicts p+1+k from the target's state at p+k (k < gamma)
    a = torch.cat(anc)
    blk_seq = seqs.repeat_interleave(torch.tensor([x.numel() for x in anc]))
    length, start = lengths[blk_seq][:, None], tok_start[blk_seq][:, None]
    k = torch.arange(block_size)
    pred_pos = a[:, None] + 1 + k  # [N, G] positions being predicted
    valid = pred_pos < length
    safe_pred = torch.minimum(pred_pos, length - 1)
    prev_rows = start + torch.minimum(a[:, None] + k, length - 1)  # [N, G] rows of flat tokens
    blk_ids = torch.full((a.numel(), num_slots), mask_token_id, dtype=torch.long)
    blk_ids[:, 0] = flat_ids[start[:, 0] + a]
    # supervision stops at the first label outside the loss mask (or past the end), as in
    # DeepSpec: a user turn inside a block ends that block's supervision
    label_mask = torch.cumprod((valid & flat_mask[start + safe_pred]).long(), dim=1)
    host = {
        "ctx_input_ids": ctx_ids,
        "ctx_seq": ctx_seq,
        "ctx_pos": ctx_pos,
        "block_input_ids": blk_ids,
        "block_seq": blk_seq,
        "block_anchor": a,
        "anchor_ctx_row": ctx_start[blk_seq] + a - 1,
        "prev_tokens": flat_ids[prev_rows],
        "labels": flat_ids[start + safe_pred],
        "label_mask": label_mask,
        "prev_pos": prev_rows - start,  # within each sequence: gathered sample by sample
        "label_rows": torch.nonzero(label_mask.reshape(-1)).squeeze(1),
    }
    dev = samples[keep[0]].aux_hidden.device
    d = _to_device(host, dev)
    prev_pos = d["prev_pos"].split([x.numel() for x in anc])
    final = torch.cat([samples[i].final_hidden[p] for i, p in zip(keep, prev_pos, strict=True)])
    mask = d["label_mask"].bool()
    ctx_seq_d = d["ctx_seq"]
    minus_one = torch.full_like(ctx_seq_d, -1)
    return PackedBatch(
        ctx_features=torch.cat(
            [samples[i].aux_hidden[:n] for i, n in zip(keep, n_ctx.tolist(), strict=True)]
        ),
        ctx_input_ids=d["ctx_input_ids"],
        ctx_index=TokenIndex(
            seq=ctx_seq_d, pos=d["ctx_pos"], block=minus_one, slot=minus_one.clone()
        ),
        block_input_ids=d["block_input_ids"],
        block_seq=d["block_seq"],
        block_anchor=d["block_anchor"],
        anchor_ctx_row=d["anchor_ctx_row"],
        prev_tokens=d["prev_tokens"],
        labels=d["labels"],
        label_mask=mask,
        target_hidden=final * mask[..., None].to(final.dtype),
        label_rows=d["label_rows"],
    )


def _to_device(tensors: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    """int64 host tensors -> the same on `device`, in one copy (from pinned memory on a GPU, so
    the copy does not wait for the work already queued there)."""
    if torch.device(device).type == "cpu":
        return tensors
    flat = torch.cat([t.reshape(-1) for t in tensors.values()])
    flat = flat.pin_memory().to(device, non_blocking=True)
    return {
        name: part.view(t.shape)
        for (name, t), part in zip(
            tensors.items(), flat.split([t.numel() for t in tensors.values()]), strict=True
        )
    }


def pack_sequences(
    samples: Sequence[SequenceSample],
    *,
    num_anchors: int,
    block_size: int,
    num_slots: int,
    mask_token_id: int,
    seed: int,
    sample_ids: Sequence[int] | None = None,
    tokens: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
) -> PackedBatch:
    """Sample anchors (seeded per sample id, so any process packs a sample identically) and pack.
    Raises NoAnchorsError when no sample has a block to train on. `tokens`: as in pack_blocks."""
    sample_ids = list(range(len(samples))) if sample_ids is None else list(sample_ids)
    tokens = host_tokens(samples) if tokens is None else tokens
    anchors = []
    for sid, mask in zip(sample_ids, tokens[1], strict=True):
        g = torch.Generator().manual_seed((int(seed) * 0x9E37_79B9 + int(sid)) % (1 << 63))
        anchors.append(sample_anchors(mask, num_anchors, g))
    return pack_blocks(
        samples,
        anchors,
        block_size=block_size,
        num_slots=num_slots,
        mask_token_id=mask_token_id,
        tokens=tokens,
    )
