"""Target models: where their weights come from, and the `hf` backend that turns a conversation
into a `SequenceSample` (regenerate the answer, build the loss mask, capture hidden states).

Every target kind is reduced to a local HF directory first (`prepare_target_dir`), so target
workers and trainers load the same files: the embedded SmolLM2 is converted from its GGUF once,
`ling3_mini` (a tiny random-weight bailing_hybrid with SmolLM2's tokenizer) is materialised once
from a seed, and `path` is the user's directory. Trainers read only the embedding and LM head.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Optional, Protocol

import torch

from draft_models import FrozenTargetHead, SequenceSample, TargetSpec

from .capture import target_sample
from .chat import render_with_loss_mask
from .config import SamplingSetting, TargetConfig
from .data import Conversation, prompt_turns
from .embedded_target import default_cache_dir, ensure_smollm2

LING3_MINI = dict(
    vocab_size=49152, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=16, head_dim=16, linear_num_heads=4, linear_head_dim=16, num_experts=4, num_experts_per_token=2,
    num_expert_group=1, topk_group=1, first_k_dense_replace=1, layer_group_size=3,
)
COMPLETE = "splitserve_target.json"
EMBED_ALIASES = ["model.embed_tokens.weight", "model.word_embeddings.weight", "transformer.wte.weight"]
HEAD_ALIASES = ["lm_head.weight", "output.weight"]


def _resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def ensure_ling3_mini(overrides: dict, cache_dir: Optional[Path] = None, seed: int = 0) -> Path:
    """A tiny random-weight Ling-3 (bailing_hybrid) with SmolLM2's tokenizer and chat template:
    it runs every Ling-3 code path on CPU in seconds; it cannot measure acceptance."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, BailingHybridConfig

    shape = {**LING3_MINI, **overrides}
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:10]
    key = f"ling3-mini-{digest}-s{seed}"
    dest = (cache_dir or default_cache_dir()) / key
    if (dest / COMPLETE).is_file():
        return dest
    tokenizer = AutoTokenizer.from_pretrained(ensure_smollm2(cache_dir))
    config = BailingHybridConfig(**shape, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                 bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / COMPLETE).write_text(json.dumps({"kind": "ling3_mini", "shape": shape, "seed": seed}))
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def prepare_target_dir(cfg: TargetConfig, seed: int = 0) -> Path:
    """The local HF directory of the configured target (converted or materialised if needed)."""
    if cfg.kind == "smollm2":
        return ensure_smollm2()
    if cfg.kind == "ling3_mini":
        return ensure_ling3_mini(cfg.mini, seed=seed)
    path = Path(cfg.path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"target.path={cfg.path} does not exist or is not a directory")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"target.path={cfg.path} has no config.json: not a HF model directory")
    return path


def load_target_spec(model_dir: Path) -> TargetSpec:
    from transformers import AutoConfig

    return TargetSpec.from_hf_config(AutoConfig.from_pretrained(model_dir))


def check_tokenizer(model_dir: Path, spec: TargetSpec):
    """Load the tokenizer and refuse one that cannot belong to this target."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if len(tok) > spec.vocab_size:
        raise ValueError(
            f"tokenizer in {model_dir} has {len(tok)} tokens but the target's vocab_size is {spec.vocab_size}: "
            "tokenizer and target do not match"
        )
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        tid = getattr(tok, name, None)
        if tid is not None and not 0 <= tid < spec.vocab_size:
            raise ValueError(f"tokenizer {name}={tid} is outside the target vocabulary [0, {spec.vocab_size})")
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"tokenizer in {model_dir} has no chat template")
    return tok


def load_frozen_head(model_dir: Path, device, dtype) -> FrozenTargetHead:
    """Only the embedding and LM head of the target, read from its safetensors without loading
    the rest (parameter names come from the model class built on the meta device)."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    names: dict[int, list[str]] = {}
    for n, p in skeleton.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    embed_names = names[id(skeleton.get_input_embeddings().weight)]
    head_names = names[id(skeleton.get_output_embeddings().weight)]  # == embed_names when tied
    # Checkpoints may store original names (transformers renames some on load, e.g. Ling's
    # model.word_embeddings -> model.embed_tokens), so known aliases are tried too, by shape.
    embed_names += [a for a in EMBED_ALIASES if a not in embed_names]
    if head_names is not embed_names:
        head_names = head_names + [a for a in HEAD_ALIASES if a not in head_names]
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    shape = (config.get_text_config().vocab_size, config.get_text_config().hidden_size)
    found: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for name in set(embed_names + head_names) & set(st.keys()):
                if tuple(st.get_slice(name).get_shape()) == shape:
                    found[name] = st.get_tensor(name)

    def pick(candidates: list[str], what: str) -> torch.Tensor:
        for name in candidates:
            if name in found:
                return found[name].to(device=device, dtype=dtype)
        raise ValueError(f"{model_dir}: {what} weight of shape {shape} not found in its safetensors "
                         f"(looked for {', '.join(candidates)})")

    embed = pick(embed_names, "embedding")
    head = embed if head_names == embed_names else pick(head_names, "LM head")
    return FrozenTargetHead(embed, head)


