"""A pruned draft vocabulary: the draft predicts only K of the target's V token ids.

The K ids are the most frequent target tokens of the training answers (ties broken by the lower
id), kept in ascending id order. Two maps describe them, stored as SpecForge and vLLM speculators
store them, so an export carries them unchanged:
- `d2t` int64 [K]: offsets, target id of draft id i = i + d2t[i];
- `t2d` bool [V]: True where a target id is kept.
Every conversion between the two id spaces goes through the functions here (the draft's own head
and Markov bias score draft ids; the proposer hands target ids and target-space distributions to
the decoder, which therefore never sees draft ids).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def check_size(size: int, vocab_size: int, block_size: int) -> None:
    """ValueError naming what is wrong with a draft vocabulary of `size` ids for a target of
    `vocab_size` and a block of `block_size` drafts."""
    if not block_size < size < vocab_size:
        raise ValueError(
            f"draft.draft_vocab_size={size} is invalid; allowed: 0 or null (the target's whole "
            f"vocabulary), or an integer K with block_size={block_size} < K < the target's "
            f"vocab_size={vocab_size}"
        )


@dataclass(frozen=True)
class DraftVocab:
    """The two maps of a pruned vocabulary (CPU or device tensors)."""

    d2t: torch.Tensor  # int64 [K]: target id of draft id i = i + d2t[i]
    t2d: torch.Tensor  # bool [V]: the target id is kept

    @property
    def size(self) -> int:
        return int(self.d2t.numel())

    @property
    def vocab_size(self) -> int:
        return int(self.t2d.numel())

    @property
    def kept_ids(self) -> torch.Tensor:
        """The kept target ids, ascending ([K] int64)."""
        return kept_ids(self.d2t)

    @classmethod
    def from_kept(cls, ids: torch.Tensor, vocab_size: int) -> DraftVocab:
        """The maps of the target ids `ids` (any order, no repeats)."""
        ids = torch.as_tensor(ids, dtype=torch.long).sort().values
        t2d = torch.zeros(vocab_size, dtype=torch.bool)
        t2d[ids] = True
        return cls(ids - torch.arange(ids.numel()), t2d).validate()

    @classmethod
    def from_counts(cls, counts: torch.Tensor, size: int, block_size: int = 1) -> DraftVocab:
        """The `size` most frequent ids of `counts` [V] (ties: the lower id first)."""
        check_size(size, counts.numel(), block_size)
        # a stable sort keeps equal counts in id order, so the lower id wins a tie
        order = torch.sort(counts.long(), descending=True, stable=True).indices
        return cls.from_kept(order[:size], counts.numel())

    def validate(self) -> DraftVocab:
        """The maps agree (t2d marks exactly the ids d2t names, ascending, inside [0, V)), or a
        ValueError saying how they disagree (e.g. maps never set: all zeros)."""
        d2t, t2d = self.d2t.cpu(), self.t2d.cpu()
        if d2t.dtype != torch.long or t2d.dtype != torch.bool or d2t.dim() != 1 or t2d.dim() != 1:
            raise ValueError(
                f"draft vocabulary maps: d2t must be int64 [K] and t2d bool [V], got "
                f"{d2t.dtype} {tuple(d2t.shape)} and {t2d.dtype} {tuple(t2d.shape)}"
            )
        ids = kept_ids(d2t)
        if ids.numel() and (ids[0] < 0 or ids[-1] >= t2d.numel()):
            raise ValueError(f"draft vocabulary maps: d2t names ids outside [0, {t2d.numel()})")
        if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
            raise ValueError("draft vocabulary maps: d2t's target ids are not strictly ascending")
        if int(t2d.sum()) != ids.numel() or not bool(t2d[ids].all()):
            raise ValueError(
                f"draft vocabulary maps: t2d marks {int(t2d.sum())} ids, d2t names {ids.numel()} "
                "others (unset maps, or maps of two different vocabularies)"
            )
        return self

    def to(self, device) -> DraftVocab:
        return DraftVocab(self.d2t.to(device), self.t2d.to(device))


def kept_ids(d2t: torch.Tensor) -> torch.Tensor:
    """Target id of every draft id (i + d2t[i]), from the offsets alone."""
    return d2t + torch.arange(d2t.numel(), device=d2t.device)


def to_target(draft_ids: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    """Draft ids (any shape) -> target ids: id + d2t[id]."""
    return draft_ids + d2t[draft_ids]


def to_draft(target_ids: torch.Tensor, t2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Target ids (any shape) -> (draft ids, kept mask). An id outside the kept set maps to 0
    with mask False: the caller must drop it. No host read (a cumulative sum, not nonzero)."""
    rank = torch.cumsum(t2d, 0) - 1  # draft id of every kept target id
    kept = t2d[target_ids]
    return torch.where(kept, rank[target_ids], torch.zeros_like(target_ids)), kept


def to_target_probs(probs: torch.Tensor, d2t: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Distributions over draft ids [..., K] -> over target ids [..., V], zero outside the kept
    set: what rejection sampling compares with the target's, which keeps it exact (the residual
    max(0, p_t - p_d) then holds every target token the draft cannot propose)."""
    out = probs.new_zeros((*probs.shape[:-1], vocab_size))
    return out.index_copy_(-1, kept_ids(d2t), probs)
