"""One table of what the project knows about each target model type (HF `model_type`).

Three places depend on a target's family: which of its layers SGLang can capture (draft config
resolution and the `sglang` backend), whether the static runtime has a forward for it
(splitserve.target.runtime.static_llama) and which SGLang class serves a DSpark draft for it
(export). They read this table, so a new family is one `register_family(...)` (a plugin may add
one) rather than an edit in each. A type not in the table gets `family()`'s default: the `hf`
path only, with the static runtime's reason for refusing it.
"""

from __future__ import annotations

from dataclasses import dataclass

QWEN3_DSPARK = "Qwen3DSparkModel"  # SGLang's DSpark draft class for targets without Ling specifics
LING_DSPARK = "LingDSparkModel"

# Why the static runtime refuses a type nobody has checked against StaticLlama's forward.
UNCHECKED = (
    "StaticLlama implements only Llama's layers (q/k/v/o attention, NeoX RoPE, a gated MLP, no "
    "sliding window) and this model type is not registered as having them "
    "(draft_models.families.register_family)"
)


@dataclass(frozen=True)
class TargetFamily:
    """What the project knows about one target model type.

    - `captures_final_layer`: SGLang 0.5.23's model class captures DSpark states after layer i
      itself (BailingMoeV3ForCausalLM.set_dspark_layers_to_capture, the final layer through its
      final norm); other classes capture "before layer i + 1", which never happens for the last
      layer. Bounds a draft's target_layer_ids, and the `sglang` backend needs it (the final
      normed state comes from the last layer's capture).
    - `static_runtime`: the static runtime (StaticLlama: a static KV cache, CUDA graphs) has this
      family's forward; else `refusal` says why it has not.
    - `dspark_class`: the SGLang class that serves a DSpark draft for this target (export).
    - `export_notes`: what serving a draft for this family needs to know beyond the class.
    """

    model_type: str
    captures_final_layer: bool = False
    static_runtime: bool = False
    refusal: str = ""  # why the static runtime refuses it; default: UNCHECKED
    dspark_class: str = QWEN3_DSPARK
    export_notes: str = ""

    def __post_init__(self) -> None:
        if not self.static_runtime and not self.refusal:
            object.__setattr__(self, "refusal", UNCHECKED)  # frozen: set once, here

    def max_capture_id(self, num_layers: int) -> int:
        """The deepest layer whose output SGLang 0.5.23 can capture for DSpark on this target."""
        last = num_layers - 1
        return last if self.captures_final_layer else last - 1

    def capture_rule(self, num_layers: int) -> str:
        """Why `max_capture_id` is what it is, for error messages."""
        if self.captures_final_layer:
            return f"SGLang's {self.model_type} model captures after each layer, the last included."
        return (
            f"SGLang captures a {self.model_type} layer's output when the next layer starts, so "
            f"the last layer ({num_layers - 1}) is never captured."
        )


_LING_NOTES = "Ling (bailing) target: the draft is served as LingDSparkModel, in bf16 for Ling-3"
_MOE = (
    "its mixture-of-experts MLP has no static forward (StaticLlama writes Llama's gated MLP only)"
)

FAMILIES: dict[str, TargetFamily] = {
    f.model_type: f
    for f in (
        TargetFamily(
            "llama",
            static_runtime=True,
            export_notes="served as Qwen3DSparkModel; the last layer is never a capture id",
        ),
        TargetFamily(
            "bailing_hybrid",
            captures_final_layer=True,
            refusal=(
                "its KDA linear-attention and MLA layers have no static forward (StaticLlama "
                "writes Llama's attention over a key/value cache only)"
            ),
            dspark_class=LING_DSPARK,
            export_notes=_LING_NOTES,
        ),
        TargetFamily(
            "bailing_moe", refusal=_MOE, dspark_class=LING_DSPARK, export_notes=_LING_NOTES
        ),
        TargetFamily(
            "bailing_moe_v2", refusal=_MOE, dspark_class=LING_DSPARK, export_notes=_LING_NOTES
        ),
        TargetFamily(
            "bailing_moe_v3",
            captures_final_layer=True,
            refusal=_MOE,
            dspark_class=LING_DSPARK,
            export_notes=_LING_NOTES,
        ),
    )
}


def family(model_type: str) -> TargetFamily:
    """The registered family of `model_type`, else the default: hf only, nothing captured past
    layer N-2, served as Qwen3DSparkModel."""
    return FAMILIES.get(model_type) or TargetFamily(model_type)


def register_family(fam: TargetFamily, *, replace: bool = False) -> TargetFamily:
    """Add `fam` to the table; a second registration of a type is an error unless `replace`."""
    if fam.model_type in FAMILIES and not replace:
        raise ValueError(f"target family {fam.model_type!r} is already registered")
    FAMILIES[fam.model_type] = fam
    return fam


def unregister_family(model_type: str) -> None:
    FAMILIES.pop(model_type, None)


def static_types() -> tuple[str, ...]:
    """Model types the static runtime runs (for its refusal messages)."""
    return tuple(t for t, f in FAMILIES.items() if f.static_runtime)


def final_capture_types() -> tuple[str, ...]:
    """Model types whose last layer SGLang captures (for the `sglang` backend's refusal)."""
    return tuple(t for t, f in FAMILIES.items() if f.captures_final_layer)
