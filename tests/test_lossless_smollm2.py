"""Greedy losslessness on the small real target (SmolLM2-135M-Instruct, fp32 CPU): 20 GSM8K test
prompts, 128 new tokens each, random-weight drafts of every kind under every scheduler mode that
applies to them (tau near 1, output still identical to target-only greedy decoding).

In CI the 20 prompts are dealt round-robin over the 8 (draft, scheduler) cases, so every case
decodes 2-3 full prompts; SPLITSERVE_FULL_LOSSLESS=1 runs every prompt through every case."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from draft_models import DraftConfig, TargetSpec, build_draft
from serving.benchmarks import load_bench
from serving.decoder import SpeculativeDecoder
from serving.scheduler import SchedulerConfig
from serving.sps import SpsTable
from splitserve.target.chat import prompt_ids
from splitserve.target.embedded import ensure_smollm2
from splitserve.target.models import load_frozen_head

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

NEW_TOKENS, PROMPTS = 128, 20
FULL = os.environ.get("SPLITSERVE_FULL_LOSSLESS") == "1"
KINDS = {
    "dspark": {},
    "dspark_rnn": {"sequential_head": "rnn"},
    "dflash": {"arch": "dflash", "sequential_head": "none", "confidence_head": False},
    "eagle3": {
        "arch": "eagle3",
        "num_layers": 1,
        "sequential_head": "none",
        "confidence_head": False,
    },
}
MODES = {
    "fixed": SchedulerConfig("fixed"),
    "threshold": SchedulerConfig("threshold", threshold=0.1),
    "prefix": SchedulerConfig("prefix"),
}
CASES = [(k, m) for k in ("dspark", "dspark_rnn") for m in MODES] + [
    ("dflash", "fixed"),
    ("eagle3", "fixed"),
]
SPS = SpsTable([1, 2, 3, 4, 5], [17.0, 14.0, 12.0, 10.5, 10.0], 5)  # the shape of a CPU profile


@pytest.fixture(scope="module")
def smollm2():
    model_dir = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(model_dir)
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [
        prompt_ids(tok, [{"role": "user", "content": item[0]}])
        for item in load_bench("gsm8k", PROMPTS)
    ]
    return model_dir, target, prompts, {}


def reference(target, prompt, cache):
    if tuple(prompt) not in cache:
        ids = torch.tensor([prompt])
        out = target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
        cache[tuple(prompt)] = out[0, len(prompt) :].tolist()
    return cache[tuple(prompt)]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{k}-{m}" for k, m in CASES])
def test_random_drafts_are_lossless_on_smollm2(smollm2, case):
    model_dir, target, prompts, refs = smollm2
    kind, mode = CASES[case]
    torch.manual_seed(case)
    cfg = DraftConfig(**{"num_layers": 1, "block_size": 4, "markov_rank": 16, **KINDS[kind]})
    draft = build_draft(
        cfg,
        TargetSpec.from_hf_config(target.config),
        load_frozen_head(model_dir, "cpu", torch.float32),
    )
    dec = SpeculativeDecoder(target, draft, scheduler=MODES[mode], sps=SPS)
    mine = prompts if FULL else prompts[case :: len(CASES)]
    for prompt in mine:
        res = dec.generate(prompt, NEW_TOKENS)
        assert res.token_ids == reference(target, prompt, refs)
        assert len(res.token_ids) == NEW_TOKENS and sum(res.accept_lengths) == NEW_TOKENS - 1
