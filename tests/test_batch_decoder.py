"""Batch decoding (serving.batch_decoder) emits, row by row, what the batch-1 decoder emits for
the same request and seed: the same tokens, the same acceptance counts (so the same tau and
acceptance by position), greedy and sampled, with a draft of each architecture or none; and a
row's outcome does not depend on its neighbours."""

import pytest
import torch
from test_decoder import DRAFT_KINDS, draft_for, tiny_target

from draft_models.packed_attention import AttentionPlan, TokenIndex
from serving.batch_decoder import BatchDecoder
from serving.decoder import SpeculativeDecoder
from serving.scheduler import SchedulerConfig

PROMPTS = [[3, 9, 27, 81], [5, 17, 42, 8, 3, 1, 1], [7], [11, 2, 60, 33, 4]]


@pytest.mark.parametrize("arch", ["dspark", "dspark_from_masks", "dflash", "eagle3", None])
def test_batch_rows_equal_batch_one_decoding(arch):
    target = tiny_target()
    draft = draft_for(target, **DRAFT_KINDS[arch]) if arch else None
    single = SpeculativeDecoder(target, draft, runtime="static", max_len=96)
    batch = BatchDecoder(single, rows=3)  # 4 prompts: a full batch, then one row of three
    for temperature in (0.0, 1.0):
        seeds = [10 + i for i in range(len(PROMPTS))]
        got = batch.generate(PROMPTS, 30, temperature=temperature, seeds=seeds)
        for prompt, seed, res in zip(PROMPTS, seeds, got, strict=True):
            ref = single.generate(prompt, 30, temperature=temperature, seed=seed)
            assert res.token_ids == ref.token_ids
            assert res.accepted == ref.accepted and res.verified == ref.verified
            assert res.accept_lengths == ref.accept_lengths


def test_batch_rows_stop_at_their_own_eos():
    """A row that meets EOS stops there while the others go on, as at batch 1."""
    target = tiny_target()
    draft = draft_for(target)
    single = SpeculativeDecoder(target, draft, runtime="static", max_len=96)
    free = single.generate(PROMPTS[1], 30, temperature=1.0, seed=4).token_ids
    eos = free[5]
    batch = BatchDecoder(single, rows=4)
    got = batch.generate(PROMPTS, 30, temperature=1.0, eos_token_id=eos, seeds=[3, 4, 5, 6])
    for prompt, seed, res in zip(PROMPTS, [3, 4, 5, 6], got, strict=True):
        ref = single.generate(prompt, 30, temperature=1.0, eos_token_id=eos, seed=seed)
        assert res.token_ids == ref.token_ids and res.accepted == ref.accepted
    assert got[1].token_ids[-1] == eos and len(got[1].token_ids) <= 6


@pytest.mark.parametrize(
    "schedule,width",
    [(SchedulerConfig("threshold", threshold=0.3), 5), (SchedulerConfig("fixed", length=2), 3)],
)
def test_other_schedules_rows_match_batch_one(schedule, width):
    """The threshold schedule per row, and a fixed length below the block (verified in a width
    of length + 1, not gamma + 1)."""
    target = tiny_target()
    draft = draft_for(target)
    single = SpeculativeDecoder(target, draft, runtime="static", max_len=96, scheduler=schedule)
    batch = BatchDecoder(single, rows=2)
    for temperature in (0.0, 1.0):
        got = batch.generate(PROMPTS[:2], 25, temperature=temperature, seeds=[0, 1])
        for prompt, seed, res in zip(PROMPTS[:2], [0, 1], got, strict=True):
            ref = single.generate(prompt, 25, temperature=temperature, seed=seed)
            assert res.token_ids == ref.token_ids and res.verified == ref.verified
            assert res.accepted == ref.accepted and set(res.widths) == {width}