class TargetBackend(Protocol):
    """What a target worker needs from a backend: sample id + conversation -> SequenceSample
    (regenerated with the target, assistant-only loss mask, captured hidden states)."""

    spec: TargetSpec

    def produce(self, g: int, conversation: Conversation) -> SequenceSample: ...


class HFTarget:
    """The `hf` backend: any transformers causal LM (Llama, bailing_hybrid, ...)."""

    def __init__(self, model_dir: Path, cfg: TargetConfig, layer_ids: list[int], *, device, seed: int,
                 max_length: int, max_prompt_tokens: int) -> None:
        from transformers import AutoModelForCausalLM

        self.device = torch.device(device)
        self.dtype = _resolve_dtype(cfg.dtype, self.device)
        self.spec = load_target_spec(model_dir)
        self.tokenizer = check_tokenizer(model_dir, self.spec)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype).to(self.device).eval()
        self.cfg, self.layer_ids, self.seed = cfg, list(layer_ids), seed
        self.max_length, self.max_prompt_tokens = max_length, max_prompt_tokens

    def _prompt_ids(self, messages: Conversation) -> torch.Tensor:
        out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        ids = torch.tensor(out["input_ids"], dtype=torch.long)
        return ids[-self.max_prompt_tokens:]

    def _generate_kwargs(self, setting: SamplingSetting, budget: int) -> dict:
        kwargs = dict(do_sample=setting.temperature > 0, max_new_tokens=budget,
                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        if setting.temperature > 0:
            kwargs.update(temperature=setting.temperature, top_p=setting.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return kwargs

    def _with_mask(self, prompt: torch.Tensor, response: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.cat((prompt, response))
        mask = torch.zeros(ids.numel(), dtype=torch.bool)
        mask[prompt.numel():] = True
        return ids, mask

    def _budget(self, prompt: torch.Tensor) -> int:
        return max(1, min(self.cfg.max_new_tokens, self.max_length - prompt.numel()))

    @torch.no_grad()
    def regenerate(self, g: int, conversation: Conversation) -> tuple[torch.Tensor, torch.Tensor]:
        """The target answers the conversation's opening turns itself, under sampling setting
        g mod len(settings), seeded by (seed, g): same sample id, same tokens, in any process."""
        prompt = self._prompt_ids(prompt_turns(conversation))
        setting: SamplingSetting = self.cfg.sampling[g % len(self.cfg.sampling)]
        torch.manual_seed((self.seed * 1_000_003 + g) % (1 << 63))
        out = self.model.generate(prompt[None].to(self.device), **self._generate_kwargs(setting, self._budget(prompt)))
        return self._with_mask(prompt, out[0, prompt.numel():].cpu())

    @torch.no_grad()
    def regenerate_batch(self, gs: list[int], conversations: list[Conversation]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`regenerate` for samples of one sampling setting in one left-padded generate call,
        seeded by (seed, first id): deterministic for a fixed batch composition, which the worker
        keeps fixed by cutting its sample list into batches counted from step 0."""
        prompts = [self._prompt_ids(prompt_turns(c)) for c in conversations]
        setting: SamplingSetting = self.cfg.sampling[gs[0] % len(self.cfg.sampling)]
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        width = max(p.numel() for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - p.numel():] = p
            attention[i, width - p.numel():] = 1
        torch.manual_seed((self.seed * 1_000_003 + gs[0]) % (1 << 63))
        out = self.model.generate(ids.to(self.device), attention_mask=attention.to(self.device),
                                  **self._generate_kwargs(setting, max(self._budget(p) for p in prompts))).cpu()
        results = []
        for i, p in enumerate(prompts):
            response = out[i, width: width + self._budget(p)]
            ends = (response == eos).nonzero() if eos is not None else response[:0]
            if ends.numel():
                response = response[: int(ends[0]) + 1]  # as unbatched generate: stop after the first EOS
            results.append(self._with_mask(p, response))
        return results

    def produce_batch(self, gs: list[int], conversations: list[Conversation]) -> list[SequenceSample]:
        """Several samples at once: batched regeneration (one generate call per sampling
        setting), then one capture forward per sample."""
        if not self.cfg.regenerate or len(gs) == 1:
            return [self.produce(g, c) for g, c in zip(gs, conversations)]
        pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        n = len(self.cfg.sampling)
        for setting in range(n):
            group = [i for i, g in enumerate(gs) if g % n == setting]
            if group:
                done = self.regenerate_batch([gs[i] for i in group], [conversations[i] for i in group])
                pairs.update(zip(group, done))
        return [self._capture(*pairs[i]) for i in range(len(gs))]

    def _capture(self, ids: torch.Tensor, mask: torch.Tensor) -> SequenceSample:
        ids, mask = ids[: self.max_length], mask[: self.max_length]
        return target_sample(self.model, ids.to(self.device), mask.to(self.device), self.layer_ids)

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        if self.cfg.regenerate:
            return self._capture(*self.regenerate(g, conversation))
        return self._capture(*render_with_loss_mask(self.tokenizer, conversation))
