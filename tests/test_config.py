import dataclasses
from pathlib import Path

import pytest
import torch
import yaml
from conftest import llama_config, random_sample, tiny_config, tiny_draft, tiny_head, tiny_target
from transformers import BailingHybridConfig

from draft_models import (
    DraftConfig,
    LossConfig,
    TargetSpec,
    build_draft,
    dflash_layer_ids,
    pack_sequences,
)
from draft_models.config import load_draft_config, store_hydra_defaults
from draft_models.config_io import load_dataclass

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_dflash_rule_reproduces_deepspec_qwen3_4b_layers():
    assert dflash_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert dflash_layer_ids(30, 1) == [15]


def test_resolve_fills_target_defaults():
    cfg = DraftConfig(num_layers=3).resolve(tiny_target())
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (
        32,
        4,
        2,
        8,
    )
    assert cfg.target_layer_ids == dflash_layer_ids(8, 3)
    assert cfg.mask_token_id == tiny_target().vocab_size - 1


@pytest.mark.parametrize(
    "overrides,field,allowed",
    [
        (dict(target_layer_ids=[1, 8]), "target_layer_ids", "[-1, 6]"),
        (dict(target_layer_ids=[-2]), "target_layer_ids", "[-1, 6]"),
        # the last layer of a llama target: SGLang never captures it (a check added for issue 11)
        (dict(target_layer_ids=[1, 7]), "target_layer_ids", "the last layer (7) is never captured"),
        (dict(target_layer_ids=[4, 1]), "target_layer_ids", "strictly increasing"),
        (dict(block_size=1), "block_size", ">= 2"),
        (dict(rope="yarn"), "rope", "full, partial, interleaved, none"),
        (dict(attention="mha"), "attention", "qwen3, ling3_mla"),
        (dict(arch="medusa"), "arch", "dspark, dflash, eagle3"),
        (dict(sequential_head="lstm"), "sequential_head", "markov, gated, rnn, none"),
        (dict(hidden_size=48), "hidden_size", "target hidden size 32"),
        (dict(mask_token_id=97), "mask_token_id", "[0, 96]"),
        (dict(mask_token_id=-1), "mask_token_id", "null (the target tokenizer's reserved token)"),
        (dict(arch="dflash"), "sequential_head", "'none' for arch=dflash"),
        (dict(num_key_value_heads=3), "num_key_value_heads", "divisor"),
        (dict(sliding_window=2), "sliding_window", ">= block_size"),
        (
            dict(
                arch="dflash",
                sequential_head="none",
                confidence_head=False,
                sample_from_anchor=True,
            ),
            "sample_from_anchor",
            "null or false for arch=dflash",
        ),  # fmt: skip
        (dict(loss=LossConfig(divergence="js")), "loss.divergence", "tv, forward_kl"),
    ],
)
def test_bad_configuration_names_field_and_allowed_values(overrides, field, allowed):
    with pytest.raises(ValueError) as err:
        DraftConfig(**overrides).resolve(tiny_target())
    assert f"draft.{field}=" in str(err.value) and allowed in str(err.value)


def test_target_hidden_size_not_matching_the_fusion_layer_is_refused():
    draft = tiny_draft("dspark")  # fusion layer expects 3 target layers x 32
    sample = random_sample(20, num_features=2)  # a target capturing 2 layers
    batch = pack_sequences(
        [sample], num_anchors=3, block_size=4, num_slots=4, mask_token_id=0, seed=0
    )
    with pytest.raises(ValueError, match=r"len\(target_layer_ids\)=3 x hidden_size=32"):
        draft(batch)


def test_head_of_another_width_is_refused():
    head = tiny_head()
    wide = type(head)(torch.zeros(97, 48), torch.zeros(97, 48))
    with pytest.raises(ValueError, match="hidden_size"):
        build_draft(tiny_config(), tiny_target(), wide)


def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= _keys(v, prefix + k + ".")
    return out


def _fields(cls, prefix=""):
    out = set()
    for f in dataclasses.fields(cls):
        out.add(prefix + f.name)
        if dataclasses.is_dataclass(
            f.default_factory if f.default_factory is not dataclasses.MISSING else None
        ):
            out |= _fields(f.default_factory, prefix + f.name + ".")
    return out


def compose_draft(name=None):
    """The draft node Hydra composes for `draft=<name>` (the default group option if None)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    store_hydra_defaults(str(CONF))
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("summary", overrides=[f"draft={name}"] if name else [])
    return OmegaConf.to_container(cfg.draft)


@pytest.mark.parametrize("name", ["dspark", "dflash", "eagle3"])
def test_draft_yaml_mirrors_the_dataclass_and_resolves(name):
    data = compose_draft(name)
    # every field is there, so every field is overridable
    assert _keys(data) == _fields(DraftConfig)
    cfg = load_draft_config(data)
    assert cfg.arch == name and cfg == DraftConfig.for_arch(name)
    cfg.resolve(tiny_target())
    # the YAML names its architecture's defaults instead of repeating them
    assert yaml.safe_load((CONF / "draft" / f"{name}.yaml").read_text()) == {
        "defaults": [f"{name}_defaults", "_self_"]
    }


def test_dspark_takes_either_slot_convention_from_the_command_line():
    """draft.sample_from_anchor=false: a DSpark of anchor + gamma mask slots (gamma proposals);
    null and true are DSpark's own convention; DFlash and EAGLE-3 accept only theirs (false)."""
    from test_training import compose_cfg

    node = compose_cfg(["draft.sample_from_anchor=false"]).draft
    cfg = load_draft_config(node).resolve(tiny_target())
    assert cfg.sample_from_anchor is False and not cfg.samples_from_anchor
    assert (cfg.block_size, cfg.num_slots) == (7, 8)
    for value in (None, True):
        own = DraftConfig(sample_from_anchor=value).resolve(tiny_target())
        assert own.samples_from_anchor and own.num_slots == own.block_size
    for arch in ("dflash", "eagle3"):
        fixed = DraftConfig.for_arch(arch, sample_from_anchor=False).resolve(tiny_target())
        assert fixed.num_slots == fixed.block_size + 1


