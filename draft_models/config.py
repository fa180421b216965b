"""Typed configuration of a draft model and the target facts it is resolved against.

`DraftConfig` holds every field and its default; each registered architecture adds the defaults
that differ for it, and Hydra sees both as `draft/<arch>_defaults` nodes (`store_hydra_defaults`,
named by `conf/draft/<arch>.yaml`). `resolve()` fills every "default from the target" field and
validates the whole, so a model is only ever built from a complete, checked config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .config_io import load_dataclass
from .families import family
from .registry import arch_names, get_arch
from .vocab import check_size

ROPES = ("full", "partial", "interleaved", "none")
ATTENTIONS = ("qwen3", "ling3_mla")
SEQUENTIAL_HEADS = ("markov", "gated", "rnn", "none")
DIVERGENCES = ("tv", "forward_kl")
LOSS_KERNELS = ("auto", "torch", "triton")  # draft_models/loss_kernels.py


def bad_value(field_name: str, value: Any, allowed: str) -> ValueError:
    """The error every config check raises: names the field, the value and what is allowed."""
    return ValueError(f"draft.{field_name}={value!r} is invalid; allowed: {allowed}")


def dflash_layer_ids(num_target_layers: int, num_ids: int) -> list[int]:
    """DFlash's default rule: `num_ids` layers evenly spaced from layer 1 to layer N-3."""
    if num_ids == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        raise ValueError(
            "the evenly spaced target-layer rule needs a target with >= 4 layers, got "
            f"{num_target_layers}"
        )
    return [int(round(start + i * (end - start) / (num_ids - 1))) for i in range(num_ids)]


