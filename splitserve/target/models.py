"""Where a target's files come from and what the rest of the project reads from them.

Every target kind is reduced to a local HF directory first (`prepare_target_dir`), so target
workers, trainers and the serving CLIs load the same files: the embedded SmolLM2 is converted from
its GGUF once and `ling3_mini` is materialised once from a seed (`embedded.py`), `path` is the
user's directory. Trainers read only the embedding and LM head (`load_frozen_head`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from pathlib import Path

import torch

from draft_models import DraftConfig, FrozenTargetHead, TargetSpec

from .config import TargetConfig, resolve_dtype
from .embedded import ensure_gemma3_270m, ensure_ling3_mini, ensure_smollm2

EMBED_ALIASES = [
    "model.embed_tokens.weight",
    "model.word_embeddings.weight",
    "transformer.wte.weight",
]
HEAD_ALIASES = ["lm_head.weight", "output.weight"]


def prepare_target_dir(cfg: TargetConfig, seed: int = 0) -> Path:
    """The local HF directory of the configured target (converted or materialised if needed)."""
    if cfg.kind == "smollm2":
        return ensure_smollm2()
    if cfg.kind == "gemma3_270m":
        return ensure_gemma3_270m()
    if cfg.kind == "ling3_mini":
        return ensure_ling3_mini(cfg.mini, seed=seed)
    path = Path(cfg.path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"target.path={cfg.path} does not exist or is not a directory")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"target.path={cfg.path} has no config.json: not a HF model directory"
        )
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
            f"tokenizer in {model_dir} has {len(tok)} tokens but the target's vocab_size is "
            f"{spec.vocab_size}: "
            "tokenizer and target do not match"
        )
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        tid = getattr(tok, name, None)
        if tid is not None and not 0 <= tid < spec.vocab_size:
            raise ValueError(
                f"tokenizer {name}={tid} is outside the target vocabulary [0, {spec.vocab_size})"
            )
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"tokenizer in {model_dir} has no chat template")
    return tok


def reserved_mask_token(tok) -> int | None:
    """The token DSpark's mask slots hold (SGLang reads its id from the draft's config.json): one
    the target never has to predict and chat never emits, as DFlash and DeepSpec reserve a special
    token. The tokenizer's own mask token if it has one; else its last added special token that is
    neither bos, eos, pad nor unk and that the chat template never writes (tokenizers append
    their reserved and code-only tokens last: SmolLM2's <empty_output>, 16; Llama 3's
    <|reserved_special_token_247|>); else its pad, then unk token where distinct from eos and bos.
    None when it has none of these."""
    if getattr(tok, "mask_token_id", None) is not None:
        return int(tok.mask_token_id)
    named = {getattr(tok, f"{n}_token_id", None) for n in ("bos", "eos", "pad", "unk")}
    template = tok.chat_template or ""
    if not isinstance(template, str):  # named templates: every one of them
        template = json.dumps(template, ensure_ascii=False)  # tokens as written, not \u-escaped
    for tid, added in sorted(tok.added_tokens_decoder.items(), reverse=True):
        if added.special and tid not in named and added.content not in template:
            return int(tid)
    ends = {tok.eos_token_id, tok.bos_token_id}
    for tid in (tok.pad_token_id, tok.unk_token_id):
        if tid is not None and tid not in ends:
            return int(tid)
    return None


def resolve_draft(draft: DraftConfig, model_dir: Path, spec: TargetSpec, tok=None) -> DraftConfig:
    """`draft.resolve(spec)` with its mask token checked against the target's tokenizer (`tok`,
    loaded from `model_dir` if not given): null takes `reserved_mask_token`; an explicit id that
    is an ordinary text token is refused, since the draft would read each mask slot as that
    word. Every place that resolves a draft against a target calls this."""
    if tok is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
    mask = draft.mask_token_id
    if mask is None:
        mask = reserved_mask_token(tok)
        if mask is None:
            raise ValueError(
                f"draft.mask_token_id=null: the tokenizer of the target {model_dir} has no mask, "
                "reserved special, pad or unk token to use; set draft.mask_token_id to a token "
                "id chat never emits"
            )
    elif 0 <= mask < len(tok) and not (
        mask in tok.added_tokens_decoder and tok.added_tokens_decoder[mask].special
    ):  # an ordinary token, or an added one the model emits as text (Qwen3's <think>)
        reserved = reserved_mask_token(tok)
        hint = (
            f"null (its reserved token {reserved}, {tok.convert_ids_to_tokens(reserved)!r})"
            if reserved is not None
            else "one of its special tokens"
        )
        raise ValueError(
            f"draft.mask_token_id={mask} is the ordinary token "
            f"{tok.convert_ids_to_tokens(mask)!r} of the tokenizer of the target {model_dir}: "
            f"the draft would read every mask slot as that text; use {hint}"
        )
    return dataclasses.replace(draft, mask_token_id=int(mask)).resolve(spec)


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
        raise ValueError(
            f"{model_dir}: {what} weight of shape {shape} not found in its safetensors "
            f"(looked for {', '.join(candidates)})"
        )

    embed = pick(embed_names, "embedding")
    head = embed if head_names == embed_names else pick(head_names, "LM head")
    return FrozenTargetHead(embed, head)


def cache_kwarg(model, cache) -> dict:
    """The keyword that passes a KV cache to `model`'s forward: `cache` in transformers >= 5.2x,
    `past_key_values` before (the GPU machines carry 5.17), so neither warns nor breaks."""
    return {_cache_name(type(model)): cache}


@functools.cache
def _cache_name(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def load_causal_lm(model_dir: Path, device, dtype: str | torch.dtype = "auto"):
    """The target as a transformers causal LM on `device`, in eval mode (dtype per
    `resolve_dtype` when given by name)."""
    from transformers import AutoModelForCausalLM

    if isinstance(dtype, str):
        dtype = resolve_dtype(dtype, device)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
