"""EAGLE-3, the autoregressive chain baseline: one decoder layer over [embed(x_t) ; g_{t-1}],
trained over gamma chain steps per anchor (training-time test); its decode-time proposer. SGLang's
DSPARK algorithm does not serve it."""

from __future__ import annotations

import torch
from torch import nn

from ..config import DraftConfig, bad_value
from ..heads import FrozenTargetHead
from ..layers import MLP, Qwen3Attention
from ..losses import draft_loss
from ..models import DraftModel, DraftOutput, init_weights
from ..packed_attention import AttentionPlan, TokenIndex
from ..packing import PackedBatch
from ..registry import DraftArch, register_arch
from ..sampling import pick
from .dflash import check as no_heads


class Eagle3Draft(DraftModel):
    """EAGLE-3 chain baseline: one decoder layer over [embed(x_t) ; g_{t-1}], where g is the
    fused target feature in the context and, after the first chain step, the draft's own previous
    output (training-time test). Trained over gamma chain steps per anchor; the context keys are
    what the draft's KV cache holds after prefill with target features."""

    def __init__(self, cfg: DraftConfig, target_head: FrozenTargetHead) -> None:
        super().__init__(cfg, target_head)
        h = cfg.hidden_size
        self.input_layernorm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg, in_features=2 * h)
        self.post_attention_layernorm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.mlp = MLP(h, cfg.intermediate_size)
        self.norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
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
        plan = AttentionPlan(
            q_index,
            k_index.cat(q_index),
            window=self.cfg.sliding_window,
            block_causal=True,
            backend=backend,
        )
        o = plan(self.self_attn.q(x, q_index.pos), keys, values, self.self_attn.scale)
        g = feature + self.self_attn.out(o, x)
        g = g + self.mlp(self.post_attention_layernorm(g))
        return g, self.norm(g), keys, values

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
    autoregressive chain steps that feed each step's output feature into the next."""

    def __init__(self, draft: Eagle3Draft, gamma: int, sts: torch.Tensor | None = None) -> None:
        self.draft, self.gamma = draft, gamma  # no confidence head: STS temperatures do not apply
        self.keys = self.values = None
        self.last_feature: torch.Tensor | None = (
            None  # fused target feature of the last committed position
        )
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
        keys, values, k_index = self.keys, self.values, TokenIndex.context(self.length, device)
        feature, token = self.last_feature, anchor
        tokens, dists = [], []
        for k in range(self.gamma):
            q_index = TokenIndex.single_block(pos, 1, device, first_slot=k)
            feature, h, keys, values = d.step(
                token, feature, q_index, keys, values, k_index, backend="dense"
            )
            k_index = k_index.cat(q_index)
            token, probs = pick(d.target_head.logits(h)[0].float(), temperature, generator)
            tokens.append(token)
            dists.append(probs)
        survival = torch.ones(self.gamma, dtype=torch.float64, device=device)
        return torch.cat(tokens), (torch.stack(dists) if temperature > 0 else None), survival


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
