"""Drafts built from real transformers targets (tiny random configs), trained on their hidden
states."""

import pytest
import torch
from conftest import llama_config
from transformers import AutoModelForCausalLM, BailingHybridConfig

from draft_models import (
    DraftConfig,
    FrozenTargetHead,
    LossConfig,
    SequenceSample,
    TargetSpec,
    build_draft,
    distillation_loss,
    pack_sequences,
)


def target_samples(model, layer_ids, lengths, seed=0):
    """What a target worker produces: the outputs of the chosen decoder layers and the final normed
    hidden state (the LM head input)."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for n in lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, n), generator=g)
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
        hs = out.hidden_states  # [embeddings, layer 0 out, ..., final normed]
        final = hs[-1][0]
        torch.testing.assert_close(model.lm_head(final), out.logits[0], rtol=1e-4, atol=1e-4)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[n // 3 :] = True
        samples.append(
            SequenceSample(ids[0], mask, torch.cat([hs[i + 1][0] for i in layer_ids], -1), final)
        )
    return samples


def train_steps(target_model, draft_cfg, steps, lengths=(48, 64)):
    spec = TargetSpec.from_hf_config(target_model.config)
    head = FrozenTargetHead.from_hf_model(target_model)
    torch.manual_seed(0)
    draft = build_draft(draft_cfg, spec, head)
    samples = target_samples(target_model, draft.cfg.target_layer_ids, lengths)
    batch = pack_sequences(
        samples,
        num_anchors=8,
        block_size=draft.cfg.block_size,
        num_slots=draft.cfg.num_slots,
        mask_token_id=draft.cfg.mask_token_id,
        seed=0,
    )
    opt = torch.optim.AdamW(draft.parameters(), lr=2e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = draft(batch)
        w2 = draft.markov_head.markov_w2.weight if draft.sequential_head is not None else None
        res = distillation_loss(out, batch, head, draft.cfg.loss, w2)
        res.loss.backward()
        opt.step()
        losses.append(res.loss.item())
    return draft, losses


def test_llama_target_drafts_train():
    cfg = llama_config(
        hidden_size=64,
        num_hidden_layers=6,
        intermediate_size=128,
        vocab_size=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_config(cfg).eval()
    for draft_cfg in (
        DraftConfig(num_layers=2, block_size=4, markov_rank=16),
        DraftConfig(
            arch="dflash",
            num_layers=2,
            block_size=4,
            sequential_head="none",
            confidence_head=False,
            loss=LossConfig(ce_weight=1.0, distill_weight=0.0),
        ),
    ):
        draft, losses = train_steps(target, draft_cfg, steps=25)
        assert draft.cfg.target_layer_ids == [1, 3]  # DFlash rule on a 6-layer target
        assert losses[-1] < losses[0]
        # tied embeddings: the draft shares the very tensor, not a copy
        assert (
            draft.target_head.embed_weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()
        )


def tiny_ling_config():
    """The ling3-mini shape (splitserve.target.embedded.LING3_MINI) with a 300-token vocabulary."""
    from splitserve.target.embedded import LING3_MINI

    return BailingHybridConfig(
        **{**LING3_MINI, "vocab_size": 300, "intermediate_size": 96},
        pad_token_id=299,
        eos_token_id=298,
    )


@pytest.mark.parametrize("attention", ["qwen3", "ling3_mla"])
def test_ling3_mini_target_drafts_train(attention):
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_config(tiny_ling_config()).eval()
    spec = TargetSpec.from_hf_config(target.config)
    assert spec.model_type == "bailing_hybrid" and spec.kv_lora_rank == 32
    draft, losses = train_steps(
        target,
        DraftConfig(
            num_layers=1, block_size=4, markov_rank=16, attention=attention, rope="interleaved"
        ),
        steps=10,
        lengths=(32, 40),
    )
    assert draft.cfg.mask_token_id == 299  # the target's pad token
    assert losses[-1] < losses[0]
