"""DSpark: a DFlash-style parallel backbone with KV injection, plus a sequential (Markov or RNN)
head and a confidence head; its decode-time proposer; its export mapping to SGLang 0.5.23's
DSpark draft config. Registered as `dspark` (DFlash reuses the model: `archs/dflash.py`)."""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from ..config import DraftConfig, TargetSpec
from ..families import family
from ..heads import SEQUENTIAL_HEAD_CLASSES, ConfidenceHead, FrozenTargetHead
from ..layers import InjectedDecoderLayer, RMSNorm, activation_dtype
from ..losses import draft_loss
from ..models import DraftModel, DraftOutput, commit_positions, init_weights, row_prefix
from ..packed_attention import AttentionPlan, TokenIndex
from ..packing import PackedBatch
from ..registry import DraftArch, register_arch
from ..sampling import pick_counted


class DSparkDraft(DraftModel):
    """DFlash backbone + KV injection + sequential head + confidence head.

    arch=dflash uses the same backbone with anchor + gamma mask slots, predicts from the mask slots,
    and has neither sequential nor confidence head. A DSpark with `sample_from_anchor=false`
    (speculators' DFlash-style convention) has DFlash's slots and DSpark's heads: every slot
    reader follows `cfg.samples_from_anchor`, and the heads see the predicting slots only.

    With `draft_vocab_size` K (DSpark only) it predicts K kept target ids through its own LM head
    (DraftModel) and a Markov W2 of K rows; the proposer maps its picks back to target ids.
    """

    def __init__(self, cfg: DraftConfig, target_head: FrozenTargetHead) -> None:
        super().__init__(cfg, target_head)
        self.hidden_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList(InjectedDecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        if cfg.sequential_head != "none":
            self.markov_head = SEQUENTIAL_HEAD_CLASSES[cfg.sequential_head](
                target_head.vocab_size, cfg.markov_rank, cfg.hidden_size, cfg.draft_vocab_size
            )
        if cfg.confidence_head:
            rank = cfg.markov_rank if cfg.sequential_head != "none" else 0
            self.confidence_head = ConfidenceHead(cfg.hidden_size, rank)
            if cfg.confidence_detach:
                self.confidence_head.clip_gradients(cfg.confidence_clip)
        init_weights(self)  # every weight N(0, 0.02), biases zero, as DeepSpec (markov_w2 included)

    def context_states(self, batch: PackedBatch) -> torch.Tensor:
        return self.hidden_norm(self.fuse_context(batch.ctx_features))

    def context_kv(
        self, ctx_states: torch.Tensor, ctx_pos: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's keys/values of the injected context (what a decoder caches)."""
        return [layer.context_kv(ctx_states, ctx_pos) for layer in self.layers]

    def backbone(
        self,
        block_ids: torch.Tensor,
        block_index: TokenIndex,
        ctx_kv: list,
        ctx_index: TokenIndex,
        backend: str = "auto",
        rows: int | None = None,
    ) -> torch.Tensor:
        """Block token ids [N, S] -> final normed hidden [N, S, H]. `rows` (decoding, dense
        backend): the N blocks are N requests, block n over the n-th of N equal runs of the
        context (AttentionPlan's rows layout)."""
        n, s = block_ids.shape
        x = self.target_head.embed(block_ids.reshape(-1)).to(activation_dtype(self.fc.weight))
        plan = AttentionPlan(
            block_index,
            ctx_index.cat(block_index),
            window=self.cfg.sliding_window,
            backend=backend,
            rows=None if rows is None else (rows, len(ctx_index) // rows),
        )
        for layer, (k, v) in zip(self.layers, ctx_kv, strict=True):
            x = layer(x, block_index, k, v, plan)
        return self.norm(x).view(n, s, -1)

    def heads(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> DraftOutput:
        """Apply the sequential and confidence heads with the given previous tokens [N, G]."""
        head = self.sequential_head
        latent = head.latents(prev_tokens, hidden) if head is not None else None
        conf = None
        if self.cfg.confidence_head:
            feats = hidden
            prev_emb = head.prev_embedding(prev_tokens) if head is not None else None
            if self.cfg.confidence_detach:  # its loss trains the head alone
                feats = hidden.detach()
                prev_emb = prev_emb.detach() if prev_emb is not None else None
            conf = self.confidence_head(feats, prev_emb)
        return DraftOutput(hidden=hidden, seq_latent=latent, confidence_logit=conf)

    def forward(self, batch: PackedBatch, backend: str = "auto") -> DraftOutput:
        ctx_kv = self.context_kv(self.context_states(batch), batch.ctx_index.pos)
        hidden = self.backbone(
            batch.block_input_ids, batch.block_index(), ctx_kv, batch.ctx_index, backend
        )
        return self.heads(self.predicting(hidden), batch.prev_tokens)

    def predicting(self, hidden: torch.Tensor) -> torch.Tensor:
        """The hidden states [N, G, H] of the slots that predict, of a block's [N, S, H]: every
        slot when sampling from the anchor, else slots 1.. (slot 0, the anchor, is untrained)."""
        return hidden if self.cfg.samples_from_anchor else hidden[:, 1:]


class DSparkProposer:
    """Decode-time state of a DSpark / DFlash draft: per-layer keys/values of the injected target
    states of committed positions (the KV injection), one parallel backbone pass per block, then
    the sequential head left to right over the gamma slots, then the confidence head over all of
    them at once (each slot's previous token is known by then).

    The proposer contract (every registered architecture's proposer follows it): everything stays
    on the draft's device and has a fixed shape, so a step never reads the device:
    `commit(feats [n, m*H], tokens [n], start)` adds committed positions start..start+n-1 only
    (never rejected drafts); `propose(anchor [1], pos, temperature, generator)` returns
    (tokens [gamma], proposal distributions [gamma, V] when sampling else None, prefix survival
    [gamma] float64); `confidence_logits` holds the raw logits of the last proposal, or None.

    Static state (`static_state = True`): the context keys/values live in buffers of `capacity`
    positions written in place, attended to in full or up to a given `extent` (a key at or past
    the anchor's position is invisible by the attention rule), the proposal reads its inputs
    from `anchor_in` / `pos_in`, and sampling draws counter noise of (the request's seed, a draw
    counter on the device) rather than a torch.Generator's stream; so `step(temperature,
    extent)` has fixed shapes and addresses, and the decoder can capture it in a CUDA graph once
    per (temperature, extent) and replay it for every block of every request (`reset(seed)`
    between requests). A static-state proposer's `commit_rows`
    also takes `start` as a device tensor [R] and a whole verify block of which only positions up
    to `start + last` (a device tensor [R]) are kept: the decoder's fused step commits that way
    without reading the acceptance count, and `step_state()` lists what a step changes besides
    position-indexed buffers.

    Rows (`rows=R`): the state of R requests decoded at once (serving.batch_decoder), each at
    its own position, with its own seed; `commit_rows` / `step_rows` take and return a leading
    row dimension, and `commit` / `propose` / `step` are the one-row faces of the same code."""

    static_state = True

    def __init__(
        self, draft: DSparkDraft, gamma: int, sts: torch.Tensor, capacity: int, rows: int = 1
    ) -> None:
        self.draft, self.gamma, self.sts, self.capacity = draft, gamma, sts, capacity
        self.rows = rows
        self.device = draft.fc.weight.device
        cfg = draft.cfg
        # gamma slots (anchor + gamma masks when not sampling from the anchor: DFlash, or DSpark
        # with sample_from_anchor=false, whose SGLang query is gamma + 1 wide too), also when
        # gamma is below the trained block size: the block SGLang runs for
        # --speculative-dspark-block-size gamma (its attention spans only those slots), not the
        # trained block cut short afterwards
        self.slots = gamma if cfg.samples_from_anchor else gamma + 1
        self.ctx_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # on first commit
        self.ctx_index = TokenIndex.rows_context(rows, capacity, self.device)
        self.block_row = torch.arange(rows, device=self.device).repeat_interleave(self.slots)
        self.block_slot = torch.arange(self.slots, device=self.device).repeat(rows)
        z = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.anchor_in, self.pos_in, self.seed_in = z, z.clone(), z.clone()
        self.draws = z.clone()  # sampling counter
        self.confidence_logits: torch.Tensor | None = None  # raw logits [gamma], last proposal
        draft.check_vocab()  # a pruned draft's maps must be set before it proposes

    def reset(self, seed: int | torch.Tensor = 0) -> None:
        """A new request (or R of them: `seed` per row): stale keys sit at positions its anchors
        cannot see until overwritten; its draws are counter noise of `seed`."""
        self.confidence_logits = None
        self.seed_in.copy_(torch.as_tensor(seed).expand(self.rows))
        self.draws.zero_()

    def commit(
        self,
        feats: torch.Tensor,
        tokens: torch.Tensor,
        start: int | torch.Tensor,
        last: torch.Tensor | None = None,
    ) -> None:
        """Add positions start..start+n-1 (features [n, m*H]; tokens and `last` unused by DSpark:
        the keys of positions past the last kept one are invisible until overwritten)."""
        self.commit_rows(feats[None], tokens[None], start, last)

    def commit_rows(
        self,
        feats: torch.Tensor,
        tokens: torch.Tensor,
        start: int | torch.Tensor,
        last: torch.Tensor | None = None,
    ) -> None:
        """`commit` of every row: features [R, n, m*H] at positions start.. (an int, or [R])."""
        d = self.draft
        r, n = feats.shape[:2]
        pos = commit_positions(start, n, self.capacity, feats.device).expand(r, n)
        new = d.context_kv(d.hidden_norm(d.fuse_context(feats.flatten(0, 1))), pos.flatten())
        if self.ctx_kv is None:
            size = self.rows * self.capacity
            self.ctx_kv = [
                (k.new_zeros((size, *k.shape[1:])), v.new_zeros((size, *v.shape[1:])))
                for k, v in new
            ]
        flat = (pos + self.capacity * torch.arange(r, device=pos.device)[:, None]).flatten()
        for (k_buf, v_buf), (k, v) in zip(self.ctx_kv, new, strict=True):
            k_buf.index_copy_(0, flat, k)
            v_buf.index_copy_(0, flat, v)

    def step_state(self) -> list[torch.Tensor]:
        """What a decode step changes besides position-indexed buffers (a graph capture saves
        and restores it around its warm-up runs)."""
        return [self.draws]

    def _context(self, extent: int | None):
        """Every layer's context keys/values and their index, cut to each row's first `extent`
        positions (default all): the keys an anchor below `extent` may see are all there (only
        positions before it are visible)."""
        n = self.capacity if extent is None else extent

        def cut(t: torch.Tensor) -> torch.Tensor:
            return row_prefix(t, self.rows, self.capacity, n)

        kv = [(cut(k), cut(v)) for k, v in self.ctx_kv]
        return kv, TokenIndex(*(cut(f) for f in self.ctx_index.fields()))

    def propose(self, anchor: torch.Tensor, pos: int, temperature: float, generator=None):
        """`generator` is unused: draws are counter noise (see the class docstring)."""
        self.anchor_in.copy_(anchor)
        self.pos_in.fill_(pos)
        tokens, dists, survival, conf = self.step(temperature)
        self.confidence_logits = conf
        return tokens, dists, survival

    def step(self, temperature: float, extent: int | None = None):
        """(tokens, proposal distributions or None, survival, confidence logits or None) from
        anchor_in / pos_in: fixed shapes, no host read, nothing written but the draw counter
        (what the decoder captures in a graph). One row of `step_rows`."""
        return tuple(None if t is None else t[0] for t in self.step_rows(temperature, extent))

    def step_rows(self, temperature: float, extent: int | None = None):
        """`step` of every row: tokens [R, gamma], distributions [R, gamma, V] or None, survival
        [R, gamma], confidence logits [R, gamma] or None. `extent`: attend over context
        positions below it only (the anchor of every row still decoding must be below it; a
        finished row's output is not read; default the whole buffer). The decoders pass the
        target's cache-length bucket, so the draft's attention, like the target's, costs what
        the context needs rather than `capacity`."""
        d, cfg, r = self.draft, self.draft.cfg, self.rows
        anchor = self.anchor_in
        ids = torch.cat(
            (anchor[:, None], anchor.new_full((r, self.slots - 1), cfg.mask_token_id)), 1
        )
        row, slot = self.block_row, self.block_slot
        block = TokenIndex(seq=row, pos=self.pos_in[row] + slot, block=row, slot=slot)
        ctx_kv, ctx_index = self._context(extent)
        # one block per row: a dense mask per row, no per-sequence split and no host read
        hidden = d.predicting(d.backbone(ids, block, ctx_kv, ctx_index, backend="dense", rows=r))
        head = d.sequential_head
        state = head.init_state(r, hidden) if head is not None else None
        hidden = hidden[:, : self.gamma]
        tokens, dists = [], []
        prev = anchor
        # the LM head over every slot at once: its vocab x hidden weight (the largest read of a
        # proposal) is read once, not gamma times (only the Markov term needs the prefix). A
        # pruned draft scores its K output ids (its own head and Markov W2); each pick is
        # mapped to its target id before it feeds the next slot (Markov W1 and the confidence
        # head read target ids) or leaves the proposer
        head_logits = d.output_logits(hidden).float()
        # only the Markov term and the draw run slot after slot: every kernel in this loop is
        # launched gamma times per proposal, so what can run once over all slots does (the
        # target head above, the confidence head below)
        for k in range(self.gamma):
            logits = head_logits[:, k]
            if head is not None:
                z, state = head.step(state, prev, hidden[:, k])
                logits = logits + head.markov_w2(z).float()
            # draw k of this proposal: counter draws + k (greedy reads no counter)
            count = self.draws + k if temperature > 0 else self.draws
            picked, probs = pick_counted(logits, temperature, self.seed_in, count)
            prev = d.target_ids(picked[:, 0])
            tokens.append(prev)
            dists.append(probs)
        self.draws.add_(self.gamma)
        drafted = torch.stack(tokens, 1)
        if cfg.confidence_head:
            # every slot's previous token is known now: the confidence head over all slots at
            # once, as training applies it (DSparkDraft.heads), not once per slot in the loop
            prevs = torch.cat((anchor[:, None], drafted[:, :-1]), 1)
            prev_emb = head.prev_embedding(prevs) if head is not None else None
            confidence = d.confidence_head(hidden, prev_emb).double()
            survival = torch.cumprod(torch.sigmoid(confidence / self.sts[: self.gamma]), 1)
        else:
            confidence = None
            survival = torch.ones(r, self.gamma, dtype=torch.float64, device=anchor.device)
        # over target ids, zero outside a pruned set: rejection sampling stays exact
        proposals = d.target_probs(torch.stack(dists, 1)) if temperature > 0 else None
        return drafted, proposals, survival, confidence


# ----- export to SGLang 0.5.23 (`--speculative-algorithm DSPARK`) -----


def rope_fields(cfg: DraftConfig) -> dict:
    """How SGLang's draft attention (DFlashAttention) is told the RoPE we trained: it reads the
    base and an explicit `rope_dim` from `rope_parameters` (which transformers 5.19 and 5.24 both
    keep, while 5.24 moves a top-level `partial_rotary_factor` into that dict, where SGLang does
    not look for it) and the pairing from `is_neox_style`. NeoX pairs (i, i + rot/2) of the first
    rot dims as our full/partial variants do; interleaved pairs (2i, 2i+1) as ours does."""
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope == "partial":
        rope["rope_dim"] = int(cfg.head_dim * cfg.rotary_fraction)
    return {"rope_parameters": rope, "is_neox_style": cfg.rope != "interleaved"}


def sglang_config(cfg: DraftConfig, target: TargetSpec) -> dict:
    """config.json for SGLang's Qwen3DSparkModel / LingDSparkModel; ValueError naming the field
    for a configuration SGLang's DSpark draft classes cannot serve."""
    if cfg.attention != "qwen3":
        raise ValueError(
            f"attention={cfg.attention}: SGLang's DSpark drafts are Qwen3-shaped (GQA + q/k norm); "
            "MLA drafts have no serving class"
        )
    if cfg.rope == "none":
        raise ValueError("rope=none: SGLang's draft attention always applies rotary embeddings")
    if min(cfg.target_layer_ids) < 0:
        raise ValueError(
            f"target_layer_ids={cfg.target_layer_ids}: -1 (the embedding output) cannot be "
            "served; SGLang 0.5.23 captures decoder-layer outputs only and rejects negative ids"
        )
    if cfg.sequential_head == "none":
        raise ValueError("sequential_head=none: SGLang's DSpark requires markov_rank > 0")
    if not cfg.confidence_head:
        raise ValueError(
            "confidence_head=false: SGLang builds the confidence head unless ragged verify is "
            "static, and then needs its weights"
        )
    arch = family(target.model_type).dspark_class  # LingDSparkModel for Ling targets
    layer_type = "sliding_attention" if cfg.sliding_window else "full_attention"
    out = {
        "architectures": [arch],
        "model_type": "qwen3",
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "attention_bias": False,
        "vocab_size": target.vocab_size,
        "max_position_embeddings": 262144,
        **rope_fields(cfg),
        "num_hidden_layers": cfg.num_layers,
        "layer_types": [layer_type] * cfg.num_layers,
        "tie_word_embeddings": False,
        "num_target_layers": target.num_layers,
        "block_size": cfg.block_size,
        "target_layer_ids": list(cfg.target_layer_ids),
        "mask_token_id": cfg.mask_token_id,
        "markov_rank": cfg.markov_rank,
        "markov_head_type": SEQUENTIAL_HEAD_CLASSES[cfg.sequential_head].sglang_type,
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        # SGLang's gamma is block_size either way; false adds the anchor slot and drops its row
        "sample_from_anchor": cfg.samples_from_anchor,
        "splitserve_draft_config": {k: v for k, v in asdict(cfg).items() if k != "loss"},
    }
    if cfg.sliding_window:
        out["sliding_window"] = cfg.sliding_window
    if cfg.pruned_vocab:  # the hf and speculators layouts carry it (serving.export refuses sglang)
        out["draft_vocab_size"] = cfg.draft_vocab_size
    return out


register_arch(
    DraftArch(
        name="dspark",
        model=DSparkDraft,
        proposer=DSparkProposer,
        loss=draft_loss,
        samples_from_anchor=True,
        any_slot_convention=True,
        export=sglang_config,
        pruned_vocab=True,
    )
)
