"""A Llama-family target with a static KV cache, written for CUDA-graph capture.

Why our own forward rather than transformers' with a StaticCache: a graph replays fixed shapes
and fixed memory, so every step must (a) write its keys and values at per-row positions given as
device tensors (transformers' StaticCache writes one position range shared by every row, which
rules out rows at different lengths, i.e. continuous batching), (b) return the draft's target
layers and the final normed state as tensors of the step itself (no forward hooks, no Python on
replay) and (c) never read the device. The weights are the HF model's own tensors (shared, not
copied), and the rotary embedding is the HF model's module, so the RoPE types with frequencies
fixed at load (STATIC_ROPE) follow it; the others are refused.

Shapes: a step takes token ids [B, W] at positions [B, W] for cache rows row0..row0+B-1 and
returns (logits [B, W, V], features [B, W, m*H] of the capture ids, final normed [B, W, H]).
Each query sees the cache at key positions <= its own position in its row: keys written at
positions past a row's committed length (rejected drafts) are overwritten before any query can
see them, so rolling back a row is only moving its length back, never touching the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from draft_models.families import family, static_types

# RoPE types whose frequencies are fixed at load: "dynamic" and "longrope" rescale them from the
# largest position in a batch (a host read, and one row's frequencies would depend on the others)
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def unsupported_reason(config) -> str | None:
    """Why StaticLlama cannot run this config exactly ("runs ...; this one ...: the reason its
    family gives, draft_models.families"), or None. StaticLlama runs the families marked
    `static_runtime`: pre-norm decoders with q/k/v/o, NeoX RoPE, a gated MLP, no sliding window."""
    fam = family(config.model_type)
    if not fam.static_runtime:
        return (
            f"runs {', '.join(static_types())} targets without linear-attention layers; this one "
            f"is {config.model_type}: {fam.refusal}"
        )
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in STATIC_ROPE:
        return (
            f"runs RoPE types {', '.join(STATIC_ROPE)}; this target's rope_type {rope!r} "
            "rescales its frequencies per batch"
        )
    return None


class StaticLlama(nn.Module):
    def __init__(
        self,
        hf_model: nn.Module,
        *,
        max_rows: int,
        max_len: int,
        capture_ids: list[int],
        with_final: bool = True,
    ) -> None:
        super().__init__()
        cfg = hf_model.config
        why = unsupported_reason(cfg)
        if why is not None:
            raise ValueError(f"the static runtime {why} (use the eager path)")
        inner = hf_model.model
        self.num_layers = cfg.num_hidden_layers
        bad = [i for i in capture_ids if not -1 <= i < self.num_layers]
        if bad:
            raise ValueError(f"capture ids {bad} outside [-1, {self.num_layers - 1}]")
        self.capture_ids = list(capture_ids)
        self.with_final = with_final
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.max_rows, self.max_len = max_rows, max_len
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.final_norm = inner.norm.weight
        self.lm_head = hf_model.get_output_embeddings().weight
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                {
                    "qkv": torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)),
                    "qkv_bias": (
                        torch.cat((a.q_proj.bias, a.k_proj.bias, a.v_proj.bias))
                        if a.q_proj.bias is not None
                        else None
                    ),
                    "o": a.o_proj.weight,
                    "o_bias": a.o_proj.bias,  # attention_bias=True biases o_proj too
                    "gate_up": torch.cat((m.gate_proj.weight, m.up_proj.weight)),
                    "gate_up_bias": (  # mlp_bias=True
                        torch.cat((m.gate_proj.bias, m.up_proj.bias))
                        if m.gate_proj.bias is not None
                        else None
                    ),
                    "down": m.down_proj.weight,
                    "down_bias": m.down_proj.bias,
                    "norm_in": layer.input_layernorm.weight,
                    "norm_post": layer.post_attention_layernorm.weight,
                }
            )
        dtype, device = self.embed.dtype, self.embed.device
        # one tensor per layer, written in place by index_put_ on the tensor itself: under
        # torch.compile a write into a view of one stacked [layers, ...] buffer was
        # functionalized into copies of each layer's cache and a rewrite of the whole buffer
        # every step (measured on one H200)
        shape = (max_rows, self.kv_heads, max_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.register_buffer("key_pos", torch.arange(max_len, device=device), persistent=False)

    @property
    def feature_width(self) -> int:
        return len(self.capture_ids) * self.embed.shape[1]

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        row0: int = 0,
        *,
        rows: torch.Tensor | None = None,
        logits_at: torch.Tensor | None = None,
        extent: int | None = None,
        fresh: bool = False,
    ):
        """One step over ids [B, W] at positions [B, W] for cache rows row0..row0+B-1, or for
        the cache rows in `rows` [B] (any rows: a batched prefill of the slots being refilled).
        `logits_at` [B]: the logits of that position of each row only ([B, 1, V]), as a prefill
        needs; default every position. `extent`: attend over cache positions [0, extent) only
        (every position in `pos` must be below it); a step's attention then costs what its
        context needs, not the whole cache (the static engine graphs one step per extent
        bucket). Default: the whole cache. `fresh`: every row starts at position 0 here (a
        prefill of new rows, right-padded; `pos` must be arange(W) in each row): attention is
        causal over this call's own keys, which the cache then holds: no mask over the cache and
        no gather of its rows (a group of 32 x 1,024 tokens: 40 against 59 ms on one H200,
        docs/results/runtime_h200). The same results as the masked path, up to rounding."""
        b, w = ids.shape
        span = slice(row0, row0 + b)
        extent = self.max_len if extent is None else extent
        x = F.embedding(ids, self.embed)
        captured = {-1: x} if -1 in self.capture_ids else {}
        cos, sin = self.rotary(x, pos)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # [B, W, 1, D]
        bias = None if fresh else self._bias(pos, extent, x.dtype)
        batch = torch.arange(b, device=ids.device)[:, None]
        # the cache rows written: row0.. (a slice when read), or the scattered `rows`
        cache_rows = batch + row0 if rows is None else rows[:, None]
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        for i, p in enumerate(self.layers):
            h = F.rms_norm(x, (x.shape[-1],), p["norm_in"], self.eps)
            qkv = F.linear(h, p["qkv"], p["qkv_bias"])
            # queries and keys are adjacent in the projection: rotated in one pass (half the
            # elementwise kernels of rotating each), then split as views
            qk, v = qkv.split(((hq + hk) * d, hk * d), dim=-1)
            q, k = _rotate(qk.view(b, w, hq + hk, d), cos, sin).split((hq, hk), dim=2)
            v = v.view(b, w, hk, d)
            k_all, v_all = self.k_cache[i], self.v_cache[i]
            k_all[cache_rows, :, pos] = k  # per-row positions, as device tensors
            v_all[cache_rows, :, pos] = v
            if fresh:  # a new row's keys are this call's: causal, no mask, no cache read
                k_seen, v_seen = k.transpose(1, 2), v.transpose(1, 2)
            elif rows is None:  # attend over views of the rows
                k_seen, v_seen = k_all[span, :, :extent], v_all[span, :, :extent]
            else:  # scattered rows: over gathered copies
                k_seen, v_seen = k_all[rows, :, :extent], v_all[rows, :, :extent]
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k_seen,
                v_seen,
                attn_mask=bias,
                is_causal=fresh,
                enable_gqa=hq != hk,
            )
            x = x + F.linear(attn.transpose(1, 2).reshape(b, w, hq * d), p["o"], p["o_bias"])
            h = F.rms_norm(x, (x.shape[-1],), p["norm_post"], self.eps)
            gate, up = F.linear(h, p["gate_up"], p["gate_up_bias"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, p["down"], p["down_bias"])
            if i in self.capture_ids:
                captured[i] = x
        final = F.rms_norm(x, (x.shape[-1],), self.final_norm, self.eps)
        feats = (
            torch.cat([captured[i] for i in self.capture_ids], dim=-1) if self.capture_ids else None
        )
        head_in = final if logits_at is None else final[batch[:, 0], logits_at][:, None]
        return F.linear(head_in, self.lm_head), feats, final

    def _bias(self, pos: torch.Tensor, extent: int, dtype: torch.dtype) -> torch.Tensor:
        """[B, 1, W, extent]: 0 where a query at `pos` sees a cache position, -inf elsewhere. As
        an additive mask, made once a forward: given the boolean one, SDPA converts it in every
        layer (3.48 against 3.70 ms a speculative step on one H200)."""
        visible = self.key_pos[None, None, None, :extent] <= pos[:, None, :, None]
        zeros = torch.zeros(visible.shape, dtype=dtype, device=pos.device)
        return zeros.masked_fill_(~visible, float("-inf"))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX rotary embedding (HF Llama's rotate_half convention) of x [B, W, H, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)