@dataclass
class TargetSpec:
    """The shape facts of a target model that a draft depends on (read from its HF config)."""

    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    pad_token_id: int | None = None
    tie_word_embeddings: bool = False
    # MLA facts (Ling-3 / bailing_hybrid); None for targets without MLA layers.
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None

    @classmethod
    def from_hf_config(cls, config: Any) -> TargetSpec:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = int(text.num_attention_heads)
        hidden = int(text.hidden_size)
        rope_params = getattr(text, "rope_parameters", None) or {}
        # Gemma 3 nests one set per layer type: the global layers' base
        rope_params = rope_params.get("full_attention", rope_params)
        theta = rope_params.get("rope_theta", getattr(text, "rope_theta", 10000.0))
        return cls(
            model_type=str(getattr(text, "model_type", "unknown")),
            hidden_size=hidden,
            num_layers=int(text.num_hidden_layers),
            vocab_size=int(text.vocab_size),
            num_attention_heads=heads,
            num_key_value_heads=int(getattr(text, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(text, "head_dim", None) or hidden // heads),
            intermediate_size=int(text.intermediate_size),
            rms_norm_eps=float(getattr(text, "rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            pad_token_id=getattr(text, "pad_token_id", None),
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            kv_lora_rank=getattr(text, "kv_lora_rank", None),
            qk_nope_head_dim=getattr(text, "qk_nope_head_dim", None),
            qk_rope_head_dim=getattr(text, "qk_rope_head_dim", None),
            v_head_dim=getattr(text, "v_head_dim", None),
        )

    @property
    def max_capture_id(self) -> int:
        """The deepest layer whose output SGLang 0.5.23 can capture for DSpark on this target
        (its family's rule, draft_models.families)."""
        return family(self.model_type).max_capture_id(self.num_layers)

    @property
    def capture_rule(self) -> str:
        """Why `max_capture_id` is what it is, for error messages."""
        return family(self.model_type).capture_rule(self.num_layers)

    @property
    def default_mask_token_id(self) -> int:
        """A token id the target never needs to predict: its pad token, else the last id."""
        if self.pad_token_id is not None and 0 <= int(self.pad_token_id) < self.vocab_size:
            return int(self.pad_token_id)
        return self.vocab_size - 1


@dataclass
class LossConfig:
    """Weights of the DSpark objective (spec defaults: 0.1 CE, 0.9 TV, 1.0 confidence, decay 4)."""

    ce_weight: float = 0.1
    distill_weight: float = 0.9
    # "tv": L1 distance to the target distribution (the paper); "forward_kl": KL(p_t || p_d).
    divergence: str = "tv"
    confidence_weight: float = 1.0
    position_decay: float = 4.0
    # Predictions whose vocab-wide tensors are alive at once (the torch kernel: about 7 x rows x
    # vocab x 4 bytes, 1.4 GB at 1,024 rows and SmolLM2's 49,152 tokens; Triton: 3 x rows x vocab
    # x 2 bytes); fewer rows, less memory, more launches.
    chunk_rows: int = 1024
    # How the vocabulary-wide terms are computed (draft_models/loss_kernels.py): "auto" (Triton
    # on CUDA, else torch), "torch" or "triton". Same objective; only speed differs.
    kernel: str = "auto"

    def validate(self) -> None:
        if self.divergence not in DIVERGENCES:
            raise bad_value("loss.divergence", self.divergence, ", ".join(DIVERGENCES))
        for name in ("ce_weight", "distill_weight", "confidence_weight"):
            if getattr(self, name) < 0:
                raise bad_value(f"loss.{name}", getattr(self, name), "a weight >= 0")
        if self.position_decay <= 0:
            raise bad_value("loss.position_decay", self.position_decay, "a number > 0")
        if self.chunk_rows < 1:
            raise bad_value("loss.chunk_rows", self.chunk_rows, "an integer >= 1")
        if self.kernel not in LOSS_KERNELS:
            raise bad_value("loss.kernel", self.kernel, ", ".join(LOSS_KERNELS))


@dataclass
class DraftConfig:
    """Every ablation axis of a draft. `None` means "take it from the target" at resolve()."""

    arch: str = "dspark"
    num_layers: int = 5
    block_size: int = 7
    target_layer_ids: list[int] | None = None
    num_target_layer_ids: int | None = None  # how many ids the default rule picks; None: num_layers
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    rms_norm_eps: float | None = None
    rope: str = "full"
    partial_rotary_factor: float = 0.5
    rope_theta: float | None = None
    attention: str = "qwen3"
    sliding_window: int | None = None
    # ling3_mla only; None takes the target's MLA shape (or a Ling-like default).
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    sequential_head: str = "markov"
    markov_rank: int = 256
    confidence_head: bool = True
    # The confidence head reads detached backbone and Markov features, so its loss never moves
    # the draft, and each of its tensors' gradient is clipped to confidence_clip per micro-batch
    # on its own (speculators #757 measured +0.38 accept length; #848/#877 show it disputed).
    confidence_detach: bool = False
    confidence_clip: float = 1.0
    # None: a training run takes the target tokenizer's reserved special token
    # (splitserve.target.models.resolve_draft); resolve() alone, the target's pad token
    mask_token_id: int | None = None
    # A pruned draft vocabulary (draft_models/vocab.py): the draft predicts only the K most
    # frequent target tokens of the training answers, through its own LM head [K, H]. 0 or
    # None: the target's whole vocabulary through the target's frozen LM head.
    draft_vocab_size: int | None = None
    # The slot convention (SGLang's and speculators' `sample_from_anchor`), for architectures
    # that take either (DSpark): true, slot 0 (the anchor) predicts anchor + 1 (DeepSpec's);
    # false, the block is the anchor + gamma masks and slots 1..gamma predict (speculators'
    # DFlash-style option). None: the architecture's own (DSpark: true).
    sample_from_anchor: bool | None = None
    loss: LossConfig = field(default_factory=LossConfig)

    @classmethod
    def for_arch(cls, arch: str, **overrides: Any) -> DraftConfig:
        """The defaults of architecture `arch` (its registered `defaults` over the dataclass
        defaults), then `overrides`."""
        return load_draft_config({"arch": arch, **overrides})

    # ----- derived facts -----
    @property
    def samples_from_anchor(self) -> bool:
        """The slot convention in effect: slot 0 (the anchor) predicts anchor + 1 (DSpark's
        default), or the anchor feeds slots 1..gamma, which predict (DFlash, EAGLE-3, DSpark
        with `sample_from_anchor=false`). Every reader of slots asks this, nothing else."""
        if self.sample_from_anchor is not None:
            return self.sample_from_anchor
        return get_arch(self.arch).samples_from_anchor

    @property
    def num_slots(self) -> int:
        """Input slots per block: gamma when sampling from the anchor, else anchor + gamma masks."""
        return self.block_size if self.samples_from_anchor else self.block_size + 1

    @property
    def pruned_vocab(self) -> bool:
        """The draft predicts a pruned vocabulary (`draft_vocab_size` K > 0)."""
        return bool(self.draft_vocab_size)

    @property
    def rotary_fraction(self) -> float:
        if self.rope == "none":
            return 0.0
        return self.partial_rotary_factor if self.rope == "partial" else 1.0

    # ----- resolution -----
    def resolve(self, target: TargetSpec) -> DraftConfig:
        """Return a copy with every target-derived field filled in, validated against `target`."""
        self._validate_choices()
        mla = self.attention == "ling3_mla"
        filled = dataclasses.replace(
            self,
            hidden_size=self.hidden_size or target.hidden_size,
            num_attention_heads=self.num_attention_heads or target.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads or target.num_key_value_heads,
            head_dim=self.head_dim or target.head_dim,
            intermediate_size=self.intermediate_size or target.intermediate_size,
            rms_norm_eps=self.rms_norm_eps
            if self.rms_norm_eps is not None
            else target.rms_norm_eps,
            rope_theta=self.rope_theta if self.rope_theta is not None else target.rope_theta,
            mask_token_id=(
                self.mask_token_id
                if self.mask_token_id is not None
                else target.default_mask_token_id
            ),
            target_layer_ids=list(
                self.target_layer_ids
                if self.target_layer_ids is not None
                else dflash_layer_ids(
                    target.num_layers, self.num_target_layer_ids or self.num_layers
                )
            ),
            kv_lora_rank=(self.kv_lora_rank or target.kv_lora_rank or 512)
            if mla
            else self.kv_lora_rank,
            qk_nope_head_dim=(self.qk_nope_head_dim or target.qk_nope_head_dim or 128)
            if mla
            else None,
            qk_rope_head_dim=(self.qk_rope_head_dim or target.qk_rope_head_dim or 64)
            if mla
            else None,
            v_head_dim=(self.v_head_dim or target.v_head_dim or 128) if mla else None,
            draft_vocab_size=self.draft_vocab_size or None,
        )
        filled._validate_against(target)
        return filled

    def _validate_choices(self) -> None:
        arch = get_arch(self.arch)
        for name, allowed in (
            ("rope", ROPES),
            ("attention", ATTENTIONS),
            ("sequential_head", SEQUENTIAL_HEADS),
        ):
            if getattr(self, name) not in allowed:
                raise bad_value(name, getattr(self, name), ", ".join(allowed))
        if self.block_size < 2:
            raise bad_value("block_size", self.block_size, "an integer >= 2 (gamma)")
        if self.mask_token_id is not None and self.mask_token_id < 0:
            allowed = "null (the target tokenizer's reserved token) or an id >= 0"
            raise bad_value("mask_token_id", self.mask_token_id, allowed)
        if self.num_layers < 1:
            raise bad_value("num_layers", self.num_layers, "an integer >= 1")
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise bad_value(
                "partial_rotary_factor", self.partial_rotary_factor, "a number in (0, 1]"
            )
        if self.sequential_head != "none" and self.markov_rank < 1:
            raise bad_value(
                "markov_rank", self.markov_rank, "an integer >= 1 when a sequential head is used"
            )
        if self.confidence_detach and not self.confidence_head:
            raise bad_value("confidence_detach", True, "false when confidence_head is false")
        if self.confidence_clip <= 0:
            raise bad_value("confidence_clip", self.confidence_clip, "a number > 0")
        if self.draft_vocab_size is not None and self.draft_vocab_size < 0:
            raise bad_value("draft_vocab_size", self.draft_vocab_size, "0, null or K > 0")
        if self.pruned_vocab and not arch.pruned_vocab:
            raise bad_value(
                "draft_vocab_size",
                self.draft_vocab_size,
                f"0 or null for arch={self.arch} (a pruned draft vocabulary is implemented for "
                f"{', '.join(n for n in arch_names() if get_arch(n).pruned_vocab) or 'none'})",
            )
        fixed = arch.samples_from_anchor
        if not arch.any_slot_convention and self.sample_from_anchor not in (None, fixed):
            raise bad_value(
                "sample_from_anchor",
                self.sample_from_anchor,
                f"null or {str(fixed).lower()} for arch={self.arch} (its slot convention is "
                "fixed; DSpark takes either)",
            )
        if arch.check is not None:
            arch.check(self)
        if self.sliding_window is not None and self.sliding_window < self.block_size:
            raise bad_value(
                "sliding_window",
                self.sliding_window,
                f"null or an integer >= block_size ({self.block_size})",
            )
        self.loss.validate()

    def _validate_against(self, target: TargetSpec) -> None:
        if self.hidden_size != target.hidden_size:
            raise bad_value(
                "hidden_size",
                self.hidden_size,
                f"the target hidden size {target.hidden_size}: the draft reuses the target's "
                "embedding and LM head, and its fusion layer maps target states to this width",
            )
        ids = self.target_layer_ids
        top = target.max_capture_id
        allowed = (
            f"strictly increasing ids in [-1, {top}] (-1: the embedding output; i: the output of "
            f"decoder layer i). {target.capture_rule}"
        )
        if not ids or not all(isinstance(i, int) and -1 <= i <= top for i in ids):
            raise bad_value("target_layer_ids", ids, allowed)
        if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
            raise bad_value("target_layer_ids", ids, allowed)
        if not 0 <= self.mask_token_id < target.vocab_size:
            raise bad_value(
                "mask_token_id", self.mask_token_id, f"an id in [0, {target.vocab_size - 1}]"
            )
        if self.pruned_vocab:
            check_size(self.draft_vocab_size, target.vocab_size, self.block_size)
        if self.num_attention_heads % self.num_key_value_heads:
            raise bad_value(
                "num_key_value_heads",
                self.num_key_value_heads,
                f"a divisor of num_attention_heads={self.num_attention_heads}",
            )
        if self.attention == "qwen3":
            rot = int(self.head_dim * self.rotary_fraction)
            if self.rope != "none" and (rot < 2 or rot % 2):
                raise bad_value(
                    "partial_rotary_factor",
                    self.partial_rotary_factor,
                    f"a factor giving an even rotary width >= 2 of head_dim={self.head_dim}",
                )
        else:
            if self.qk_rope_head_dim % 2:
                raise bad_value("qk_rope_head_dim", self.qk_rope_head_dim, "an even integer")


def load_draft_config(node: Any, where: str = "draft") -> DraftConfig:
    """A dict / DictConfig -> DraftConfig: dataclass defaults, then the registered defaults of the
    node's architecture, then the node itself (unknown keys raise ValueError naming them)."""
    arch = (node or {}).get("arch", DraftConfig.arch)
    return load_dataclass(DraftConfig, node, where, base=get_arch(arch).defaults)


def store_hydra_defaults(conf_dir: str | None = None) -> None:
    """Give Hydra one `draft/<arch>_defaults` node per registered architecture (DraftConfig's
    defaults under that architecture's registered ones), so `conf/draft/<arch>.yaml` names its
    defaults instead of repeating them and every field stays overridable (`draft.rope=partial`);
    and a `draft/<arch>` option for every architecture without such a file in `conf_dir`
    (plugins), so `draft=<arch>` selects it too. (Hydra refuses a stored node of the same name as
    a file, hence the check.)"""
    from pathlib import Path

    from hydra.core.config_store import ConfigStore

    files = {p.stem for p in (Path(conf_dir) / "draft").glob("*.yaml")} if conf_dir else set()
    store = ConfigStore.instance()
    for name in arch_names():
        store.store(group="draft", name=f"{name}_defaults", node=DraftConfig.for_arch(name))
        if name not in files:
            store.store(group="draft", name=name, node={"defaults": [f"{name}_defaults", "_self_"]})
