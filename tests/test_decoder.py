"""The reference decoder is lossless: greedy output equals target-only greedy decoding, whatever
the draft proposes; sampling reproduces the target's distribution."""

import pytest
import torch
from conftest import llama_config
from transformers import AutoModelForCausalLM

from draft_models import DraftConfig, FrozenTargetHead, TargetSpec, build_draft
from serving.decoder import SpeculativeDecoder
from serving.scheduler import SchedulerConfig
from serving.sps import SpsTable

SPS = SpsTable([1, 2, 4, 8], [100.0, 97.0, 90.0, 70.0], 8)
MODES = [
    SchedulerConfig("fixed"),
    SchedulerConfig("threshold", threshold=0.02),
    SchedulerConfig("prefix"),
]


def tiny_target(vocab=96, seed=0):
    torch.manual_seed(seed)
    cfg = llama_config(vocab_size=vocab, tie_word_embeddings=False)
    return AutoModelForCausalLM.from_config(cfg).double().eval()


def draft_for(target, **overrides):
    spec = TargetSpec.from_hf_config(target.config)
    base = dict(num_layers=1, block_size=4, markov_rank=8, target_layer_ids=[1, 2])
    base.update(overrides)
    torch.manual_seed(1)
    return build_draft(DraftConfig(**base), spec, FrozenTargetHead.from_hf_model(target)).double()


def reference_greedy(target, prompt, n):
    ids = torch.tensor([prompt])
    out = target.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n,
        do_sample=False,
        min_new_tokens=n,
        pad_token_id=0,
        eos_token_id=None,
    )
    return out[0, len(prompt) :].tolist()


class OracleProposer:
    """Proposal stand-in: the target's own greedy continuation, correct for the first `good`
    tokens of each block and wrong after, to drive every accept/reject/rollback path."""

    def __init__(self, target, gamma, good, history):
        self.target, self.gamma, self.good, self.history = target, gamma, good, history

    def commit(self, feats, tokens, start):
        pass

    def propose(self, anchor, pos, temperature, generator):
        seq = self.history[:pos] + [int(anchor)]
        cont = reference_greedy(self.target, seq, self.gamma)
        tokens = [
            t if k < self.good else (t + 1) % self.target.config.vocab_size
            for k, t in enumerate(cont)
        ]
        return torch.tensor(tokens), None, torch.linspace(0.9, 0.5, len(tokens)).double()


CASES = [
    (arch, mode) for arch in ("dspark", "dspark_rnn", "dspark_from_masks") for mode in MODES
] + [
    ("dflash", MODES[0]),
    ("eagle3", MODES[0]),
]
DRAFT_KINDS = {
    "dspark": {},
    "dspark_rnn": {"sequential_head": "rnn"},
    "dspark_from_masks": {"sample_from_anchor": False},  # speculators' DFlash-style slots
    "dflash": {"arch": "dflash", "sequential_head": "none", "confidence_head": False},
    "eagle3": {"arch": "eagle3", "sequential_head": "none", "confidence_head": False},
}


@pytest.mark.parametrize("runtime", ["eager", "static"])
@pytest.mark.parametrize("arch,mode", CASES, ids=lambda c: c if isinstance(c, str) else c.mode)
def test_greedy_output_equals_target_greedy_with_a_random_draft(arch, mode, runtime):
    """(DFlash and EAGLE-3 have no confidence head, so only fixed-length verification applies.)
    Both target engines: eager (transformers, cropped cache) and static (our static-cache forward;
    on CPU without graphs, the same code the graphs replay on a GPU)."""
    target = tiny_target()
    dec = SpeculativeDecoder(
        target,
        draft_for(target, **DRAFT_KINDS[arch]),
        scheduler=mode,
        sps=SPS,
        runtime=runtime,
        max_len=64,
    )
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        prompt = torch.randint(
            0, 96, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g
        ).tolist()
        res = dec.generate(prompt, 40)
        assert res.token_ids == reference_greedy(target, prompt, 40)
        assert sum(res.accept_lengths) + 1 >= len(res.token_ids)


