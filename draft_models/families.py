"""One table of what the project knows about each target model type (HF `model_type`).

Three places depend on a target's family: which of its layers SGLang can capture (draft config
resolution and the `sglang` backend), whether the static runtime has a forward for it
(splitserve.target.runtime.static_model) and which SGLang class serves a DSpark draft for it
(export). They read this table, so a new family is one `register_family(...)` (a plugin may add
one) rather than an edit in each. A type not in the table gets `family()`'s default: the `hf`
path only, with the static runtime's reason for refusing it.
"""

from __future__ import annotations

from dataclasses import dataclass

QWEN3_DSPARK = "Qwen3DSparkModel"  # SGLang's DSpark draft class for targets without Ling specifics
LING_DSPARK = "LingDSparkModel"

# Why the static runtime refuses a type nobody has checked against StaticDecoder's forward.
UNCHECKED = (
    "StaticDecoder implements pre-norm decoder layers (q/k/v/o attention with optional biases, "
    "q/k norms and sliding windows, NeoX RoPE, a gated or top-k routed MLP) and this model type "
    "is not registered as having only those (draft_models.families.register_family)"
)


@dataclass(frozen=True)
class TargetFamily:
    """What the project knows about one target model type.

    - `captures_final_layer`: SGLang 0.5.23's model class captures DSpark states after layer i
      itself (BailingMoeV3ForCausalLM.set_dspark_layers_to_capture, the final layer through its
      final norm); other classes capture "before layer i + 1", which never happens for the last
      layer. Bounds a draft's target_layer_ids, and the `sglang` backend needs it (the final
      normed state comes from the last layer's capture).
    - `static_runtime`: the static runtime (StaticDecoder: a static KV cache, CUDA graphs) has
      this family's forward, checked against transformers in fp32 by tests/test_families.py;
      else `refusal` says why it has not. `unit_offset_norms`: its RMSNorms scale by (1 + w) in
      fp32 (Gemma), which the module's weights cannot tell apart from Llama's.
    - `dspark_class`: the SGLang class that serves a DSpark draft for this target (export).
    - `export_notes`: what serving a draft for this family needs to know beyond the class.
    """

    model_type: str
    captures_final_layer: bool = False
    static_runtime: bool = False
    unit_offset_norms: bool = False
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

    def paths(self) -> tuple[str, ...]:
        """The target backends that run this family: `hf` always; `static` where the static
        runtime has its forward; `sglang` where SGLang 0.5.23 captures its last layer (the
        backend takes the final normed state from there)."""
        return (
            "hf",
            *(("static",) if self.static_runtime else ()),
            *(("sglang",) if self.captures_final_layer else ()),
        )

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
    "its mixture-of-experts MLP (shared experts, grouped routing) has no static forward "
    "(StaticDecoder routes Qwen3-MoE's top-k experts only)"
)
_SERVED = "served as Qwen3DSparkModel; the last layer is never a capture id"

FAMILIES: dict[str, TargetFamily] = {
    f.model_type: f
    for f in (
        *(
            TargetFamily(t, static_runtime=True, export_notes=_SERVED)
            for t in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe")
        ),
        TargetFamily(
            "gemma3_text", static_runtime=True, unit_offset_norms=True, export_notes=_SERVED
        ),
        TargetFamily(
            "gemma3",
            refusal=(
                "the vision-language Gemma3ForConditionalGeneration wraps its text model; load "
                "the text model alone (Gemma3ForCausalLM, model_type gemma3_text), which runs "
                "statically"
            ),
            export_notes=_SERVED,
        ),
        TargetFamily(
            "bailing_hybrid",
            captures_final_layer=True,
            refusal=(
                "its KDA linear-attention and MLA layers have no static forward (StaticDecoder "
                "writes attention over a key/value cache only)"
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


def families_table() -> str:
    """The table as markdown (docs/guide.md carries it; tests/test_families.py keeps the two
    equal): per model type, the backends that run it, the deepest capture id and why the
    static runtime refuses it, if it does."""
    rows = [
        "| model type | backends | deepest capture id (N layers) | static runtime |",
        "|---|---|---|---|",
    ]
    for t, f in FAMILIES.items():
        static = "yes" if f.static_runtime else f"no: {f.refusal}"
        deepest = "N-1" if f.captures_final_layer else "N-2"
        rows.append(f"| `{t}` | {', '.join(f.paths())} | {deepest} | {static} |")
    rows.append(
        "| any other | hf | N-2 | no: not registered as having only the layers the static "
        "runtime implements |"
    )
    return "\n".join(rows)


def static_types() -> tuple[str, ...]:
    """Model types the static runtime runs (for its refusal messages)."""
    return tuple(t for t, f in FAMILIES.items() if f.static_runtime)


def final_capture_types() -> tuple[str, ...]:
    """Model types whose last layer SGLang captures (for the `sglang` backend's refusal)."""
    return tuple(t for t, f in FAMILIES.items() if f.captures_final_layer)
