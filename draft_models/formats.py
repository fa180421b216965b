"""The directory formats a DSpark draft is written in and read from.

- `sglang`: what SGLang 0.5.23's `--speculative-algorithm DSPARK` loads: a flat Qwen3-style
  config.json with the DSpark fields (the architecture's registered export mapping) and the
  draft's own weights; the embedding and LM head stay the target's.
- `hf`: DeepSpec's published layout: the target's own config.json with the same fields on top,
  and the weights with copies of the target's `embed_tokens.weight` and `lm_head.weight`.
- `speculators`: vLLM speculators' DSpark layout (0.9.0): `speculators_model_type: dspark`, the
  draft layers' config nested in `transformer_layer_config`, aux layer ids counting the embedding
  as 0 (our target_layer_ids + 1), `sample_from_anchor`, a `speculators_config` naming the
  verifier; the draft's own weights.

All three name the weights alike (`layers.*`, `fc`, `hidden_norm`, `norm`, `markov_head.*`,
`confidence_head.proj.*`) and record the slot convention in `sample_from_anchor`: true
(DeepSpec's, SGLang's default), slot k of [anchor, mask x (gamma-1)] predicts anchor + k + 1;
false (speculators' DFlash-style option), slot k of [anchor, mask x gamma] predicts anchor + k
and slot 0 is untrained. There are no weights to convert between them (each is trained for its
own targets); the convention says how a draft's outputs are read (DraftConfig.sample_from_anchor).
What `block_size` counts differs: in the flat layouts (SGLang, DeepSpec) it is gamma, the
proposals, either way (SGLang adds the anchor slot for false); in speculators' it is the block's
slots, gamma + 1 for false (its speculative_tokens = block_size - 1). What we write carries
`splitserve_draft_config` too, so reading it back is exact; a directory another tool wrote is
read from its own fields (`draft_config_of`), and what this project cannot run is refused with
the reason.

A pruned draft vocabulary (draft_models.vocab) travels in `hf` and `speculators` as speculators
stores it: `draft_vocab_size` K in the config, the weights `d2t` int64 [K], `t2d` bool [V] and
the draft's own `lm_head.weight` [K, H] (in `hf` in place of the target head's copy), Markov
`markov_w2` [K, r]. `sglang` refuses it (`SGLANG_PRUNED`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from .config import DraftConfig, TargetSpec, load_draft_config
from .heads import SEQUENTIAL_HEAD_CLASSES

FORMATS = ("sglang", "speculators", "hf")
SPECULATORS_VERSION = "0.9.0"  # the layout written (speculators' DSparkSpeculatorConfig)
TARGET_COPIES = ("embed_tokens.weight", "lm_head.weight")  # the hf layout's copies of the target's
DSPARK_CLASSES = ("Qwen3DSparkModel", "LingDSparkModel", "DSparkDraftModel")
_HEAD_OF_TYPE = {cls.sglang_type: name for name, cls in SEQUENTIAL_HEAD_CLASSES.items()}
VOCAB_MAPS = ("d2t", "t2d")  # a pruned vocabulary's maps among a draft's weights
SGLANG_PRUNED = (
    "a pruned draft vocabulary (draft_vocab_size {k} < the target's {v}) cannot be served by "
    "SGLang 0.5.23: its DSPARK draft projects through the target's LM head, biases the whole "
    "vocabulary (markov_w2 [V, r]) and has no d2t map; export --format speculators or hf"
)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is invalid; allowed: {', '.join(FORMATS)}")


def hf_config(sglang: dict, target_config: dict) -> dict:
    """DeepSpec's config.json: the target's config with the draft's fields on top."""
    return {**copy.deepcopy(target_config), **sglang}