@pytest.mark.parametrize("good", [0, 1, 3, 4])
def test_accept_and_rollback_paths_with_oracle_proposals(good, monkeypatch):
    target = tiny_target()
    prompt = [5, 17, 42, 8]
    expected = reference_greedy(target, prompt, 30)
    oracle = OracleProposer(target, 4, good, prompt + expected)
    monkeypatch.setattr("serving.decoder.make_proposer", lambda *a: oracle)
    res = SpeculativeDecoder(
        target, draft_for(target), scheduler=SchedulerConfig("fixed")
    ).generate(prompt, 30)
    assert res.token_ids == expected
    # accepted prefix + bonus each step
    assert all(a == min(good, 4) + 1 for a in res.accept_lengths[:-1])


def test_target_only_decoding_is_plain_greedy():
    target = tiny_target()
    res = SpeculativeDecoder(target, None).generate([1, 2, 3], 25)
    assert res.token_ids == reference_greedy(target, [1, 2, 3], 25) and set(res.accept_lengths) == {
        1
    }


@pytest.mark.parametrize("arch", ["dspark", "eagle3"])
@pytest.mark.slow
def test_sampling_matches_the_target_distribution(arch):
    """Tiny vocabulary, 2 new tokens: the empirical law of (x1, x2) under speculative sampling
    equals the target's exact law (chi-square, fixed seeds). On the static runtime: the fused
    step (test_fused_and_split_steps_draw_the_same_tokens ties the split step to it)."""
    vocab = 6
    target = tiny_target(vocab=vocab, seed=3)
    with torch.no_grad():
        # sharpen: a distribution far from uniform, so the test has power
        target.lm_head.weight.mul_(20)
    dec = SpeculativeDecoder(
        target,
        draft_for(target, mask_token_id=5, **DRAFT_KINDS[arch]),
        scheduler=SchedulerConfig("fixed"),
        runtime="static",
    )
    assert_two_token_law(dec, target, [1, 2, 3], vocab)


def two_token_law(target, prompt: list[int], vocab: int) -> torch.Tensor:
    """The target's exact law of its next two tokens after `prompt` at temperature 1 [V, V]."""
    with torch.no_grad():
        p1 = torch.softmax(target(torch.tensor([prompt])).logits[0, -1].double(), -1)
        exact = torch.zeros(vocab, vocab, dtype=torch.float64)
        for a in range(vocab):
            p2 = torch.softmax(target(torch.tensor([prompt + [a]])).logits[0, -1].double(), -1)
            exact[a] = p1[a] * p2
    return exact


def assert_two_token_law(dec, target, prompt: list[int], vocab: int, n: int = 3000) -> None:
    """n seeded 2-token samples of `dec` follow two_token_law (chi-square, rare cells pooled)."""
    from scipy.stats import chisquare

    exact = two_token_law(target, prompt, vocab)
    counts = torch.zeros(vocab, vocab)
    for i in range(n):
        ids = dec.generate(prompt, 2, temperature=1.0, seed=i).token_ids
        counts[ids[0], ids[1]] += 1
    expected = (exact * n).flatten()
    keep = expected >= 5  # chi-square validity; pool the rare cells
    obs = torch.cat((counts.flatten()[keep], counts.flatten()[~keep].sum()[None]))
    exp = torch.cat((expected[keep], expected[~keep].sum()[None]))
    stat, pvalue = chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item())
    assert pvalue > 1e-3, (stat, pvalue)


@pytest.mark.parametrize("arch", ["dspark", "dspark_from_masks", "dflash", "eagle3"])
def test_fused_and_split_steps_draw_the_same_tokens(arch, monkeypatch):
    """The fused step (static runtime, eager on CPU) and the split step (eager runtime) use the
    same counter noise: the same seed gives the same tokens at temperature 1, the same
    acceptance counts, and greedy output too. Every step of the static decoder is fused, none
    of the eager one's."""
    from serving.fused_step import FusedStep

    fused_steps = []
    step = FusedStep._step
    monkeypatch.setattr(
        FusedStep, "_step", lambda self, *a: fused_steps.append(1) or step(self, *a)
    )
    target = tiny_target()
    draft = draft_for(target, **DRAFT_KINDS[arch])
    decs = {
        rt: SpeculativeDecoder(target, draft, runtime=rt, max_len=96) for rt in ("eager", "static")
    }
    for seed, prompt in enumerate(([3, 9, 27, 81], [5, 17, 42, 8, 3, 1, 1])):
        for temperature in (0.0, 1.0):
            split = decs["eager"].generate(prompt, 40, temperature=temperature, seed=seed)
            assert not fused_steps
            fused = decs["static"].generate(prompt, 40, temperature=temperature, seed=seed)
            assert len(fused_steps) == fused.steps
            fused_steps.clear()
            assert fused.token_ids == split.token_ids
            assert fused.accepted == split.accepted and fused.widths == split.widths


