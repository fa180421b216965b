"""EAGLE-3, the autoregressive chain baseline: one decoder layer over [embed(x_t) ; g_{t-1}],
trained over gamma chain steps per anchor (training-time test); its decode-time proposer. SGLang's
DSPARK algorithm does not serve it."""

from __future__ import annotations

import torch

from ..config import DraftConfig, bad_value
from ..heads import FrozenTargetHead
from ..layers import MLP, Qwen3Attention, RMSNorm
from ..losses import draft_loss
from ..models import DraftModel, DraftOutput, commit_positions, init_weights, row_prefix
from ..packed_attention import AttentionPlan, TokenIndex
from ..packing import PackedBatch
from ..registry import DraftArch, register_arch
from ..sampling import pick_counted
from .dflash import check as no_heads


class Eagle3Draft(DraftModel):
    """EAGLE-3 chain baseline: one decoder layer over [embed(x_t) ; g_{t-1}], where g is the
    fused target feature in the context and, after the first chain step, the draft's own previous
    output (training-time test). Trained over gamma chain steps per anchor; the context keys are
    what the draft's KV cache holds after prefill with target features."""

    def __init__(self, cfg: DraftConfig, target_head: FrozenTargetHead) -> None:
        super().__init__(cfg, target_head)
        h = cfg.hidden_size
        self.input_layernorm = RMSNorm(h, eps=cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, eps=cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg, in_features=2 * h)
        self.post_attention_layernorm = RMSNorm(h, eps=cfg.rms_norm_eps)
        self.mlp = MLP(h, cfg.intermediate_size)
        self.norm = RMSNorm(h, eps=cfg.rms_norm_eps)
        init_weights(self)

    def _layer_input(self, token_ids: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        emb = self.target_head.embed(token_ids).to(feature.dtype)
        return torch.cat((self.input_layernorm(emb), self.hidden_norm(feature)), dim=-1)

    def context_kv(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.fuse_context(batch.ctx_features)
        g_prev = torch.cat((g.new_zeros(1, g.shape[1]), g[:-1]))
        # no feature before position 0
        g_prev = g_prev * (batch.ctx_index.pos > 0).to(g.dtype)[:, None]
        return self.self_attn.kv(
            self._layer_input(batch.ctx_input_ids, g_prev), batch.ctx_index.pos
        )

    def step(self, token_ids, feature, q_index, keys, values, k_index, backend="auto"):
        """One chain step for N blocks: returns (pre-norm output g, normed hidden, k, v)."""
        x = self._layer_input(token_ids, feature)
        k, v = self.self_attn.kv(x, q_index.pos)
        keys, values = torch.cat((keys, k)), torch.cat((values, v))
        g = self.attend(x, feature, q_index, keys, values, k_index.cat(q_index), backend)
        return g, self.norm(g), keys, values

    def attend(self, x, feature, q_index, keys, values, k_index, backend="auto", rows=None):
        """A chain step's output feature g from its layer input x, over keys/values at k_index
        (the chain rule: committed context before the anchor, and the block's own slots up to
        the query's). `rows` (decoding): one query per request, over R equal runs of keys."""
        plan = AttentionPlan(
            q_index,
            k_index,
            window=self.cfg.sliding_window,
            block_causal=True,
            backend=backend,
            rows=None if rows is None else (rows, len(k_index) // rows),
        )
        o = plan(self.self_attn.q(x, q_index.pos), keys, values, self.self_attn.scale)
        g = feature + self.self_attn.out(o, x)
        return g + self.mlp(self.post_attention_layernorm(g))

    def forward(self, batch: PackedBatch, backend: str = "auto") -> DraftOutput:
        keys, values = self.context_kv(batch)
        k_index = batch.ctx_index
        feature = self.fuse_context(batch.ctx_features[batch.anchor_ctx_row])
        n = batch.num_blocks
        blocks = torch.arange(n, device=feature.device)
        hidden = []
        for k in range(batch.prev_tokens.shape[1]):
            q_index = TokenIndex(
                seq=batch.block_seq,
                pos=batch.block_anchor + k,
                block=blocks,
                slot=torch.full_like(blocks, k),
            )
            feature, h, keys, values = self.step(
                batch.prev_tokens[:, k], feature, q_index, keys, values, k_index, backend
            )
            k_index = k_index.cat(q_index)
            hidden.append(h)
        return DraftOutput(hidden=torch.stack(hidden, dim=1))


class Eagle3Proposer:
    """EAGLE-3 chain: the draft layer's own KV cache over committed positions (position t's key
    reads token x_t and the fused target feature of t-1, exactly as in training), then gamma
    autoregressive chain steps that feed each step's output feature into the next.

    Static state, as DSparkProposer's (same contract): keys and values live in buffers of
    `capacity + gamma` positions; chain step k writes its key at position pos + k in place and
    attends over the buffer (or its first `extent + gamma` positions) under the chain rule, so
    entries past the query's slot (stale chain keys, an earlier request's keys) are invisible,
    and a later commit overwrites the chain keys of the positions it keeps. Sampling draws
    counter noise as DSparkProposer's does, and `rows=R` holds R requests at once as
    DSparkProposer's rows do. `step(temperature, extent)` therefore has fixed shapes and
    addresses: the decoder captures it in a CUDA graph per (temperature, extent) and replays it
    for every block of every request."""

    static_state = True

    def __init__(
        self,
        draft: Eagle3Draft,
        gamma: int,
        sts: torch.Tensor | None,
        capacity: int,
        rows: int = 1,
    ) -> None:
        self.draft, self.gamma, self.capacity = draft, gamma, capacity  # no confidence head:
        # STS temperatures do not apply
        self.rows = rows
        attn, p = draft.self_attn, draft.norm.weight
        self.size = size = capacity + gamma  # a block's chain at the last position writes past it
        self.keys = p.new_zeros(rows * size, attn.num_kv_heads, attn.head_dim)
        self.values = p.new_zeros(rows * size, attn.num_kv_heads, attn.head_dim)
        self.index = torch.arange(size, device=p.device)
        self.row = torch.arange(rows, device=p.device)
        # fused target feature of each row's last committed position (zero before position 0)
        self.last_feature = p.new_zeros(rows, draft.cfg.hidden_size)
        z = torch.zeros(rows, dtype=torch.long, device=p.device)
        self.anchor_in, self.pos_in, self.seed_in = z, z.clone(), z.clone()
        self.draws = z.clone()  # sampling counter
        self.confidence_logits = None  # EAGLE-3 has no confidence head

    def reset(self, seed: int | torch.Tensor = 0) -> None:
        """A new request (or R of them: `seed` per row): stale keys sit past its positions until
        overwritten; its draws are counter noise of `seed`."""
        self.last_feature.zero_()
        self.seed_in.copy_(torch.as_tensor(seed).expand(self.rows))
        self.draws.zero_()

    def commit(
        self,
        feats: torch.Tensor,
        tokens: torch.Tensor,
        start: int | torch.Tensor,
        last: torch.Tensor | None = None,
    ) -> None:
        """Positions start..start+n-1; the next chain starts from the feature of position
        start + last (default the last one: `last` is a device 0-d tensor when the fused step
        commits a whole verify block; the keys past it are invisible until overwritten)."""
        self.commit_rows(feats[None], tokens[None], start, None if last is None else last.view(1))

    def commit_rows(
        self,
        feats: torch.Tensor,
        tokens: torch.Tensor,
        start: int | torch.Tensor,
        last: torch.Tensor | None = None,
    ) -> None:
        """`commit` of every row: features [R, n, m*H], tokens [R, n] at positions start.. (an
        int, or [R]); `last` [R]."""
        d = self.draft
        r, n = feats.shape[:2]
        pos = commit_positions(start, n, self.capacity, feats.device).expand(r, n)
        g = d.fuse_context(feats.flatten(0, 1)).view(r, n, -1)
        g_prev = torch.cat((self.last_feature[:, None], g[:, :-1]), 1)
        x = d._layer_input(tokens.flatten(), g_prev.flatten(0, 1))
        k, v = d.self_attn.kv(x, pos.flatten())
        flat = (pos + self.size * self.row[:r, None]).flatten()
        self.keys.index_copy_(0, flat, k)
        self.values.index_copy_(0, flat, v)
        at = torch.full((r,), n - 1, device=g.device) if last is None else last
        kept = g.gather(1, at.view(r, 1, 1).expand(r, 1, g.shape[2]))[:, 0]
        self.last_feature.copy_(kept)  # in place: a graphed proposal reads this buffer

    def step_state(self) -> list[torch.Tensor]:
        """What a decode step changes besides position-indexed buffers (see DSparkProposer)."""
        return [self.draws, self.last_feature]

    def propose(self, anchor: torch.Tensor, pos: int, temperature: float, generator=None):
        """`generator` is unused: draws are counter noise (see the class docstring)."""
        self.anchor_in.copy_(anchor)
        self.pos_in.fill_(pos)
        tokens, dists, survival, _ = self.step(temperature)
        return tokens, dists, survival

    def step(self, temperature: float, extent: int | None = None):
        """(tokens, proposal distributions or None, survival, None) from anchor_in / pos_in:
        fixed shapes, no host read; writes only chain keys past the committed positions and the
        draw counter (what the decoder captures in a graph). One row of `step_rows`."""
        return tuple(None if t is None else t[0] for t in self.step_rows(temperature, extent))

    def step_rows(self, temperature: float, extent: int | None = None):
        """`step` of every row: tokens [R, gamma], distributions [R, gamma, V] or None,
        survival [R, gamma], None. `extent`: as DSparkProposer's (context positions below it;
        the chain's own gamma keys after them are kept too)."""
        d, pos, r, row = self.draft, self.pos_in, self.rows, self.row
        n = self.size if extent is None else min(extent + self.gamma, self.size)
        index = self.index[:n]
        rel = index[None] - pos[:, None]  # >= 0: this block's chain slots; < 0: context
        chain = rel >= 0
        rows = row[:, None].expand(r, n)
        k_index = TokenIndex(
            seq=rows.flatten(),
            pos=index.repeat(r),
            block=torch.where(chain, rows, -1).flatten(),
            slot=torch.where(chain, rel, -1).flatten(),
        )
        feature, token = self.last_feature, self.anchor_in
        tokens, dists = [], []
        for k in range(self.gamma):
            q_index = TokenIndex(seq=row, pos=pos + k, block=row, slot=torch.full_like(row, k))
            x = d._layer_input(token, feature)
            key, value = d.self_attn.kv(x, q_index.pos)
            flat = q_index.pos + self.size * row
            self.keys.index_copy_(0, flat, key)
            self.values.index_copy_(0, flat, value)
            feature = d.attend(
                x,
                feature,
                q_index,
                row_prefix(self.keys, r, self.size, n),
                row_prefix(self.values, r, self.size, n),
                k_index,
                "dense",
                rows=r,
            )
            logits = d.target_head.logits(d.norm(feature)).float()
            picked, probs = pick_counted(logits, temperature, self.seed_in, self.draws)
            token = picked[:, 0]
            self.draws.add_(1)
            tokens.append(token)
            dists.append(probs)
        survival = torch.ones(r, self.gamma, dtype=torch.float64, device=pos.device)
        dists = torch.stack(dists, 1) if temperature > 0 else None
        return torch.stack(tokens, 1), dists, survival, None


def check(cfg: DraftConfig) -> None:
    no_heads(cfg)
    if cfg.num_layers != 1:
        raise bad_value("num_layers", cfg.num_layers, "1 for arch=eagle3 (a single-layer chain)")
    if cfg.attention != "qwen3":
        raise bad_value("attention", cfg.attention, "qwen3 for arch=eagle3")


DEFAULTS = {
    "num_layers": 1,
    "num_target_layer_ids": 3,
    "sequential_head": "none",
    "confidence_head": False,
    "loss": {
        "ce_weight": 0.0,
        "distill_weight": 1.0,
        "divergence": "forward_kl",
        "confidence_weight": 0.0,
    },
}

register_arch(
    DraftArch(
        name="eagle3",
        model=Eagle3Draft,
        proposer=Eagle3Proposer,
        loss=draft_loss,
        defaults=DEFAULTS,
        samples_from_anchor=False,
        check=check,
        not_servable="SGLang's DSPARK algorithm serves DSpark drafts only "
        "(serve EAGLE-3 drafts with its EAGLE3 algorithm)",
    )
)
