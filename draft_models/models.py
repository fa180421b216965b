"""What every draft architecture shares: `DraftModel` (the fusion layer and the frozen target
head), `DraftOutput`, weight initialisation, and `build_draft`, which builds the registered
architecture a config names (the architectures themselves live in `draft_models.archs`).

Every architecture consumes a `PackedBatch` and returns a `DraftOutput` of final normed hidden
states per block prediction; the frozen target LM head is applied later, in the chunked loss
(training) or by the proposer (decoding). Pure PyTorch so every path runs on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .config import DraftConfig, TargetSpec
from .heads import FrozenTargetHead
from .layers import activation_dtype
from .registry import get_arch
from .vocab import DraftVocab, to_target, to_target_probs


@dataclass
class DraftOutput:
    hidden: torch.Tensor  # [N, G, H] final normed hidden of each block prediction
    seq_latent: torch.Tensor | None = None  # [N, G, r] sequential-head latent (bias = W2 z)
    confidence_logit: torch.Tensor | None = None  # [N, G] raw confidence logits


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)


class DraftModel(nn.Module):
    """What every draft shares: the fusion layer, the frozen target head, the config."""

    def __init__(self, cfg: DraftConfig, target_head: FrozenTargetHead) -> None:
        super().__init__()
        if cfg.hidden_size is None:
            raise ValueError(
                "DraftConfig must be resolved against the target first (cfg.resolve(target))"
            )
        if target_head.hidden_size != cfg.hidden_size:
            raise ValueError(
                f"draft.hidden_size={cfg.hidden_size} does not match the target LM head width "
                f"{target_head.hidden_size}"
            )
        self.cfg = cfg
        self.target_head = (
            target_head  # plain object: registers no parameter (see FrozenTargetHead)
        )
        self.num_context_features = len(cfg.target_layer_ids)
        self.fc = nn.Linear(
            self.num_context_features * cfg.hidden_size, cfg.hidden_size, bias=False
        )
        if cfg.pruned_vocab:
            # A pruned vocabulary (draft_models.vocab): the draft's own LM head over the K kept
            # ids, trainable as EAGLE-3's pruned heads are (speculators freezes its copy; a
            # head of K rows is worth adapting to the draft's hidden states), and the maps as
            # buffers, so the checkpoint, the engine state and every export carry them.
            # `set_vocab` fills both (the head from the target head's kept rows).
            k, v = cfg.draft_vocab_size, target_head.vocab_size
            self.lm_head = nn.Linear(cfg.hidden_size, k, bias=False)
            self.register_buffer("d2t", torch.zeros(k, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(v, dtype=torch.bool))

    def fuse_context(self, features: torch.Tensor) -> torch.Tensor:
        expected = self.fc.in_features
        if features.dim() != 2 or features.shape[-1] != expected:
            raise ValueError(
                f"injected target states have shape {tuple(features.shape)}, expected [tokens, "
                f"{expected}] = "
                f"len(target_layer_ids)={self.num_context_features} x "
                f"hidden_size={self.cfg.hidden_size}; "
                "the target is capturing different layers or has a different hidden size than this "
                "draft"
            )
        return self.fc(features.to(activation_dtype(self.fc.weight)))

    # ----- the output vocabulary: the target's whole one, or a pruned one (cfg.draft_vocab_size)
    @property
    def vocab(self) -> DraftVocab | None:
        """The pruned vocabulary's maps (this draft's buffers), or None for the full one."""
        return DraftVocab(self.d2t, self.t2d) if self.cfg.pruned_vocab else None

    @torch.no_grad()
    def set_vocab(self, vocab: DraftVocab) -> None:
        """Install a pruned vocabulary's maps and start the LM head from the target head's kept
        rows (what the draft would predict with the target's head restricted to them)."""
        if not self.cfg.pruned_vocab:
            raise ValueError("set_vocab: this draft predicts the whole vocabulary")
        vocab.validate()
        if (vocab.size, vocab.vocab_size) != (self.d2t.numel(), self.t2d.numel()):
            raise ValueError(
                f"draft vocabulary of {vocab.size} of {vocab.vocab_size} ids for a draft of "
                f"draft_vocab_size={self.d2t.numel()} over {self.t2d.numel()} target ids"
            )
        self.d2t.copy_(vocab.d2t)
        self.t2d.copy_(vocab.t2d)
        head = self.target_head.lm_head_weight
        rows = head[vocab.kept_ids.to(head.device)]
        self.lm_head.weight.copy_(rows)

    def check_vocab(self) -> None:
        """ValueError when a pruned draft's maps are unset or inconsistent (a host read: call it
        once, when a trainer or proposer starts, not per step)."""
        if self.cfg.pruned_vocab:
            try:
                self.vocab.validate()
            except ValueError as exc:
                raise ValueError(f"draft_vocab_size={self.cfg.draft_vocab_size}: {exc}") from None

    @property
    def output_head_weight(self) -> torch.Tensor:
        """The LM head that scores the draft's output ids: its own [K, H] when pruned, else the
        target's frozen [V, H]."""
        return self.lm_head.weight if self.cfg.pruned_vocab else self.target_head.lm_head_weight

    def output_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft's output ids ([..., K] pruned, else [..., V])."""
        if self.cfg.pruned_vocab:
            return self.lm_head(hidden.to(self.lm_head.weight.dtype))
        return self.target_head.logits(hidden)

    def target_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Output ids -> target ids (the identity for the full vocabulary)."""
        return to_target(ids, self.d2t) if self.cfg.pruned_vocab else ids

    def target_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """Distributions over output ids -> over target ids, zero outside a pruned set."""
        if not self.cfg.pruned_vocab:
            return probs
        return to_target_probs(probs, self.d2t, self.t2d.numel())

    @property
    def sequential_head(self) -> nn.Module | None:
        return getattr(self, "markov_head", None)

    @property
    def vocab_bias_weight(self) -> torch.Tensor | None:
        """W2 of the sequential head ([V, r]; [K, r] for a pruned vocabulary): the loss folds
        the transition bias into its LM-head matmul. None for drafts without a sequential
        head."""
        head = self.sequential_head
        return head.markov_w2.weight if head is not None else None

    def trainable_parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_draft(cfg: DraftConfig, target: TargetSpec, target_head: FrozenTargetHead) -> DraftModel:
    """Resolve `cfg` against the target and build the draft it describes."""
    resolved = cfg.resolve(target)
    if target_head.vocab_size != target.vocab_size:
        raise ValueError(
            f"target LM head has {target_head.vocab_size} rows but the target config says "
            f"vocab_size={target.vocab_size}"
        )
    return get_arch(resolved.arch).model(resolved, target_head)


def row_prefix(t: torch.Tensor, rows: int, size: int, n: int) -> torch.Tensor:
    """The first `n` positions of each row of a static-state proposer's row-major buffer
    t [rows * size, ...] (what a proposal over a context bucket attends to): the buffer itself
    when n covers it, a view for one row, a copy into one run per row otherwise."""
    if n >= size:
        return t
    return t.view(rows, size, *t.shape[1:])[:, :n].flatten(0, 1)


def commit_positions(
    start: int | torch.Tensor, n: int, capacity: int, device: torch.device
) -> torch.Tensor:
    """Positions a static-state proposer's commit writes: start.. with `start` a host int
    (checked against the buffers' `capacity`; [n]) or a device tensor [R] (one start per row;
    [R, n]; the fused step's, not checked: the decoder sizes the buffers for prompt + new tokens
    + gamma + 1 positions, past the last block a request can commit)."""
    if isinstance(start, int):
        if start + n > capacity:
            raise ValueError(f"position {start + n - 1} is past the proposer's {capacity}")
        return start + torch.arange(n, device=device)
    return start.view(-1, 1) + torch.arange(n, device=device)