def test_bad_decoder_inputs():
    target = tiny_target()
    with pytest.raises(ValueError, match="larger than the draft was trained for"):
        SpeculativeDecoder(target, draft_for(target), block_size=9)
    dflash = draft_for(target, arch="dflash", sequential_head="none", confidence_head=False)
    with pytest.raises(ValueError, match="needs a confidence head"):
        SpeculativeDecoder(target, dflash, scheduler=SchedulerConfig("prefix"), sps=SPS)
    with pytest.raises(ValueError, match="STS file has 3 temperatures"):
        SpeculativeDecoder(target, draft_for(target), sts_temperatures=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="must be >= 1 and end at gamma"):
        SpeculativeDecoder(target, draft_for(target), verify_widths=[2, 4])
    with pytest.raises(ValueError, match="needs a confidence head"):
        SpeculativeDecoder(
            target,
            draft_for(target, **DRAFT_KINDS["eagle3"]),
            scheduler=SchedulerConfig("threshold"),
        )
    # compile only pays inside CUDA graphs: refused where none run
    with pytest.raises(ValueError, match="compiled steps run inside CUDA graphs; no GPU here"):
        SpeculativeDecoder(target, draft_for(target), runtime="static", compile=True)
    with pytest.raises(ValueError, match="compile needs the static runtime on a GPU"):
        SpeculativeDecoder(target, None, runtime="auto", compile=True)


def test_fixed_shape_steps_are_still_lossless():
    """One verify width (gamma + 1, the CUDA-graph shape): padding drafts beyond the schedule are
    masked out of acceptance and cropped from the cache."""
    target = tiny_target()
    dec = SpeculativeDecoder(
        target,
        draft_for(target),
        scheduler=SchedulerConfig("threshold", threshold=0.3),
        verify_widths=[5],
    )
    prompt = [3, 9, 27, 81]
    res = dec.generate(prompt, 40)
    assert res.token_ids == reference_greedy(target, prompt, 40)
    assert set(res.widths) == {5} and min(res.verified) < 4  # padded steps did occur


def test_fixed_schedule_picks_its_width_on_the_host():
    """A fixed schedule with several verify tiers: each step's width is the smallest tier holding
    min(gamma, tokens still wanted) + 1, chosen without reading the device; still lossless."""
    target = tiny_target()
    dec = SpeculativeDecoder(target, draft_for(target), verify_widths=[1, 3, 5])
    prompt = [2, 7, 1, 8, 28]
    res = dec.generate(prompt, 23)
    assert res.token_ids == reference_greedy(target, prompt, 23)
    have, expected = 1, []
    for emitted in res.accept_lengths:
        need = min(4, 23 - have) + 1
        expected.append(next(w for w in (1, 3, 5) if w >= need))
        have += emitted
    assert res.widths == expected and expected[-1] < 5  # the last steps used smaller tiers


def test_eagle3_chain_reads_committed_context_only(monkeypatch):
    """After a decode with rejections, the chain's cache equals one built from the committed text
    alone, in one piece or in two: no trace of rejected drafts, and commits compose."""
    from draft_models import Eagle3Proposer

    target = tiny_target()
    draft = draft_for(target, **DRAFT_KINDS["eagle3"])
    prompt = [4, 8, 15, 16, 23, 42]
    made = []
    monkeypatch.setattr(
        "serving.decoder.make_proposer",
        lambda *a: made.append(Eagle3Proposer(draft, 4, None, 64)) or made[-1],
    )
    dec = SpeculativeDecoder(target, draft)
    res = dec.generate(prompt, 12)
    assert sum(res.verified) > sum(res.accepted)  # rejections happened
    committed = torch.tensor(prompt + res.token_ids[:-1])
    anchor = torch.tensor(res.token_ids[-1:])
    with torch.no_grad():
        dec.engine.begin(64)
        _, feats = dec.engine.forward(committed, 0)
        whole, pieces = Eagle3Proposer(draft, 4, None, 64), Eagle3Proposer(draft, 4, None, 64)
        whole.commit(feats, committed, 0)
        pieces.commit(feats[:8], committed[:8], 0)
        pieces.commit(feats[8:], committed[8:], 8)
        a = whole.propose(anchor, len(committed), 0.0, None)[0]
        b = pieces.propose(anchor, len(committed), 0.0, None)[0]
    n = len(committed)
    assert torch.allclose(made[0].keys[:n], whole.keys[:n])
    assert torch.allclose(pieces.keys[:n], whole.keys[:n])
    assert torch.equal(a, b)


