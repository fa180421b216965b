"""The draft architectures: DSpark, its DFlash parallel baseline, and the EAGLE-3 chain baseline.

All three consume a `PackedBatch` and return a `DraftOutput` of final normed hidden states per
block prediction; the frozen target LM head is applied later, in the chunked loss (training) or by
the decoder (serving). Pure PyTorch so every path runs on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .config import DraftConfig, TargetSpec
from .heads import SEQUENTIAL_HEAD_CLASSES, ConfidenceHead, FrozenTargetHead
from .layers import InjectedDecoderLayer, MLP, Qwen3Attention
from .packed_attention import AttentionPlan, TokenIndex
from .packing import PackedBatch


@dataclass
class DraftOutput:
    hidden: torch.Tensor  # [N, G, H] final normed hidden of each block prediction
    seq_latent: Optional[torch.Tensor] = None  # [N, G, r] sequential-head latent (bias = W2 z)
    confidence_logit: Optional[torch.Tensor] = None  # [N, G] raw confidence logits


def _init_weights(module: nn.Module, std: float = 0.02) -> None:
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
            raise ValueError("DraftConfig must be resolved against the target first (cfg.resolve(target))")
        if target_head.hidden_size != cfg.hidden_size:
            raise ValueError(
                f"draft.hidden_size={cfg.hidden_size} does not match the target LM head width "
                f"{target_head.hidden_size}"
            )
        self.cfg = cfg
        self.target_head = target_head  # plain object: registers no parameter (see FrozenTargetHead)
        self.num_context_features = len(cfg.target_layer_ids)
        self.fc = nn.Linear(self.num_context_features * cfg.hidden_size, cfg.hidden_size, bias=False)

    def fuse_context(self, features: torch.Tensor) -> torch.Tensor:
        expected = self.fc.in_features
        if features.dim() != 2 or features.shape[-1] != expected:
            raise ValueError(
                f"injected target states have shape {tuple(features.shape)}, expected [tokens, {expected}] = "
                f"len(target_layer_ids)={self.num_context_features} x hidden_size={self.cfg.hidden_size}; "
                "the target is capturing different layers or has a different hidden size than this draft"
            )
        return self.fc(features.to(self.fc.weight.dtype))

    @property
    def sequential_head(self) -> Optional[nn.Module]:
        return getattr(self, "markov_head", None)

    def trainable_parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class DSparkDraft(DraftModel):
    """DFlash backbone + KV injection + sequential head + confidence head.

    arch=dflash uses the same backbone with anchor + gamma mask slots, predicts from the mask slots,
    and has neither sequential nor confidence head.
    """

    def __init__(self, cfg: DraftConfig, target_head: FrozenTargetHead) -> None:
        super().__init__(cfg, target_head)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList(InjectedDecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        if cfg.sequential_head != "none":
            self.markov_head = SEQUENTIAL_HEAD_CLASSES[cfg.sequential_head](
                target_head.vocab_size, cfg.markov_rank, cfg.hidden_size
            )
        if cfg.confidence_head:
            rank = cfg.markov_rank if cfg.sequential_head != "none" else 0
            self.confidence_head = ConfidenceHead(cfg.hidden_size, rank)
        _init_weights(self)
        if cfg.sequential_head != "none":
            nn.init.zeros_(self.markov_head.markov_w2.weight)  # start as plain DFlash logits

    def context_states(self, batch: PackedBatch) -> torch.Tensor:
        return self.hidden_norm(self.fuse_context(batch.ctx_features))

    def context_kv(self, ctx_states: torch.Tensor, ctx_pos: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's keys/values of the injected context (what a decoder caches)."""
        return [layer.self_attn.kv(ctx_states, ctx_pos) for layer in self.layers]

    def backbone(self, block_ids: torch.Tensor, block_index: TokenIndex, ctx_kv: list, ctx_index: TokenIndex,
                 backend: str = "auto") -> torch.Tensor:
        """Block token ids [N, S] -> final normed hidden [N, S, H]."""
        n, s = block_ids.shape
        x = self.target_head.embed(block_ids.reshape(-1)).to(self.fc.weight.dtype)
        plan = AttentionPlan(block_index, ctx_index.cat(block_index), window=self.cfg.sliding_window, backend=backend)
        for layer, (k, v) in zip(self.layers, ctx_kv):
            x = layer(x, block_index, k, v, plan)
        return self.norm(x).view(n, s, -1)

    def heads(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> DraftOutput:
        """Apply the sequential and confidence heads with the given previous tokens [N, G]."""
        head = self.sequential_head
        latent = head.latents(prev_tokens, hidden) if head is not None else None
        conf = None
        if self.cfg.confidence_head:
            prev_emb = head.prev_embedding(prev_tokens) if head is not None else None
            conf = self.confidence_head(hidden, prev_emb)
        return DraftOutput(hidden=hidden, seq_latent=latent, confidence_logit=conf)

    def forward(self, batch: PackedBatch, backend: str = "auto") -> DraftOutput:
        ctx_kv = self.context_kv(self.context_states(batch), batch.ctx_index.pos)
        hidden = self.backbone(batch.block_input_ids, batch.block_index(), ctx_kv, batch.ctx_index, backend)
        if not self.cfg.samples_from_anchor:
            hidden = hidden[:, 1:]
        return self.heads(hidden, batch.prev_tokens)


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
        _init_weights(self)

    def _layer_input(self, token_ids: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        emb = self.target_head.embed(token_ids).to(feature.dtype)
        return torch.cat((self.input_layernorm(emb), self.hidden_norm(feature)), dim=-1)

    def context_kv(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.fuse_context(batch.ctx_features)
        g_prev = torch.cat((g.new_zeros(1, g.shape[1]), g[:-1]))
        g_prev = g_prev * (batch.ctx_index.pos > 0).to(g.dtype)[:, None]  # no feature before position 0
        return self.self_attn.kv(self._layer_input(batch.ctx_input_ids, g_prev), batch.ctx_index.pos)

    def step(self, token_ids, feature, q_index, keys, values, k_index, backend="auto"):
        """One chain step for N blocks: returns (pre-norm output g, normed hidden, k, v)."""
        x = self._layer_input(token_ids, feature)
        k, v = self.self_attn.kv(x, q_index.pos)
        keys, values = torch.cat((keys, k)), torch.cat((values, v))
        plan = AttentionPlan(q_index, k_index.cat(q_index), window=self.cfg.sliding_window, block_causal=True,
                             backend=backend)
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
                seq=batch.block_seq, pos=batch.block_anchor + k, block=blocks, slot=torch.full_like(blocks, k)
            )
            feature, h, keys, values = self.step(
                batch.prev_tokens[:, k], feature, q_index, keys, values, k_index, backend
            )
            k_index = k_index.cat(q_index)
            hidden.append(h)
        return DraftOutput(hidden=torch.stack(hidden, dim=1))


def build_draft(cfg: DraftConfig, target: TargetSpec, target_head: FrozenTargetHead) -> DraftModel:
    """Resolve `cfg` against the target and build the draft it describes."""
    resolved = cfg.resolve(target)
    if target_head.vocab_size != target.vocab_size:
        raise ValueError(
            f"target LM head has {target_head.vocab_size} rows but the target config says vocab_size={target.vocab_size}"
        )
    cls = Eagle3Draft if resolved.arch == "eagle3" else DSparkDraft
    return cls(resolved, target_head)