def speculators_config(sglang: dict, target: TargetSpec, verifier: dict) -> dict:
    """speculators' DSparkSpeculatorConfig as its to_dict() writes it, from the SGLang mapping
    (which has already refused what no engine serves). `verifier`: {name_or_path,
    architectures} of the target."""
    if sglang["rope_parameters"].get("rope_dim") or not sglang["is_neox_style"]:
        raise ValueError(
            "speculators' DSpark layers apply the layer config's NeoX rotary to every head "
            "dimension: rope=partial and rope=interleaved have no field there"
        )
    if "sliding_window" in sglang:
        raise ValueError("sliding_window: speculators' DSpark draft layers attend in full")
    gamma, anchor = sglang["block_size"], sglang["sample_from_anchor"]
    layers = {
        "model_type": "qwen3",
        **{k: sglang[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                  "num_key_value_heads", "head_dim", "hidden_act",
                                  "rms_norm_eps", "attention_bias", "vocab_size",
                                  "max_position_embeddings", "rope_parameters",
                                  "num_hidden_layers", "layer_types", "tie_word_embeddings")},
    }  # fmt: skip
    return {
        "architectures": ["DSparkSpeculator"],
        "speculators_model_type": "dspark",
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {
            "algorithm": "dspark",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": gamma,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
        "transformer_layer_config": layers,
        "draft_vocab_size": sglang.get("draft_vocab_size", target.vocab_size),
        "block_size": speculators_block_size(gamma, anchor),
        "target_hidden_size": target.hidden_size,
        "aux_hidden_state_layer_ids": [i + 1 for i in sglang["target_layer_ids"]],
        "mask_token_id": sglang["mask_token_id"],
        "sliding_window_non_causal": False,
        "sample_from_anchor": anchor,
        "markov_rank": sglang["markov_rank"],
        "markov_head_type": sglang["markov_head_type"],
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "splitserve_draft_config": sglang["splitserve_draft_config"],
    }


def speculators_block_size(gamma: int, sample_from_anchor: bool) -> int:
    """speculators' `block_size` for gamma proposals: its blocks' slots, one more than gamma when
    the anchor does not predict (its speculative_tokens = block_size - 1 then)."""
    return gamma if sample_from_anchor else gamma + 1


def layout(config: dict) -> str:
    """`speculators` (nested) or `flat` (SGLang's and DeepSpec's fields at the top, SpecForge's
    under `dflash_config`) for a draft directory's config.json; ValueError when neither."""
    if config.get("speculators_model_type") is not None:
        return "speculators"
    if set(config.get("architectures") or ()) & set(DSPARK_CLASSES):
        return "flat"
    raise ValueError(
        "not a DSpark draft's config.json: no speculators_model_type and no architecture among "
        f"{', '.join(DSPARK_CLASSES)}"
    )


def draft_config_of(config: dict) -> DraftConfig:
    """The DraftConfig of a draft directory's config.json in any of the formats: ours exactly
    (`splitserve_draft_config`), another tool's from its fields; ValueError naming what this
    project cannot run."""
    if "splitserve_draft_config" in config:
        return load_draft_config(config["splitserve_draft_config"], "draft")
    if layout(config) == "speculators":
        return _from_speculators(config)
    fields = {**config, **(config.get("dflash_config") or {})}  # SpecForge nests its fields
    # SGLang's DSpark reads the convention at the top level only (get_dspark_sample_from_anchor)
    return _dspark_config(fields, fields, bool(config.get("sample_from_anchor", True)))


def _from_speculators(config: dict) -> DraftConfig:
    if config["speculators_model_type"] != "dspark":
        raise ValueError(f"speculators_model_type {config['speculators_model_type']!r}: not dspark")
    layers = config["transformer_layer_config"]
    ids = [i - 1 for i in config["aux_hidden_state_layer_ids"]]  # speculators counts embeddings
    anchor = bool(config.get("sample_from_anchor", True))  # DSparkSpeculatorConfig's default
    slots = int(config["block_size"])
    gamma = slots if anchor else slots - 1  # the inverse of speculators_block_size
    fields = {**config, "target_layer_ids": ids, "block_size": gamma}
    return _dspark_config(layers, fields, anchor)


def _dspark_config(layers: dict, fields: dict, sample_from_anchor: bool) -> DraftConfig:
    """A DSpark DraftConfig from Qwen3-style layer fields and DSpark fields (`block_size`:
    gamma, the proposals)."""
    head = fields.get("markov_head_type", "vanilla")
    if head not in _HEAD_OF_TYPE:
        raise ValueError(f"markov_head_type {head!r}; known: {', '.join(_HEAD_OF_TYPE)}")
    if fields.get("enable_confidence_head", True) and not fields.get(
        "confidence_head_with_markov", True
    ):
        raise ValueError("confidence_head_with_markov=false: SplitServe's head reads the Markov W1")
    rope: dict[str, Any] = layers.get("rope_parameters") or {}
    k, v = fields.get("draft_vocab_size"), layers.get("vocab_size")
    return DraftConfig(
        arch="dspark",
        num_layers=int(layers["num_hidden_layers"]),
        block_size=int(fields["block_size"]),
        target_layer_ids=[int(i) for i in fields["target_layer_ids"]],
        hidden_size=int(layers["hidden_size"]),
        num_attention_heads=int(layers["num_attention_heads"]),
        num_key_value_heads=int(layers["num_key_value_heads"]),
        head_dim=int(layers["head_dim"]),
        intermediate_size=int(layers["intermediate_size"]),
        rms_norm_eps=float(layers.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta", layers.get("rope_theta", 10000.0))),
        sequential_head=_HEAD_OF_TYPE[head],
        markov_rank=int(fields["markov_rank"]),
        confidence_head=bool(fields.get("enable_confidence_head", True)),
        mask_token_id=fields.get("mask_token_id"),
        draft_vocab_size=int(k) if k and v and int(k) < int(v) else None,
        sample_from_anchor=None if sample_from_anchor else False,  # None: DSpark's own, true
    )


def draft_weights_of(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The draft's own tensors of a directory's weights: a `model.` prefix dropped, the hf
    layout's copies of the target's embedding and LM head left out (the target's own are used),
    except a pruned draft's own `lm_head.weight` (its maps d2t / t2d are there)."""
    out = {k.removeprefix("model."): v for k, v in weights.items()}
    pruned = set(VOCAB_MAPS) <= set(out)
    return {
        k: v for k, v in out.items() if k not in TARGET_COPIES or (pruned and k == "lm_head.weight")
    }