@pytest.mark.parametrize("window", [None, 5])
def test_eagle3_static_chain_equals_the_training_chain(window):
    """The static-buffer chain (what the decoder graphs) proposes what the training-time chain
    step (`Eagle3Draft.step`, growing its keys) gives over the same committed context, for a
    proposer reused after a longer request (stale keys in its buffers), with and without a
    sliding window."""
    from draft_models import Eagle3Proposer
    from draft_models.packed_attention import TokenIndex

    target = tiny_target()
    draft = draft_for(target, sliding_window=window, **DRAFT_KINDS["eagle3"])
    engine = SpeculativeDecoder(target, draft).engine

    def feats_of(ids):
        engine.begin(64)
        return engine.forward(torch.tensor(ids), 0)[1]

    def training_chain(feats, tokens, anchor):
        g = draft.fuse_context(feats)
        g_prev = torch.cat((g.new_zeros(1, g.shape[1]), g[:-1]))
        n = len(tokens)
        keys, values = draft.self_attn.kv(draft._layer_input(tokens, g_prev), torch.arange(n))
        k_index, feature, token, out = TokenIndex.context(n, "cpu"), g[-1:], anchor, []
        for k in range(4):
            q_index = TokenIndex.single_block(n, 1, "cpu", first_slot=k)
            feature, h, keys, values = draft.step(
                token, feature, q_index, keys, values, k_index, backend="dense"
            )
            k_index = k_index.cat(q_index)
            token = draft.target_head.logits(h)[0].argmax(-1, keepdim=True)
            out.append(token)
        return torch.cat(out)

    kept = Eagle3Proposer(draft, 4, None, 64)
    with torch.no_grad():
        long = list(range(5, 45))
        kept.commit(feats_of(long), torch.tensor(long), 0)
        kept.propose(torch.tensor([9]), len(long), 0.0, None)
        for prompt in ([7, 1, 9, 4, 12, 30], [3, 3, 8, 1, 50, 2, 61, 17, 5]):
            kept.reset()
            f, ids = feats_of(prompt), torch.tensor(prompt)
            kept.commit(f, ids, 0)
            for anchor in (2, 40, 77):
                a = torch.tensor([anchor])
                assert torch.equal(
                    kept.propose(a, len(prompt), 0.0, None)[0], training_chain(f, ids, a)
                )


def test_single_request_schedule_on_device_equals_algorithm_1():
    from serving.scheduler import prefix_schedule, single_request_length, threshold_schedule

    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        gamma = int(torch.randint(1, 9, (1,), generator=g))
        survival = torch.cumprod(torch.rand(gamma, generator=g, dtype=torch.float64), 0)
        rates = sorted(torch.rand(gamma + 1, generator=g).tolist(), reverse=True)
        table = SpsTable(list(range(1, gamma + 2)), [100 * r + 1 for r in rates], gamma + 1)
        by_width = torch.tensor(
            [0.0] + [table(w) for w in range(1, gamma + 2)], dtype=torch.float64
        )
        cfg = SchedulerConfig("prefix")
        assert (
            int(single_request_length(survival, cfg, by_width))
            == prefix_schedule(survival[None], table)[0]
        )
        thr = SchedulerConfig("threshold", threshold=float(torch.rand((), generator=g)))
        assert (
            int(single_request_length(survival, thr, None))
            == threshold_schedule(survival[None], thr.threshold)[0]
        )


