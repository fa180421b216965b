"""Lossless decoding of a hybrid target with KDA (linear-attention) layers: the ling3-mini
bailing_hybrid (random weights, fp32 CPU, transformers' pure-torch KDA), whose recurrent state
cannot be cropped and is staged per position instead."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from draft_models import DraftConfig, TargetSpec, build_draft
from serving.decoder import SpeculativeDecoder
from serving.scheduler import SchedulerConfig
from splitserve.target.embedded import ensure_ling3_mini
from splitserve.target.linear_state import linear_layers
from splitserve.target.models import load_frozen_head

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2


def test_kda_target_greedy_equals_target_only_greedy(tmp_path):
    model_dir = ensure_ling3_mini({}, cache_dir=tmp_path)
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    assert len(linear_layers(target)) >= 2  # the mini keeps KDA layers next to MLA ones
    torch.manual_seed(0)
    cfg = DraftConfig(num_layers=1, block_size=4, markov_rank=16, mask_token_id=16)
    draft = build_draft(
        cfg,
        TargetSpec.from_hf_config(target.config),
        load_frozen_head(model_dir, "cpu", torch.float32),
    )
    g = torch.Generator().manual_seed(0)
    for mode in (SchedulerConfig("fixed"), SchedulerConfig("threshold", threshold=0.1)):
        dec = SpeculativeDecoder(target, draft, scheduler=mode)
        for _ in range(2):
            prompt = torch.randint(
                0, 49152, (int(torch.randint(4, 12, (1,), generator=g)),), generator=g
            )
            ref = target.generate(
                prompt[None],
                attention_mask=torch.ones_like(prompt[None]),
                max_new_tokens=20,
                min_new_tokens=20,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            res = dec.generate(prompt.tolist(), 20)
            assert res.token_ids == ref[0, prompt.numel() :].tolist()
            # multi-token verify steps happened, with staging and rollback
            assert max(res.widths) > 1


def test_without_the_rollback_the_output_changes(tmp_path, monkeypatch):
    """The staging is what keeps decoding lossless: committing the state after the whole verify
    block instead (no rollback of rejected drafts) changes the output."""
    from splitserve.target.linear_state import LinearStateStager

    model_dir = ensure_ling3_mini({}, cache_dir=tmp_path)
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    torch.manual_seed(1)
    draft = build_draft(
        DraftConfig(num_layers=1, block_size=4, markov_rank=16, mask_token_id=16),
        TargetSpec.from_hf_config(target.config),
        load_frozen_head(model_dir, "cpu", torch.float32),
    )
    prompt = [5, 99, 1234, 42, 7]
    plain = SpeculativeDecoder(target, None).generate(prompt, 16)
    spec = SpeculativeDecoder(target, draft).generate(prompt, 16)
    assert spec.token_ids == plain.token_ids and sum(spec.verified) > sum(spec.accepted)
    keep_last = LinearStateStager.commit
    monkeypatch.setattr(
        LinearStateStager, "commit", lambda self, cache, position: keep_last(self, cache, -1)
    )
    broken = SpeculativeDecoder(target, draft).generate(prompt, 16)
    assert broken.token_ids != plain.token_ids


def test_linear_kernels_names_the_implementation_in_use(tmp_path):
    """Without fla-core (this CPU machine), transformers' pure-torch KDA is what runs."""
    from splitserve.target.linear_state import linear_kernels

    model_dir = ensure_ling3_mini({}, cache_dir=tmp_path)
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    kernels = linear_kernels(target)
    assert set(kernels) == {"chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"}
    assert all(
        m == "transformers.models.bailing_hybrid.modeling_bailing_hybrid" for m in kernels.values()
    ), kernels
    assert linear_kernels(torch.nn.Linear(2, 2)) == {}
