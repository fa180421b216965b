"""Draft-side state of the reference decoder: what each draft kind keeps between steps and how it
proposes a block of gamma tokens.

Both proposers keep everything on the draft's device and return tensors of fixed shape
([gamma] tokens, [gamma, V] proposal distributions when sampling, [gamma] prefix survival), so a
step never reads the device. Their context grows only with *committed* positions: the decoder
calls `commit` with the target features of the anchor and the accepted drafts, never with
rejected ones.
"""

from __future__ import annotations

from typing import Optional

import torch

from draft_models import DSparkDraft, Eagle3Draft
from draft_models.packed_attention import TokenIndex


# One block of queries over one sequence: a dense mask is tiny, and the shape changes every step,
# which would make the compiled flex_attention path recompile.
ATTENTION = "sdpa"


def pick(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]):
    """(token [1] on logits' device, probabilities [V] used or None) from logits [V]; greedy at 0."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True), None
    probs = torch.softmax(logits.double() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator), probs


def _context_index(length: int, device) -> TokenIndex:
    return TokenIndex(seq=torch.zeros(length, dtype=torch.long, device=device),
                      pos=torch.arange(length, device=device),
                      block=torch.full((length,), -1, device=device), slot=torch.full((length,), -1, device=device))


def _block_index(pos: int, slots: int, device) -> TokenIndex:
    zeros = torch.zeros(slots, dtype=torch.long, device=device)
    return TokenIndex(seq=zeros, pos=pos + torch.arange(slots, device=device), block=zeros,
                      slot=torch.arange(slots, device=device))


class DSparkProposer:
    """DSpark / DFlash: per-layer keys/values of the injected target states of committed positions
    (the KV injection), one parallel backbone pass per block, then the sequential and confidence
    heads left to right over the gamma slots."""

    def __init__(self, draft: DSparkDraft, gamma: int, sts: torch.Tensor) -> None:
        self.draft, self.gamma, self.sts = draft, gamma, sts
        self.ctx_kv: Optional[list] = None
        self.length = 0
        self.confidence_logits: Optional[torch.Tensor] = None  # raw logits [gamma] of the last proposal

    def commit(self, feats: torch.Tensor, tokens: torch.Tensor, start: int) -> None:
        """Add committed positions start..start+n-1 (features [n, m*H]; tokens unused by DSpark)."""
        d = self.draft
        states = d.hidden_norm(d.fuse_context(feats))
        new = d.context_kv(states, torch.arange(start, start + feats.shape[0], device=feats.device))
        if self.ctx_kv is None:
            self.ctx_kv = new
        else:
            self.ctx_kv = [(torch.cat((k0, k1)), torch.cat((v0, v1))) for (k0, v0), (k1, v1) in zip(self.ctx_kv, new)]
        self.length = start + feats.shape[0]

    def propose(self, anchor: torch.Tensor, pos: int, temperature: float, generator):
        d, cfg = self.draft, self.draft.cfg
        device = anchor.device
        ids = torch.full((1, cfg.num_slots), cfg.mask_token_id, dtype=torch.long, device=device)
        ids[0, :1] = anchor
        hidden = d.backbone(ids, _block_index(pos, cfg.num_slots, device), self.ctx_kv,
                            _context_index(self.length, device), backend=ATTENTION)[0]
        if not cfg.samples_from_anchor:
            hidden = hidden[1:]
        head = d.sequential_head
        state = head.init_state(1, hidden) if head is not None else None
        tokens, dists, conf = [], [], []
        prev = anchor
        for k in range(self.gamma):
            h = hidden[k:k + 1]
            logits = d.target_head.logits(h)[0].float()
            if head is not None:
                z, state = head.step(state, prev, h)
                logits = logits + head.markov_w2(z)[0].float()
            if cfg.confidence_head:
                prev_emb = head.prev_embedding(prev) if head is not None else None
                conf.append(d.confidence_head(h, prev_emb)[0].double())
            prev, probs = pick(logits, temperature, generator)
            tokens.append(prev)
            dists.append(probs)
        if conf:
            self.confidence_logits = torch.stack(conf)
            survival = torch.cumprod(torch.sigmoid(self.confidence_logits / self.sts[: self.gamma]), 0)
        else:
            survival = torch.ones(self.gamma, dtype=torch.float64, device=device)
        return torch.cat(tokens), (torch.stack(dists) if temperature > 0 else None), survival


class Eagle3Proposer:
    """EAGLE-3 chain: the draft layer's own KV cache over committed positions (position t's key
    reads token x_t and the fused target feature of t-1, exactly as in training), then gamma
    autoregressive chain steps that feed each step's output feature into the next."""

    def __init__(self, draft: Eagle3Draft, gamma: int) -> None:
        self.draft, self.gamma = draft, gamma
        self.keys = self.values = None
        self.last_feature: Optional[torch.Tensor] = None  # fused target feature of the last committed position
        self.length = 0
        self.confidence_logits = None  # EAGLE-3 has no confidence head

    def commit(self, feats: torch.Tensor, tokens: torch.Tensor, start: int) -> None:
        d = self.draft
        g = d.fuse_context(feats)
        first = self.last_feature if self.last_feature is not None else g.new_zeros(1, g.shape[1])
        g_prev = torch.cat((first, g[:-1]))
        pos = torch.arange(start, start + feats.shape[0], device=feats.device)
        k, v = d.self_attn.kv(d._layer_input(tokens, g_prev), pos)
        self.keys = k if self.keys is None else torch.cat((self.keys, k))
        self.values = v if self.values is None else torch.cat((self.values, v))
        self.last_feature = g[-1:]
        self.length = start + feats.shape[0]

    def propose(self, anchor: torch.Tensor, pos: int, temperature: float, generator):
        d = self.draft
        device = anchor.device
        keys, values, k_index = self.keys, self.values, _context_index(self.length, device)
        feature, token = self.last_feature, anchor
        tokens, dists = [], []
        for k in range(self.gamma):
            q_index = TokenIndex(seq=torch.zeros(1, dtype=torch.long, device=device),
                                 pos=torch.full((1,), pos + k, device=device),
                                 block=torch.zeros(1, dtype=torch.long, device=device),
                                 slot=torch.full((1,), k, device=device))
            feature, h, keys, values = d.step(token, feature, q_index, keys, values, k_index, backend=ATTENTION)
            k_index = k_index.cat(q_index)
            token, probs = pick(d.target_head.logits(h)[0].float(), temperature, generator)
            tokens.append(token)
            dists.append(probs)
        survival = torch.ones(self.gamma, dtype=torch.float64, device=device)
        return torch.cat(tokens), (torch.stack(dists) if temperature > 0 else None), survival


def make_proposer(draft, gamma: int, sts: torch.Tensor):
    if isinstance(draft, Eagle3Draft):
        return Eagle3Proposer(draft, gamma)
    return DSparkProposer(draft, gamma, sts)
