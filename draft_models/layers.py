"""Draft transformer pieces: the two attention structures, the MLP and the decoder layer.

Parameter names follow SGLang's DFlash/DSpark draft loader (`layers.N.self_attn.q_proj`, ...),
so export is a plain state_dict with no renaming. Every attention exposes the same three steps
because context keys/values are computed from *injected* target states, not from the layer input:
`kv(x, pos)` -> keys/values, `q(x, pos)` -> queries, `out(attn, x)` -> projected output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import DraftConfig
from .packed_attention import AttentionPlan, TokenIndex
from .rope import Rotary


def activation_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype activations run in beside `weight`: autocast's where it is on for the weight's
    device (train.precision=amp: fp32 weights, bf16 compute), else the weight's own."""
    device = weight.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm whose weight meets its input in one dtype: under amp the weight is fp32 and
    the input bf16, a pair torch's fused kernel refuses (a slower composite). Where autocast runs
    rms_norm itself (CUDA lists it among the fp32 ops) the weight is left as it is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = torch.is_autocast_enabled(x.device.type)
        weight = self.weight if autocast and x.is_cuda else self.weight.to(x.dtype)
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)


class Qwen3Attention(nn.Module):
    """GQA with per-head RMSNorm on q and k (the structure SGLang's DSpark drafts serve)."""

    def __init__(self, cfg: DraftConfig, in_features: int | None = None) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        in_features = in_features or h
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            d,
        )
        self.q_proj = nn.Linear(in_features, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(in_features, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(in_features, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, eps=cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, eps=cfg.rms_norm_eps)
        self.rotary = Rotary.for_variant(cfg.rope, d, cfg.partial_rotary_factor, cfg.rope_theta)
        self.scale = d**-0.5

    def q(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = self.q_proj(x).view(-1, self.num_heads, self.head_dim)
        return self.rotary(self.q_norm(q), pos)

    def kv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.k_proj(x).view(-1, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(-1, self.num_kv_heads, self.head_dim)
        return self.rotary(self.k_norm(k), pos), v

    def out(self, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(attn.flatten(1))


class Ling3MLAAttention(nn.Module):
    """Ling-3's MLA: low-rank joint KV, a decoupled RoPE key shared by all heads, and a
    head-wise sigmoid gate on the attention output. Not servable by SGLang's DSpark drafts."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.nope, self.rope_dim, self.v_dim = (
            cfg.qk_nope_head_dim,
            cfg.qk_rope_head_dim,
            cfg.v_head_dim,
        )
        self.kv_lora_rank = cfg.kv_lora_rank
        self.q_proj = nn.Linear(h, self.num_heads * (self.nope + self.rope_dim), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, eps=cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(
            self.kv_lora_rank, self.num_heads * (self.nope + self.v_dim), bias=False
        )
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, h, bias=False)
        self.g_proj = nn.Linear(h, self.num_heads, bias=False)
        self.rotary = Rotary.for_variant(
            cfg.rope, self.rope_dim, cfg.partial_rotary_factor, cfg.rope_theta
        )
        self.scale = (self.nope + self.rope_dim) ** -0.5

    def q(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = self.q_proj(x).view(-1, self.num_heads, self.nope + self.rope_dim)
        q_nope, q_rot = q.split((self.nope, self.rope_dim), dim=-1)
        return torch.cat((q_nope, self.rotary(q_rot, pos)), dim=-1)

    def kv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent, k_rot = self.kv_a_proj_with_mqa(x).split((self.kv_lora_rank, self.rope_dim), dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(
            -1, self.num_heads, self.nope + self.v_dim
        )
        k_nope, v = kv.split((self.nope, self.v_dim), dim=-1)
        k_rot = self.rotary(k_rot[:, None, :], pos).expand(-1, self.num_heads, -1)
        return torch.cat((k_nope, k_rot), dim=-1), v

    def out(self, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.g_proj(x)).unsqueeze(-1)
        return self.o_proj((attn * gate).flatten(1))


def build_attention(cfg: DraftConfig) -> nn.Module:
    return Ling3MLAAttention(cfg) if cfg.attention == "ling3_mla" else Qwen3Attention(cfg)


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class InjectedDecoderLayer(nn.Module):
    """Pre-norm decoder layer whose attention keys are [context K/V ; block K/V]."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = build_attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(
        self,
        x: torch.Tensor,
        x_index: TokenIndex,
        ctx_k: torch.Tensor,
        ctx_v: torch.Tensor,
        plan: AttentionPlan,
    ) -> torch.Tensor:
        """`ctx_k`/`ctx_v`: this layer's keys/values of the injected context (`attn.kv` of the fused
        target states; cached across decode steps). `plan` covers queries `x_index` against the
        context keys followed by `x_index`."""
        normed, q, blk_k, blk_v = self.enter(x, x_index.pos)
        o = plan(q, torch.cat((ctx_k, blk_k)), torch.cat((ctx_v, blk_v)), self.self_attn.scale)
        return self.leave(x, o, normed)

    def context_kv(self, states: torch.Tensor, pos: torch.Tensor):
        """Keys and values of the injected context (its norm and rotary: a region of its own)."""
        return self.self_attn.kv(states, pos)

    def enter(self, x: torch.Tensor, pos: torch.Tensor):
        """Everything before attention: the norm, the block's queries, keys and values."""
        attn = self.self_attn
        normed = self.input_layernorm(x)
        k, v = attn.kv(normed, pos)
        return normed, attn.q(normed, pos), k, v

    def leave(self, x: torch.Tensor, o: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        """Everything after attention: the output projection, the MLP and both residuals."""
        x = x + self.self_attn.out(o, normed)
        return x + self.mlp(self.post_attention_layernorm(x))

    def compile_regions(self) -> None:
        """torch.compile the regions around attention (train.compile_layers): the context's
        keys and values, and before and after the block's attention; their norms, rotary,
        gating and residual adds fuse forward and backward; attention (flex, compiled on its
        own) stays between them. Sizes vary per packed batch: compiled dynamic once, the graphs
        are shared by every layer of this class. The compiled regions are bound to this layer:
        copy or pickle the weights (state_dict), not a compiled layer."""
        for region in ("context_kv", "enter", "leave"):
            setattr(self, region, torch.compile(getattr(self, region), dynamic=True))