def test_batch_decoder_refusals():
    target = tiny_target()
    draft = draft_for(target)
    prefix = SpeculativeDecoder(target, draft, max_len=96, scheduler=SchedulerConfig("prefix"),
                                sps=lambda w: 1.0)  # fmt: skip
    with pytest.raises(ValueError, match="prefix schedule is joint"):
        BatchDecoder(prefix, rows=2)
    with pytest.raises(ValueError, match="switched off"):
        BatchDecoder(SpeculativeDecoder(target, draft, runtime="eager", max_len=64), rows=2)
    batch = BatchDecoder(SpeculativeDecoder(target, draft, max_len=64), rows=2)
    with pytest.raises(ValueError, match="prompt 1 needs 65 positions"):
        batch.generate([[1, 2], [3] * 10], 50)
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        batch.generate([[]], 4)
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        batch.generate([[1]], 4, seeds=[0, 1])


def test_rows_attention_equals_the_flat_dense_rule():
    """The rows layout (each row over its own keys) gives the flat dense mask's result."""
    torch.manual_seed(0)
    r, c, s, h, d = 3, 10, 4, 2, 8
    ctx = TokenIndex.rows_context(r, c, "cpu")
    row = torch.arange(r).repeat_interleave(s)
    slot = torch.arange(s).repeat(r)
    anchor = torch.tensor([4, 7, 9])
    block = TokenIndex(seq=row, pos=anchor[row] + slot, block=row, slot=slot)
    q = torch.randn(r * s, h, d, dtype=torch.float64)
    k = torch.randn(r * c + r * s, h, d, dtype=torch.float64)
    v = torch.randn(r * c + r * s, h, d, dtype=torch.float64)
    keys = ctx.cat(block)
    flat = AttentionPlan(block, keys, backend="dense")(q, k, v, 0.3)
    rows = AttentionPlan(block, keys, backend="dense", rows=(r, c))(q, k, v, 0.3)
    torch.testing.assert_close(rows, flat)
    with pytest.raises(ValueError, match="needs the dense backend"):
        AttentionPlan(block, keys, backend="sdpa", rows=(r, c))


@pytest.mark.parametrize("arch", ["dspark", "dflash", "eagle3"])
@pytest.mark.parametrize("rows", [1, 2])
def test_a_proposal_over_a_context_bucket_equals_one_over_the_whole_buffer(arch, rows):
    """`step_rows(t, extent)` (what the decoders run: the target's cache-length bucket) proposes
    what the whole buffer does, for an extent just past the largest anchor, greedy and T=1; an
    extent that cuts off visible keys proposes otherwise (the cut is real)."""
    from serving.decoder import make_proposer

    target = tiny_target()
    draft = draft_for(target, **DRAFT_KINDS[arch])
    engine = SpeculativeDecoder(target, draft).engine
    prompts = [[5, 17, 42, 8, 3, 1, 9, 60, 2, 7], [9, 1, 4, 4, 60, 2, 7, 30, 11, 3]][:rows]
    sts = torch.ones(4, dtype=torch.float64)
    p = make_proposer(draft, 4, sts, 64, rows=rows)
    with torch.no_grad():
        feats = []
        for prompt in prompts:
            engine.begin(64)
            feats.append(engine.forward(torch.tensor(prompt), 0)[1])
        p.reset(torch.arange(rows) + 3)  # before the commit: EAGLE-3's reset clears its feature
        p.commit_rows(torch.stack(feats), torch.tensor(prompts), 0)
        p.anchor_in.copy_(torch.tensor([11, 40][:rows]))
        p.pos_in.copy_(torch.tensor([10, 7][:rows]))

        def propose(temperature, extent):
            p.draws.zero_()  # the same noise for every run
            return p.step_rows(temperature, extent)

        for temperature in (0.0, 1.0):
            tok_a, dist_a, surv_a, conf_a = propose(temperature, 11)
            tok_b, dist_b, surv_b, conf_b = propose(temperature, None)
            assert torch.equal(tok_a, tok_b)
            torch.testing.assert_close(surv_a, surv_b)
            if temperature > 0:
                torch.testing.assert_close(dist_a, dist_b)
            if conf_a is not None:
                torch.testing.assert_close(conf_a, conf_b)
        cut = propose(1.0, 6)[1]  # row 0 sees positions 0..9, row 1 0..6: both lose keys
        assert not torch.allclose(cut[0], dist_b[0]) and not torch.allclose(cut[-1], dist_b[-1])
