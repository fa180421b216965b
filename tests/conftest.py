"""Shared builders: a tiny target shape, its frozen head, drafts of every kind, real samples."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from draft_models import DraftConfig, FrozenTargetHead, SequenceSample, TargetSpec, build_draft

VOCAB, HIDDEN = 97, 32


def tiny_target() -> TargetSpec:
    return TargetSpec(
        model_type="llama", hidden_size=HIDDEN, num_layers=8, vocab_size=VOCAB,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
    )


def tiny_head(seed: int = 0) -> FrozenTargetHead:
    g = torch.Generator().manual_seed(seed)
    return FrozenTargetHead(torch.randn(VOCAB, HIDDEN, generator=g) * 0.5, torch.randn(VOCAB, HIDDEN, generator=g) * 0.5)


# Every draft kind the ablations use, as DraftConfig overrides for the tiny target.
VARIANTS = {
    "dspark": dict(),
    "dspark_rnn": dict(sequential_head="rnn"),
    "dspark_mla": dict(attention="ling3_mla", kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                       rope="interleaved"),
    "dspark_window": dict(sliding_window=6, rope="partial"),
    "dflash": dict(arch="dflash", sequential_head="none", confidence_head=False),
    "eagle3": dict(arch="eagle3", num_layers=1, sequential_head="none", confidence_head=False),
}


def tiny_config(variant: str = "dspark", **overrides) -> DraftConfig:
    base = dict(num_layers=2, block_size=4, markov_rank=8, target_layer_ids=[1, 4, 6])
    base.update(VARIANTS[variant])
    base.update(overrides)
    return DraftConfig(**base)


def tiny_draft(variant: str = "dspark", seed: int = 0, head: FrozenTargetHead | None = None, **overrides):
    torch.manual_seed(seed)
    return build_draft(tiny_config(variant, **overrides), tiny_target(), head or tiny_head())


def random_sample(length: int, num_features: int = 3, seed: int = 0, assistant_from: int = 3) -> SequenceSample:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(length, dtype=torch.bool)
    mask[assistant_from:] = True
    return SequenceSample(
        input_ids=torch.randint(0, VOCAB, (length,), generator=g),
        loss_mask=mask,
        aux_hidden=torch.randn(length, num_features * HIDDEN, generator=g),
        final_hidden=torch.randn(length, HIDDEN, generator=g),
    )


def replace_sample(sample: SequenceSample, **fields) -> SequenceSample:
    return dataclasses.replace(sample, **fields)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    yield
