"""Reference speculative decoder, batch 1: an HF causal-LM target + a DSpark / DFlash draft (or none).

One step: the draft proposes gamma tokens for the block opened by the last emitted token (the
anchor) from the target states of all committed positions; the scheduler picks how many to
verify; the target verifies them in one forward over its KV cache; the longest acceptable prefix
plus one bonus token is emitted; the target cache is cropped back past rejected tokens and the
draft's injected context grows by the committed positions only.

Lossless: greedy accepts a draft token only if it equals the target's argmax, and the bonus is
the target's argmax, so the output is the target's greedy decoding; with temperature, draft token
d ~ q is accepted with probability min(1, p(d) / q(d)) and a rejection resamples from
norm(max(0, p - q)), the bonus from p, which leaves the target's distribution exactly.

Limits of this reference (recorded, not hidden): one request at a time, Python control flow
(no CUDA-graph shaping yet), targets with a standard KV cache (not yet KDA/linear-attention
state staging), EAGLE-3 chains not yet decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from transformers import DynamicCache

from draft_models import DSparkDraft
from draft_models.packed_attention import TokenIndex

from splitserve.capture import capture_states

from .scheduler import SchedulerConfig, schedule


@dataclass
class DecodeResult:
    token_ids: list[int]
    accept_lengths: list[int] = field(default_factory=list)  # tokens emitted per step (bonus included)
    verified: list[int] = field(default_factory=list)  # draft tokens sent to verification per step

    @property
    def steps(self) -> int:
        return len(self.accept_lengths)


def truncate_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions (transformers 5: crop(-n) removes the last n)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


def _pick(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]):
    """(token, probabilities used) from logits [V]; greedy when temperature == 0."""
    if temperature == 0:
        return int(logits.argmax()), None
    probs = torch.softmax(logits.double() / temperature, -1)
    return int(torch.multinomial(probs, 1, generator=generator)), probs


class SpeculativeDecoder:
    def __init__(self, target, draft: Optional[DSparkDraft], *, scheduler: SchedulerConfig = SchedulerConfig("fixed"),
                 sps: Optional[Callable[[int], float]] = None, sts_temperatures: Optional[list[float]] = None,
                 block_size: Optional[int] = None) -> None:
        self.target = target.eval()
        self.draft = draft.eval() if draft is not None else None
        self.scheduler, self.sps = scheduler, sps
        if draft is not None:
            cfg = draft.cfg
            if cfg.arch == "eagle3":
                raise NotImplementedError("EAGLE-3 chain decoding is not implemented in the reference decoder yet")
            self.gamma = block_size or cfg.block_size
            if self.gamma > cfg.block_size:
                raise ValueError(f"block_size={self.gamma} is larger than the draft was trained for ({cfg.block_size})")
            if scheduler.mode != "fixed" and not cfg.confidence_head:
                raise ValueError(f"scheduler.mode={scheduler.mode} needs a confidence head; this draft has none")
            self.sts = torch.tensor(sts_temperatures or [1.0] * cfg.block_size, dtype=torch.float64)
            if self.sts.numel() != cfg.block_size:
                raise ValueError(f"STS file has {self.sts.numel()} temperatures, the draft has block size {cfg.block_size}")
            self.layer_ids = cfg.target_layer_ids
        else:
            self.gamma, self.layer_ids = 0, []

    # ----- target side -----
    def _target_forward(self, ids: list[int], start: int, cache: DynamicCache):
        """Logits [n, V] and captured draft features [n, m*H] for tokens at positions start..start+n-1."""
        x = torch.tensor([ids])
        pos = torch.arange(start, start + len(ids))[None]
        with capture_states(self.target, self.layer_ids) as store:
            out = self.target(input_ids=x, position_ids=pos, past_key_values=cache, use_cache=True)
        feats = torch.cat([store["layers"][i][0] for i in self.layer_ids], -1) if self.layer_ids else None
        return out.logits[0].float(), feats

    # ----- draft side -----
    def _propose(self, anchor: int, pos: int, ctx_kv, ctx_len: int, temperature: float, generator):
        """Draft tokens [gamma], their distributions (sampling) and prefix survival [gamma]."""
        d = self.draft
        cfg = d.cfg
        slots = cfg.num_slots
        ids = torch.full((1, slots), cfg.mask_token_id, dtype=torch.long)
        ids[0, 0] = anchor
        zeros = torch.zeros(slots, dtype=torch.long)
        block = TokenIndex(seq=zeros, pos=pos + torch.arange(slots), block=zeros, slot=torch.arange(slots))
        ctx_index = TokenIndex(seq=torch.zeros(ctx_len, dtype=torch.long), pos=torch.arange(ctx_len),
                               block=torch.full((ctx_len,), -1), slot=torch.full((ctx_len,), -1))
        hidden = d.backbone(ids, block, ctx_kv, ctx_index)[0]
        if not cfg.samples_from_anchor:
            hidden = hidden[1:]
        head = d.sequential_head
        state = head.init_state(1, hidden) if head is not None else None
        tokens, dists, conf = [], [], []
        prev = torch.tensor([anchor])
        for k in range(self.gamma):
            logits = d.target_head.logits(hidden[k:k + 1])[0].float()
            if head is not None:
                z, state = head.step(state, prev, hidden[k:k + 1])
                logits = logits + head.markov_w2(z)[0].float()
            if cfg.confidence_head:
                prev_emb = head.prev_embedding(prev) if head is not None else None
                raw = d.confidence_head(hidden[k:k + 1], prev_emb)[0].double()
                conf.append(torch.sigmoid(raw / self.sts[k]))
            token, probs = _pick(logits, temperature, generator)
            tokens.append(token)
            dists.append(probs)
            prev = torch.tensor([token])
        survival = torch.cumprod(torch.stack(conf), 0) if conf else torch.ones(self.gamma, dtype=torch.float64)
        return tokens, dists, survival

    def _extend_context(self, ctx_kv, feats: torch.Tensor, start: int):
        states = self.draft.hidden_norm(self.draft.fuse_context(feats))
        new = self.draft.context_kv(states, torch.arange(start, start + feats.shape[0]))
        if ctx_kv is None:
            return new
        return [(torch.cat((k0, k1)), torch.cat((v0, v1))) for (k0, v0), (k1, v1) in zip(ctx_kv, new)]

    # ----- the loop -----
    @torch.no_grad()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, *, temperature: float = 0.0,
                 eos_token_id: Optional[int] = None, seed: int = 0) -> DecodeResult:
        generator = torch.Generator().manual_seed(seed) if temperature > 0 else None
        cache = DynamicCache()
        logits, feats = self._target_forward(list(prompt_ids), 0, cache)
        anchor, _ = _pick(logits[-1], temperature, generator)
        out = DecodeResult(token_ids=[anchor])
        pos = len(prompt_ids)  # position of the anchor (not yet in the target cache)
        ctx_kv = self._extend_context(None, feats, 0) if self.draft is not None else None
        while len(out.token_ids) < max_new_tokens and anchor != eos_token_id:
            if self.draft is not None:
                drafts, dists, survival = self._propose(anchor, pos, ctx_kv, pos, temperature, generator)
                n_verify = schedule(survival[None], self.scheduler, self.sps)[0]
                n_verify = min(n_verify, max_new_tokens - len(out.token_ids))
            else:
                drafts, dists, n_verify = [], [], 0
            logits, feats = self._target_forward([anchor] + drafts[:n_verify], pos, cache)
            accepted, bonus = self._accept(drafts[:n_verify], dists, logits, temperature, generator)
            emitted = drafts[:accepted] + [bonus]
            if eos_token_id is not None and eos_token_id in emitted:
                emitted = emitted[: emitted.index(eos_token_id) + 1]
            truncate_cache(cache, pos + accepted + 1)  # drop the target states of rejected tokens
            if self.draft is not None:
                ctx_kv = self._extend_context(ctx_kv, feats[: accepted + 1], pos)
            out.token_ids += emitted
            out.accept_lengths.append(len(emitted))
            out.verified.append(n_verify)
            pos += accepted + 1
            anchor = emitted[-1]
        out.token_ids = out.token_ids[:max_new_tokens]
        return out

    @staticmethod
    def _accept(drafts, dists, logits, temperature, generator) -> tuple[int, int]:
        """(number of draft tokens accepted, bonus token) for target logits [len(drafts) + 1, V]."""
        for k, d in enumerate(drafts):
            if temperature == 0:
                if int(logits[k].argmax()) != d:
                    return k, int(logits[k].argmax())
                continue
            p = torch.softmax(logits[k].double() / temperature, -1)
            q = dists[k]
            if torch.rand((), generator=generator, dtype=torch.float64) >= torch.clamp(p[d] / q[d], max=1.0):
                residual = torch.clamp(p - q, min=0)
                return k, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
        token, _ = _pick(logits[len(drafts)], temperature, generator)
        return len(drafts), token
