"""A decoder-only target with a static KV cache, written for CUDA-graph capture.

Why our own forward rather than transformers' with a StaticCache: a graph replays fixed shapes
and fixed memory, so every step must (a) write its keys and values at per-row positions given as
device tensors (transformers' StaticCache writes one position range shared by every row, which
rules out rows at different lengths, i.e. continuous batching), (b) return the draft's target
layers and the final normed state as tensors of the step itself (no forward hooks, no Python on
replay) and (c) never read the device. The weights are the HF model's own tensors, except q/k/v
and gate/up, concatenated into one matrix each (copies: about half an 8B model's bytes more
while the HF model lives), and the rotary embedding is the HF model's module, so the RoPE types
with frequencies fixed at load (STATIC_ROPE) follow it; the others are refused.

One forward serves every family the family table marks `static_runtime`
(draft_models.families): it reads what a layer has from the HF modules themselves, so the
differences are data, not subclasses:
- q/k/v/o projections, with biases where the model has them (Qwen2);
- per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3);
- a sliding window per layer (`self_attn.sliding_window`: Mistral, Gemma 3's local layers, Qwen
  layers past max_window_layers) and a RoPE base per layer type (Gemma 3);
- Gemma 3's sandwich norms (after attention, before and after the MLP), (1 + w) RMSNorm in fp32,
  embedding scale, query_pre_attn_scalar and final logit soft-capping;
- a gated MLP with the model's own activation (SiLU, GELU-tanh), or top-k routed experts
  (Qwen3-MoE) run as two grouped GEMMs over the routed (token, expert) pairs, so a step reads
  only the experts it routes to and never leaves the device.

Shapes: a step takes token ids [B, W] at positions [B, W] for cache rows row0..row0+B-1 and
returns (logits [B, W, V], features [B, W, m*H] of the capture ids, final normed [B, W, H]).
Each query sees the cache at key positions <= its own position in its row (and inside its
layer's window): keys written at positions past a row's committed length (rejected drafts) are
overwritten before any query can see them, so rolling back a row is only moving its length
back, never touching the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from draft_models.families import family, static_types

from . import attention_kernels, moe_kernels

# RoPE types whose frequencies are fixed at load: "dynamic" and "longrope" rescale them from the
# largest position in a batch (a host read, and one row's frequencies would depend on the others)
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def _rope_types(config) -> list[str]:
    """Every rope_type of a config: one, or one per layer type (Gemma 3's nested parameters)."""
    params = getattr(config, "rope_parameters", None) or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        return [v.get("rope_type", "default") for v in params.values()]
    return [params.get("rope_type", "default")]


def unsupported_reason(config) -> str | None:
    """Why StaticDecoder cannot run this config exactly ("runs ...; this one ...: the reason its
    family gives, draft_models.families"), or None."""
    fam = family(config.model_type)
    if not fam.static_runtime:
        return (
            f"runs {', '.join(static_types())} targets without linear-attention layers; this one "
            f"is {config.model_type}: {fam.refusal}"
        )
    bad = [r for r in _rope_types(config) if r not in STATIC_ROPE]
    if bad:
        return (
            f"runs RoPE types {', '.join(STATIC_ROPE)}; this target's rope_type {bad[0]!r} "
            "rescales its frequencies per batch"
        )
    if getattr(config, "use_bidirectional_attention", False):
        return "attends causally; this target attends bidirectionally (use_bidirectional_attention)"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return (
            "attends with PyTorch's scaled_dot_product_attention, which has no logit "
            f"soft-capping; this target sets attn_logit_softcapping={config.attn_logit_softcapping}"
        )
    return None


class StaticDecoder(nn.Module):
    # Benchmarks' switches (scripts/benchlib.apply_runtime_switches; --before turns both off):
    use_pair_gemv = True  # see _moe
    # attention_kernels at decode and verify steps on CUDA (tests/test_gpu_attention.py passed
    # on one H200, 2026-12-05); off: SDPA over the masked cache
    use_decode_kernel = True
    # the Triton decode attention inside torch.compile'd steps too (a registered custom op,
    # which compile traces whole). On one H100 (2026-12-06) the compiled dense 4-8B steps kept
    # their width-1 time and verified 8 tokens at 1.02-1.04x one, against 1.11-1.42x with SDPA
    # inside (compiling took ~55 % longer). On by default; benchmarks' --sdpa-in-compile or
    # --before turn it off
    kernels_in_compile = True
    # the MoE pair GEMV inside compiled steps too (correct there: tests/test_gpu_compile.py).
    # On one H100 (2026-12-06) the Qwen3-30B-A3B-shape width-1 step compiled in 5.61 ms with it
    # against 6.54 with the grouped GEMMs inside; benchmarks' --grouped-in-compile turns it off
    gemv_in_compile = True
    # with the pair GEMV: the router's softmax, top-k and renormalisation in one Triton program a
    # token, and SiLU applied inside the second GEMV (moe_kernels; 3 kernels fewer a layer: one
    # H100, graphed width-1 step 5.48 against 6.48 ms); benchmarks' --unfused-moe or --before
    # turn it off
    fused_moe = True
    # with the fused MoE and a plain RMSNorm before the experts: the residual add, that norm and
    # the router GEMV as one Triton kernel and the routing done inside each expert GEMV
    # (moe_kernels.add_norm_router, routed_mlp_from_logits: a layer's MoE half in 3 kernels, not
    # 6 eagerly or 5 under torch.compile, which fuses the add and the norm; one H100, graphed
    # width-1 step 5.29 against 5.50 ms, same lease); benchmarks' --unfused-router,
    # --unfused-moe or --before turn it off
    fused_router = True

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
        self.unit_offset = family(cfg.model_type).unit_offset_norms
        self.max_rows, self.max_len = max_rows, max_len
        self.embed = inner.embed_tokens.weight
        scale = getattr(inner.embed_tokens, "embed_scale", None)  # Gemma: sqrt(hidden)
        self.embed_scale = None if scale is None else torch.as_tensor(scale).to(self.embed.dtype)
        self.rotary = inner.rotary_emb
        self.rope_per_type = hasattr(self.rotary, "layer_types")  # Gemma 3: a base per type
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.final_norm = self._norm_weight(inner.norm)
        self.lm_head = hf_model.get_output_embeddings().weight
        types = getattr(cfg, "layer_types", None) or [None] * self.num_layers
        self.layers = [self._layer(inner.layers[i], types[i], cfg) for i in range(self.num_layers)]
        self.scale = inner.layers[0].self_attn.scaling
        moe = [p["moe"] for p in self.layers if p["moe"] is not None]
        self.grouped = bool(moe) and _grouped_mm_runs(self.embed, moe[0]["down"].shape[1:])
        # decode and verify steps on CUDA: Triton attention over each row's real context
        self.decode_kernel = (
            self.use_decode_kernel
            and self.embed.is_cuda
            and self.embed.dtype in (torch.bfloat16, torch.float16)
            and self.head_dim in (16, 32, 64, 128, 256)
            and attention_kernels.available()
        )
        # width-1 steps on CUDA: one Triton GEMV per (token, expert) pair (moe_kernels)
        self.pair_gemv = (
            bool(moe) and self.use_pair_gemv and self.embed.is_cuda and moe_kernels.available()
        )
        for on, kernels in ((self.decode_kernel, attention_kernels), (self.pair_gemv, moe_kernels)):
            if on:  # register the op now: a compiled step must find it, not build it
                kernels.register()
        dtype, device = self.embed.dtype, self.embed.device
        # one tensor per layer, written in place by index_put_ on the tensor itself: under
        # torch.compile a write into a view of one stacked [layers, ...] buffer was
        # functionalized into copies of each layer's cache and a rewrite of the whole buffer
        # every step (measured on one H200)
        shape = (max_rows, self.kv_heads, max_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.register_buffer("key_pos", torch.arange(max_len, device=device), persistent=False)

    def _norm_weight(self, norm: nn.Module | None) -> torch.Tensor | None:
        """What `_norm` multiplies by: the weight, or (1 + weight) in fp32 for Gemma's norms."""
        if norm is None:
            return None
        return (1.0 + norm.weight.float()) if self.unit_offset else norm.weight

    def _layer(self, layer: nn.Module, layer_type: str | None, cfg) -> dict:
        a, m = layer.self_attn, layer.mlp
        p = {
            "qkv": torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)),
            "qkv_bias": (
                torch.cat((a.q_proj.bias, a.k_proj.bias, a.v_proj.bias))
                if a.q_proj.bias is not None
                else None
            ),
            "o": a.o_proj.weight,
            "o_bias": a.o_proj.bias,  # attention_bias=True biases o_proj too
            "qk_norm": None,
            # the attention's own window, else the model's (Mistral's applies to every layer)
            "window": getattr(a, "sliding_window", getattr(cfg, "sliding_window", None)),
            "rope": layer_type if self.rope_per_type else None,
            "norm_in": self._norm_weight(layer.input_layernorm),
            "moe": None,
            "act": None,
        }
        if getattr(a, "q_norm", None) is not None:  # per head, one weight row per q then k head
            q, k = self._norm_weight(a.q_norm), self._norm_weight(a.k_norm)
            p["qk_norm"] = torch.cat((q.expand(self.heads, -1), k.expand(self.kv_heads, -1)))
        if hasattr(layer, "pre_feedforward_layernorm"):  # Gemma's sandwich
            p["attn_out_norm"] = self._norm_weight(layer.post_attention_layernorm)
            p["mlp_in_norm"] = self._norm_weight(layer.pre_feedforward_layernorm)
            p["mlp_out_norm"] = self._norm_weight(layer.post_feedforward_layernorm)
        else:
            p["attn_out_norm"], p["mlp_out_norm"] = None, None
            p["mlp_in_norm"] = self._norm_weight(layer.post_attention_layernorm)
        if hasattr(m, "experts"):  # routed experts (Qwen3-MoE: 3-D expert tensors)
            p["moe"] = {
                "router": m.gate.weight,
                "top_k": m.gate.top_k,
                "renorm": bool(m.gate.norm_topk_prob),
                "gate_up": m.experts.gate_up_proj,  # [E, 2I, H]
                "down": m.experts.down_proj,  # [E, H, I]
            }
            p["act"] = m.experts.act_fn
        else:
            p["gate_up"] = torch.cat((m.gate_proj.weight, m.up_proj.weight))
            bias = m.gate_proj.bias  # mlp_bias=True
            p["gate_up_bias"] = None if bias is None else torch.cat((bias, m.up_proj.bias))
            p["down"], p["down_bias"] = m.down_proj.weight, m.down_proj.bias
            p["act"] = m.act_fn
        return p

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
        if self.embed_scale is not None:
            x = x * self.embed_scale
        captured = {-1: x} if -1 in self.capture_ids else {}
        rope = {}  # (cos, sin) [B, W, 1, D] per layer type
        for key in {p["rope"] for p in self.layers}:
            cos, sin = self.rotary(x, pos) if key is None else self.rotary(x, pos, key)
            rope[key] = cos[:, :, None, :], sin[:, :, None, :]
        # additive masks, one per window size, made once a forward; a fresh prefill needs one
        # only where a window is shorter than the call
        # a decode or verify step on CUDA: the Triton kernel reads each row's real context
        kernel = (
            self.decode_kernel
            and not fresh
            and w * self.heads // self.kv_heads <= attention_kernels.max_rows(self.head_dim)
            and self._triton_here(self.kernels_in_compile)
        )
        masks = {}
        for win in {p["window"] for p in self.layers} if not kernel else ():
            if not fresh:
                masks[win] = self._bias(pos, extent, x.dtype, win)
            elif win is not None and win < w:
                own = pos[:1]  # every row's positions are arange(W)
                masks[win] = self._bias(own, w, x.dtype, win, keys=own[0])
        batch = torch.arange(b, device=ids.device)[:, None]
        # the cache rows written: row0.. (a slice when read), or the scattered `rows`
        cache_rows = batch + row0 if rows is None else rows[:, None]
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        for i, p in enumerate(self.layers):
            h = self._norm(x, p["norm_in"])
            qkv = F.linear(h, p["qkv"], p["qkv_bias"])
            # queries and keys are adjacent in the projection: normed and rotated in one pass
            # (half the elementwise kernels of doing each), then split as views
            qk, v = qkv.split(((hq + hk) * d, hk * d), dim=-1)
            qk = qk.view(b, w, hq + hk, d)
            if p["qk_norm"] is not None:
                qk = self._norm(qk, p["qk_norm"])
            q, k = _rotate(qk, *rope[p["rope"]]).split((hq, hk), dim=2)
            v = v.view(b, w, hk, d)
            k_all, v_all = self.k_cache[i], self.v_cache[i]
            k_all[cache_rows, :, pos] = k  # per-row positions, as device tensors
            v_all[cache_rows, :, pos] = v
            if kernel:
                attn = attention_kernels.decode_attention(
                    q, k_all, v_all, cache_rows[:, 0], pos, self.scale, p["window"], extent
                ).reshape(b, w, hq * d)
            else:
                if fresh:  # a new row's keys are this call's: causal, no cache read
                    k_seen, v_seen = k.transpose(1, 2), v.transpose(1, 2)
                elif rows is None:  # attend over views of the rows
                    k_seen, v_seen = k_all[span, :, :extent], v_all[span, :, :extent]
                else:  # scattered rows: over gathered copies
                    k_seen, v_seen = k_all[rows, :, :extent], v_all[rows, :, :extent]
                attn = self._attend(q, k_seen, v_seen, masks.get(p["window"]), fresh)
            out = F.linear(attn, p["o"], p["o_bias"])
            if self._router_fused(p, b * w):
                x, out = self._add_norm_moe(x, out, p)
            else:
                x = x + (out if p["attn_out_norm"] is None else self._norm(out, p["attn_out_norm"]))
                h = self._norm(x, p["mlp_in_norm"])
                out = self._moe(h, p) if p["moe"] is not None else self._mlp(h, p)
            x = x + (out if p["mlp_out_norm"] is None else self._norm(out, p["mlp_out_norm"]))
            if i in self.capture_ids:
                captured[i] = x
        final = self._norm(x, self.final_norm)
        feats = (
            torch.cat([captured[i] for i in self.capture_ids], dim=-1) if self.capture_ids else None
        )
        head_in = final if logits_at is None else final[batch[:, 0], logits_at][:, None]
        logits = F.linear(head_in, self.lm_head)
        if self.softcap is not None:  # Gemma: cap * tanh(logits / cap)
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits, feats, final

    def _triton_here(self, inside: bool) -> bool:
        """A Triton op may run in this call: eagerly or in a graph, and inside a torch.compile'd
        step where `inside` (kernels_in_compile, gemv_in_compile) allows it."""
        return inside or not torch.compiler.is_compiling()

    def _attend(self, q, k, v, mask: torch.Tensor | None, fresh: bool) -> torch.Tensor:
        """Attention of q [B, W, Hq, D] over k, v [B, Hk, L, D] -> [B, W, Hq * D]. (Folding
        the query heads of a key head into its rows, to keep SDPA off its math kernel, was
        slower on one H200 with torch 2.11, whose cuDNN kernel takes GQA with a mask:
        docs/results/runtime_h200, 2026-12-05.)"""
        b, w, hq, d = q.shape
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k, v, attn_mask=mask, is_causal=fresh and mask is None,
            scale=self.scale, enable_gqa=hq != k.shape[1],
        )  # fmt: skip
        return o.transpose(1, 2).reshape(b, w, hq * d)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm over the last dim as the target computes it: Llama's (normalise, cast, then
        scale) or Gemma's (scale by 1 + w in fp32, then cast). `weight` from `_norm_weight`, or
        [heads, D] rows for the per-head q/k norms."""
        if self.unit_offset:
            return (F.rms_norm(x.float(), (x.shape[-1],), None, self.eps) * weight).to(x.dtype)
        if weight.dim() == 1:
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        return F.rms_norm(x, (x.shape[-1],), None, self.eps) * weight

    @staticmethod
    def _mlp(h: torch.Tensor, p: dict) -> torch.Tensor:
        gate, up = F.linear(h, p["gate_up"], p["gate_up_bias"]).chunk(2, dim=-1)
        return F.linear(p["act"](gate) * up, p["down"], p["down_bias"])

    def _moe(self, h: torch.Tensor, p: dict) -> torch.Tensor:
        """Top-k routed experts over h [B, W, H]. At decode widths on CUDA, a GEMV per (token,
        expert) pair (moe_kernels.routed_mlp); otherwise the pairs sorted by expert and
        run as two grouped GEMMs (`torch._grouped_mm`, offsets on the device: no host read, so
        it graphs), each reading only the experts some token routes to. Router as Qwen3-MoE:
        softmax in fp32, top-k, optionally renormalised, weights cast back to h's dtype."""
        moe, shape = p["moe"], h.shape
        t = h.reshape(-1, shape[-1])
        logits = F.linear(t, moe["router"])
        gemv = self._gemv_here(p, t.shape[0])
        if gemv and self.fused_moe:
            weight, expert = moe_kernels.route(logits, moe["top_k"], moe["renorm"], h.dtype)
        else:
            probs = F.softmax(logits, dim=-1, dtype=torch.float32)
            weight, expert = probs.topk(moe["top_k"], dim=-1)  # [T, k]
            if moe["renorm"]:
                weight = weight / weight.sum(dim=-1, keepdim=True)
            weight = weight.to(h.dtype)
        if gemv:
            out = moe_kernels.routed_mlp(
                t, moe["gate_up"], moe["down"], expert, weight, p["act"], self.fused_moe
            )
            return out.reshape(shape)
        if self.grouped:
            flat = expert.reshape(-1)
            order = flat.argsort(stable=True)
            token = order // moe["top_k"]
            xs = t[token]  # [T*k, H], grouped by expert
            n = moe["gate_up"].shape[0]
            counts = torch.zeros(n, dtype=torch.int32, device=t.device)
            counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
            offs = counts.cumsum(0, dtype=torch.int32)
            gate, up = torch._grouped_mm(xs, moe["gate_up"].transpose(1, 2), offs=offs).chunk(2, -1)
            ys = torch._grouped_mm(p["act"](gate) * up, moe["down"].transpose(1, 2), offs=offs)
            ys = ys * weight.reshape(-1)[order, None]
            return torch.zeros_like(t).index_add_(0, token, ys).reshape(shape)
        # no grouped GEMM for this device and dtype: every expert over every token, weighted by
        # its routing weight (0 where not routed): no host read, so it still graphs, but it reads
        # all experts and computes E times the work (correct, slow)
        dense = torch.zeros((t.shape[0], moe["gate_up"].shape[0]), dtype=h.dtype, device=h.device)
        dense.scatter_(1, expert, weight)
        out = torch.zeros_like(t)
        for e in range(dense.shape[1]):
            gate, up = F.linear(t, moe["gate_up"][e]).chunk(2, -1)
            out += F.linear(p["act"](gate) * up, moe["down"][e]) * dense[:, e : e + 1]
        return out.reshape(shape)

    def _gemv_here(self, p: dict, tokens: int) -> bool:
        """This layer's experts run as pair GEMVs here: a MoE layer, on CUDA, a token's pairs
        (a width-1 step), and the op allowed where the call runs."""
        return (
            p["moe"] is not None
            and self.pair_gemv
            and tokens * p["moe"]["top_k"] <= moe_kernels.MAX_PAIRS
            and self._triton_here(self.gemv_in_compile)
        )

    def _router_fused(self, p: dict, tokens: int) -> bool:
        """The residual add, the norm and the router of this MoE layer run as one kernel and the
        routing inside the expert GEMVs (`_add_norm_moe`): pair GEMVs with the fused routing,
        and a plain RMSNorm between (no sandwich norm, no unit offset: Qwen3-MoE's layers)."""
        return (
            self.fused_router
            and self.fused_moe
            and self._gemv_here(p, tokens)
            and p["attn_out_norm"] is None
            and not self.unit_offset
        )

    def _add_norm_moe(self, x: torch.Tensor, out: torch.Tensor, p: dict):
        """(x + out, the experts' output) of a `_router_fused` layer: moe_kernels.add_norm_router,
        then the two expert GEMVs, each routing its token from the router's logits itself; the
        same as `_moe` of the norm of x + out, to rounding, in 3 kernels (not 6, or 5 compiled)."""
        moe, shape = p["moe"], x.shape
        x, h, logits = moe_kernels.add_norm_router(
            x.reshape(-1, shape[-1]), out.reshape(-1, shape[-1]), p["mlp_in_norm"],
            moe["router"], self.eps,
        )  # fmt: skip
        experts = moe_kernels.routed_mlp_from_logits(
            h, moe["gate_up"], moe["down"], logits, moe["top_k"], moe["renorm"], p["act"]
        )
        return x.view(shape), experts.view(shape)

    def _bias(
        self,
        pos: torch.Tensor,
        extent: int,
        dtype: torch.dtype,
        window: int | None = None,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, 1, W, extent]: 0 where a query at `pos` sees a key position (`keys`, default the
        cache's 0..extent-1): at or before its own and, with a `window`, less than `window`
        behind it; -inf elsewhere. As an additive mask, made once a forward: given the boolean
        one, SDPA converts it in every layer (3.48 against 3.70 ms a speculative step on one
        H200)."""
        key = (self.key_pos[:extent] if keys is None else keys)[None, None, None, :]
        visible = key <= pos[:, None, :, None]
        if window is not None:
            visible &= key > pos[:, None, :, None] - window
        zeros = torch.zeros(visible.shape, dtype=dtype, device=pos.device)
        return zeros.masked_fill_(~visible, float("-inf"))


def _grouped_mm_runs(like: torch.Tensor, dims: tuple[int, ...]) -> bool:
    """Whether torch._grouped_mm runs for `like`'s device and dtype without reading the device
    (CUDA: its kernel exists for bf16 on sm90 / sm100 only; elsewhere PyTorch's fallback copies
    the offsets to the host, which a CUDA graph cannot capture; CPU: recent PyTorch) with these
    matrix dims (rows must be 16-byte aligned), tried once on a tiny aligned problem."""
    if not hasattr(torch, "_grouped_mm") or any(n * like.element_size() % 16 for n in dims):
        return False
    if like.device.type == "cuda":
        major = torch.cuda.get_device_capability(like.device)[0]
        if like.dtype != torch.bfloat16 or major not in (9, 10):
            return False
    a = torch.zeros((4, 16), dtype=like.dtype, device=like.device)
    b = torch.zeros((2, 16, 16), dtype=like.dtype, device=like.device)
    try:
        offs = torch.tensor([2, 4], device=like.device, dtype=torch.int32)
        torch._grouped_mm(a, b.transpose(1, 2), offs=offs)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX rotary embedding (HF Llama's rotate_half convention) of x [B, W, H, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)
