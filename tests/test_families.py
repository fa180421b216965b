"""The table of target families (draft_models.families) is what the static runtime, draft config
resolution and export act on: a refusal names the family's reason, llama runs static, Ling targets
export as LingDSparkModel, and the final-layer capture rule is the one resolution enforces."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest
import torch
from conftest import llama_config, tiny_target
from transformers import AutoModelForCausalLM, BailingHybridConfig

from draft_models import DraftConfig, get_arch
from draft_models.families import (
    FAMILIES,
    UNCHECKED,
    TargetFamily,
    family,
    final_capture_types,
    register_family,
    static_types,
    unregister_family,
)
from splitserve.target.runtime import EagerEngine, StaticEngine, make_engine
from splitserve.target.runtime.static_model import StaticDecoder, unsupported_reason


def test_static_refusal_names_the_reason_from_the_table():
    from splitserve.target.embedded import LING3_MINI

    hybrid = AutoModelForCausalLM.from_config(BailingHybridConfig(**LING3_MINI, pad_token_id=0))
    reason = FAMILIES["bailing_hybrid"].refusal
    assert "KDA" in reason and not FAMILIES["bailing_hybrid"].static_runtime
    with pytest.raises(ValueError, match=r"runtime=static runs llama, .*: " + re.escape(reason)):
        make_engine(hybrid, [1], "static")
    with pytest.raises(
        ValueError, match=r"the static runtime runs llama, .*: " + re.escape(reason)
    ):
        StaticDecoder(hybrid, max_rows=1, max_len=8, capture_ids=[1])
    assert isinstance(make_engine(hybrid, [1], "auto"), EagerEngine)
    # a type nobody registered: the default family's reason
    why = unsupported_reason(SimpleNamespace(model_type="phi3"))
    assert why.endswith(f"this one is phi3: {UNCHECKED}")


def test_llama_runs_on_the_static_runtime():
    assert family("llama").static_runtime and "llama" in static_types()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(llama_config()).double().eval()
    assert unsupported_reason(model.config) is None
    assert isinstance(make_engine(model, [1], "static"), StaticEngine)


def test_unknown_types_get_the_hf_only_default_and_plugins_can_register():
    unknown = family("phi3")
    assert "phi3" not in FAMILIES  # looking a type up registers nothing
    assert (unknown.static_runtime, unknown.captures_final_layer) == (False, False)
    assert (unknown.refusal, unknown.dspark_class) == (UNCHECKED, "Qwen3DSparkModel")
    # a family the static runtime refuses always says why; one it runs needs no refusal
    assert TargetFamily("plugin_llama").refusal == UNCHECKED
    assert TargetFamily("plugin_llama", static_runtime=True).refusal == ""
    with pytest.raises(ValueError, match="'llama' is already registered"):
        register_family(TargetFamily("llama", static_runtime=True))
    register_family(TargetFamily("plugin_llama", static_runtime=True))
    try:
        assert unsupported_reason(SimpleNamespace(model_type="plugin_llama")) is None
        assert unsupported_reason(SimpleNamespace(model_type="phi3")).startswith(
            "runs llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, plugin_llama targets"
        )
    finally:
        unregister_family("plugin_llama")
    assert "plugin_llama" not in static_types()


@pytest.mark.parametrize(
    "model_type, served_as",
    [
        ("bailing_hybrid", "LingDSparkModel"),
        ("bailing_moe", "LingDSparkModel"),
        ("bailing_moe_v2", "LingDSparkModel"),
        ("bailing_moe_v3", "LingDSparkModel"),
        ("llama", "Qwen3DSparkModel"),
        ("qwen3", "Qwen3DSparkModel"),  # unregistered: the default
    ],
)
def test_export_serves_ling_targets_with_the_ling_class(model_type, served_as):
    target = dataclasses.replace(tiny_target(), model_type=model_type)
    cfg = DraftConfig(target_layer_ids=[1, 5]).resolve(target)
    assert get_arch("dspark").export(cfg, target)["architectures"] == [served_as]


@pytest.mark.parametrize("model_type", [*FAMILIES, "qwen3"])
def test_final_layer_capture_rule_is_what_resolution_enforces(model_type):
    """Layer N-1 resolves exactly for the families that capture it; N-2 always does."""
    target = dataclasses.replace(tiny_target(), model_type=model_type)
    last = target.num_layers - 1
    fam = family(model_type)
    assert target.max_capture_id == fam.max_capture_id(target.num_layers)
    assert DraftConfig(target_layer_ids=[1, last - 1]).resolve(target).target_layer_ids[-1] == 6
    if fam.captures_final_layer:
        assert model_type in final_capture_types()
        assert DraftConfig(target_layer_ids=[1, last]).resolve(target).target_layer_ids == [1, 7]
    else:
        rule = re.escape(fam.capture_rule(target.num_layers))
        with pytest.raises(ValueError, match=rf"in \[-1, 6\].*{rule}"):
            DraftConfig(target_layer_ids=[1, last]).resolve(target)
    assert final_capture_types() == ("bailing_hybrid", "bailing_moe_v3")


def test_the_guide_carries_the_table_as_it_is():
    from pathlib import Path

    from draft_models.families import families_table

    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    assert families_table() in guide