def test_a_smaller_block_runs_only_gamma_slots_as_sglang_does():
    """--block-size 2 with a draft trained on blocks of 4: SGLang runs a block of 2 slots
    [anchor, mask] (attention spans only those), not the 4-slot block cut short; and decoding
    stays lossless."""
    from draft_models import DSparkProposer
    from draft_models.packed_attention import TokenIndex

    target = tiny_target()
    draft = draft_for(target)
    prompt = torch.tensor([5, 17, 42, 8, 3])
    dec = SpeculativeDecoder(target, draft, block_size=2)
    with torch.no_grad():
        dec.engine.begin(64)
        _, feats = dec.engine.forward(prompt, 0)
        sts = torch.ones(4, dtype=torch.float64)
        short, full = DSparkProposer(draft, 2, sts, 64), DSparkProposer(draft, 4, sts, 64)
        for p in (short, full):
            p.commit(feats, prompt, 0)
        anchor = torch.tensor([11])
        tokens, _, _ = short.propose(anchor, 5, 0.0, None)
        full.propose(anchor, 5, 0.0, None)
        ids = torch.tensor([[11, draft.cfg.mask_token_id]])
        hidden = draft.backbone(
            ids,
            TokenIndex.single_block(5, 2, "cpu"),
            [(k[:5], v[:5]) for k, v in short.ctx_kv],
            TokenIndex.context(5, "cpu"),
            backend="dense",
        )
        expected = draft.heads(hidden, torch.stack((anchor, tokens[:1]), dim=1)).confidence_logit[0]
    assert tokens.shape == (2,)
    torch.testing.assert_close(short.confidence_logits, expected.double())
    assert not torch.allclose(short.confidence_logits, full.confidence_logits[:2])
    res = dec.generate(prompt.tolist(), 30)
    assert res.token_ids == reference_greedy(target, prompt.tolist(), 30)
    assert max(res.widths) == 3


def test_a_reset_proposer_sees_nothing_of_the_previous_request():
    """The static-state proposer the decoder keeps across requests (beside a graphed target):
    after reset(), a request with a shorter prompt proposes exactly what a fresh proposer does,
    although the previous request's keys are still in its buffers; commits in pieces compose."""
    from draft_models import DSparkProposer

    target = tiny_target()
    draft = draft_for(target)
    engine = SpeculativeDecoder(target, draft).engine
    sts = torch.ones(4, dtype=torch.float64)

    def feats_of(ids):
        engine.begin(64)
        return engine.forward(torch.tensor(ids), 0)[1]

    with torch.no_grad():
        long, short = list(range(3, 40)), [7, 1, 9, 4, 12, 30]
        kept, fresh = DSparkProposer(draft, 4, sts, 64), DSparkProposer(draft, 4, sts, 64)
        kept.commit(feats_of(long), torch.tensor(long), 0)
        kept.propose(torch.tensor([5]), len(long), 0.0, None)
        kept.reset()
        f = feats_of(short)
        kept.commit(f[:4], torch.tensor(short[:4]), 0)
        kept.commit(f[4:], torch.tensor(short[4:]), 4)
        fresh.commit(f, torch.tensor(short), 0)
        a = kept.propose(torch.tensor([2]), len(short), 0.0, None)
        b = fresh.propose(torch.tensor([2]), len(short), 0.0, None)
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[2], b[2])
    torch.testing.assert_close(kept.confidence_logits, fresh.confidence_logits)
    with pytest.raises(ValueError, match="position 64 is past the proposer's 64"):
        fresh.commit(f, torch.tensor(short), 59)


@pytest.mark.parametrize("head", ["markov", "gated", "rnn"])
def test_a_proposal_is_what_training_s_heads_give_on_its_own_tokens(head):
    """Decode time runs the sequential head slot after slot and the confidence head over all
    slots at once; teacher-forced on the proposal's own tokens, training's heads
    (DSparkDraft.heads) give the same latents: each drafted token is the argmax of the target
    head plus the Markov bias, and the confidence logits are training's."""
    from draft_models import DSparkProposer
    from draft_models.packed_attention import TokenIndex

    target = tiny_target()
    draft = draft_for(target, sequential_head=head)
    prompt = torch.tensor([5, 17, 42, 8, 3])
    dec = SpeculativeDecoder(target, draft)
    gamma = draft.cfg.block_size
    with torch.no_grad():
        dec.engine.begin(64)
        _, feats = dec.engine.forward(prompt, 0)
        proposer = DSparkProposer(draft, gamma, torch.ones(gamma, dtype=torch.float64), 64)
        proposer.commit(feats, prompt, 0)
        anchor = torch.tensor([11])
        tokens, _, _ = proposer.propose(anchor, 5, 0.0, None)
        ids = torch.tensor([[11] + [draft.cfg.mask_token_id] * (gamma - 1)])
        hidden = draft.backbone(
            ids,
            TokenIndex.single_block(5, gamma, "cpu"),
            [(k[:5], v[:5]) for k, v in proposer.ctx_kv],
            TokenIndex.context(5, "cpu"),
            backend="dense",
        )
        prev = torch.cat((anchor, tokens[:-1]))[None]
        out = draft.heads(hidden, prev)
        logits = draft.target_head.logits(hidden) + draft.sequential_head.markov_w2(out.seq_latent)
    assert tokens.tolist() == logits[0].argmax(-1).tolist()
    torch.testing.assert_close(proposer.confidence_logits, out.confidence_logit[0].double())