def test_default_yaml_equals_dataclass_defaults():
    assert load_draft_config(compose_draft()) == DraftConfig()


def test_run_yaml_mirrors_keep_train_state_and_the_null_mask_token():
    """conf/config.yaml's train section has every TrainConfig field (keep_train_state included,
    checked >= 1); the mask token defaults to null in both places (the tokenizer's, at prepare)."""
    from test_training import compose_cfg

    from splitserve.config import TrainConfig, load_run_config

    conf = yaml.safe_load((CONF / "config.yaml").read_text())
    assert set(conf["train"]) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert conf["train"]["keep_train_state"] == TrainConfig().keep_train_state == 2
    assert conf["draft"]["mask_token_id"] is None and DraftConfig().mask_token_id is None
    assert load_run_config(compose_cfg(["train.keep_train_state=1"])).train.keep_train_state == 1
    with pytest.raises(ValueError, match=r"train.keep_train_state=0 is invalid; allowed: an int"):
        load_run_config(compose_cfg(["train.keep_train_state=0"]))


@pytest.mark.parametrize(
    "setting,field,allowed",
    [
        ("{temperature: 1.0, top_p: 0.0}", "top_p=0.0", "a number in \\(0, 1\\]"),
        ("{temperature: 1.0, top_p: 1.5}", "top_p=1.5", "a number in \\(0, 1\\]"),
        ("{temperature: -1.0, top_p: 0.9}", "temperature=-1.0", "a number >= 0"),
    ],
)
def test_a_bad_sampling_setting_is_named(setting, field, allowed):
    """A sampling setting the sampler cannot draw from (no nucleus, a negative temperature)
    is refused by its index before any target loads."""
    from test_training import compose_cfg

    from splitserve.config import load_run_config

    overrides = [f"target.sampling=[{{temperature: 0.0, top_p: 1.0}},{setting}]"]
    with pytest.raises(
        ValueError, match=rf"target.sampling\[1\].{field} is invalid; allowed: {allowed}"
    ):
        load_run_config(compose_cfg(overrides))


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match=r"draft\.rope_scaling"):
        load_dataclass(DraftConfig, {"rope_scaling": 2.0}, "draft")
    with pytest.raises(ValueError, match=r"draft\.loss\.tv_weight"):
        load_dataclass(DraftConfig, {"loss": {"tv_weight": 1.0}}, "draft")


def test_target_spec_from_real_hf_configs():
    llama = llama_config(
        hidden_size=64,
        num_hidden_layers=6,
        intermediate_size=128,
        vocab_size=300,
        tie_word_embeddings=True,
    )
    spec = TargetSpec.from_hf_config(llama)
    assert (spec.hidden_size, spec.num_layers, spec.head_dim, spec.tie_word_embeddings) == (
        64,
        6,
        16,
        True,
    )
    ling = TargetSpec.from_hf_config(BailingHybridConfig())
    assert (ling.hidden_size, ling.num_layers, ling.vocab_size) == (2560, 42, 157184)
    assert (ling.kv_lora_rank, ling.qk_rope_head_dim, ling.rope_theta) == (512, 64, 6e6)
    mla = DraftConfig(attention="ling3_mla", num_layers=1).resolve(ling)
    assert (mla.kv_lora_rank, mla.qk_nope_head_dim, mla.v_head_dim) == (512, 128, 128)


@pytest.mark.parametrize("shape", ["smollm2_135m", "ling3_flash"])
def test_target_shape_presets_load(shape):
    data = yaml.safe_load((CONF / "target_shape" / f"{shape}.yaml").read_text())
    spec = load_dataclass(TargetSpec, data, "target_shape")
    DraftConfig().resolve(spec)


def test_feature_layer_ids_follow_what_sglang_captures():
    """-1 (the embedding output) is a valid feature layer, as in DeepSpec; the last layer is valid
    only for targets whose SGLang class captures after a layer itself (Ling / bailing_hybrid)."""
    assert DraftConfig(target_layer_ids=[-1, 3]).resolve(tiny_target()).target_layer_ids == [-1, 3]
    ling = dataclasses.replace(tiny_target(), model_type="bailing_hybrid")
    assert DraftConfig(target_layer_ids=[2, 7]).resolve(ling).target_layer_ids == [2, 7]
    with pytest.raises(ValueError, match=r"in \[-1, 6\].*last layer \(7\) is never captured"):
        DraftConfig(target_layer_ids=[2, 7]).resolve(tiny_target())


def test_compiled_layers_are_refused_for_a_draft_without_regions():
    from test_training import compose_cfg

    from splitserve.config import load_run_config

    assert load_run_config(compose_cfg(["train.compile_layers=true"])).train.compile_layers
    # the default (null): on a GPU only, and a draft without regions is not refused for it
    from splitserve.trainer import compile_layers_here

    auto = load_run_config(compose_cfg(["draft=eagle3", "draft.num_layers=1"])).train
    assert auto.compile_layers is None
    assert compile_layers_here(auto, torch.device("cuda"))
    assert not compile_layers_here(auto, torch.device("cpu"))
    off = load_run_config(compose_cfg(["train.compile_layers=false"])).train
    assert not compile_layers_here(off, torch.device("cuda"))
    with pytest.raises(ValueError, match="eagle3's layers have no compiled regions"):
        load_run_config(compose_cfg(["draft=eagle3", "train.compile_layers=true"]))