@pytest.mark.parametrize("head", ["markov", "rnn"])
def test_a_draft_sampling_from_the_masks_reads_slots_1_to_gamma(head):
    """sample_from_anchor=false (speculators' DFlash-style convention): the block is the anchor
    and gamma masks at positions anchor..anchor+gamma, prediction k is read from slot k + 1 with
    the token before it as the sequential head's previous token (the anchor for slot 1), and the
    confidence head pairs the same way. Reading slots 0..gamma-1 instead gives other tokens or
    logits, so this comparison would catch a reading one slot off."""
    from draft_models import DSparkProposer, SequenceSample, pack_blocks
    from draft_models.packed_attention import TokenIndex

    target = tiny_target()
    draft = draft_for(target, sequential_head=head, sample_from_anchor=False)
    prompt = torch.tensor([5, 17, 42, 8, 3])
    gamma = draft.cfg.block_size
    with torch.no_grad():
        engine = SpeculativeDecoder(target, draft).engine
        engine.begin(64)
        _, feats = engine.forward(prompt, 0)
        proposer = DSparkProposer(draft, gamma, torch.ones(gamma, dtype=torch.float64), 64)
        proposer.commit(feats, prompt, 0)
        anchor = torch.tensor([11])
        tokens, _, _ = proposer.propose(anchor, 5, 0.0, None)
        ids = torch.tensor([[11] + [draft.cfg.mask_token_id] * gamma])  # gamma + 1 slots
        hidden = draft.backbone(
            ids,
            TokenIndex.single_block(5, gamma + 1, "cpu"),
            [(k[:5], v[:5]) for k, v in proposer.ctx_kv],
            TokenIndex.context(5, "cpu"),
            backend="dense",
        )
        prev = torch.cat((anchor, tokens[:-1]))[None]

        def read(slots):
            out = draft.heads(hidden[:, slots], prev)
            bias = draft.sequential_head.markov_w2(out.seq_latent)
            logits = draft.target_head.logits(hidden[:, slots]) + bias
            return logits[0].argmax(-1).tolist(), out.confidence_logit[0].double()

        picked, confidence = read(slice(1, gamma + 1))
        off_by_one = read(slice(0, gamma))
        # training reads the same slots: the packed block of this anchor, teacher-forced on the
        # proposal's own tokens (the context past the anchor is invisible, so any will do)
        ids = torch.cat((prompt, anchor, tokens))
        n = ids.numel()
        sample = SequenceSample(
            ids,
            torch.ones(n, dtype=torch.bool),
            torch.cat((feats, feats.new_zeros(n - 5, feats.shape[1]))),
            feats.new_zeros(n, draft.cfg.hidden_size),
        )
        batch = pack_blocks(
            [sample],
            [torch.tensor([5])],
            block_size=gamma,
            num_slots=draft.cfg.num_slots,
            mask_token_id=draft.cfg.mask_token_id,
        )
        trained = draft(batch, backend="sdpa")
    assert tokens.shape == (gamma,) and proposer.slots == gamma + 1
    assert tokens.tolist() == picked
    torch.testing.assert_close(proposer.confidence_logits, confidence)
    assert not torch.allclose(off_by_one[1], confidence)  # the comparison sees the slot read
    assert batch.block_input_ids.shape == (1, gamma + 1)
    torch.testing.assert_close(trained.hidden, hidden[:, 1:])
    torch.testing.assert_close(trained.confidence_logit[0].double(), confidence)
