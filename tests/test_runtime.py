"""The static-cache runtime: our forward equals transformers' on the same weights, rejected
positions are forgotten by moving the length back, and the engine choice is explicit."""

import pytest
import torch
from conftest import llama_config
from transformers import AutoModelForCausalLM, BailingHybridConfig

from splitserve.target.runtime import EagerEngine, StaticEngine, make_engine
from splitserve.target.runtime.static_model import StaticDecoder


def tiny(**overrides):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(llama_config(**overrides)).double().eval()


@pytest.mark.parametrize("biases", [False, True])
def test_prefill_and_steps_equal_transformers(biases):
    """Prompt, then verify blocks of several widths with some positions rewritten (a rejected
    draft block followed by the accepted continuation): logits, captured layers and the final
    normed state equal HF's forward over the committed sequence (also with every bias a Llama
    config can switch on)."""
    model = tiny(num_hidden_layers=3, attention_bias=biases, mlp_bias=biases)
    if biases:  # transformers zero-initialises biases: make them matter
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
    net = StaticDecoder(model, max_rows=1, max_len=32, capture_ids=[-1, 0, 2])
    seq = torch.randint(0, 100, (20,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(seq[None], output_hidden_states=True)
    hs = ref.hidden_states

    def check(lo, hi, out):
        logits, feats, final = out
        torch.testing.assert_close(logits[0], ref.logits[0, lo:hi])
        torch.testing.assert_close(feats[0, :, :32], hs[0][0, lo:hi])  # -1: the embedding output
        torch.testing.assert_close(feats[0, :, 32:64], hs[1][0, lo:hi])
        # last layer, normed (transformers' RMSNorm computes in fp32, hence the tolerance)
        normed = dict(atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(model.model.norm(feats[0, :, 64:]), hs[3][0, lo:hi], **normed)
        torch.testing.assert_close(final[0], hs[3][0, lo:hi], **normed)

    pos = torch.arange(32)[None]
    check(0, 8, net(seq[None, :8], pos[:, :8]))
    wrong = torch.randint(0, 100, (1, 5))
    net(wrong, pos[:, 8:13])  # a verify block whose drafts are all rejected...
    check(8, 12, net(seq[None, 8:12], pos[:, 8:12]))  # ...is simply overwritten
    check(12, 13, net(seq[None, 12:13], pos[:, 12:13]))
    check(13, 20, net(seq[None, 13:20], pos[:, 13:20]))


def test_rows_at_different_lengths_step_together():
    """Two cache rows at different positions in one step (continuous batching): each row's logits
    equal the single-sequence forward of its own history."""
    model = tiny()
    net = StaticDecoder(model, max_rows=2, max_len=16, capture_ids=[1])
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, 100, (9,), generator=g), torch.randint(0, 100, (5,), generator=g)
    net(a[None, :8], torch.arange(8)[None], row0=0)
    net(b[None, :4], torch.arange(4)[None], row0=1)
    logits, _, _ = net(torch.stack((a[8:9], b[4:5])), torch.tensor([[8], [4]]))
    with torch.no_grad():
        torch.testing.assert_close(logits[0, 0], model(a[None]).logits[0, -1])
        torch.testing.assert_close(logits[1, 0], model(b[None]).logits[0, -1])


def test_a_fresh_prefill_equals_the_masked_one_and_feeds_the_steps_after_it():
    """A right-padded prefill of new rows into scattered, previously used cache rows: the causal
    path over the forward's own keys (`fresh=True`, what Regenerator.prefill runs) gives the
    masked path's logits and states, each row equals transformers' forward over its own tokens,
    and a decode step after it sees the keys it wrote."""
    model = tiny(num_hidden_layers=3)
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, 100, (n,), generator=g) for n in (7, 3, 5)]
    rows = torch.tensor([3, 0, 2])
    ids = torch.zeros((3, 7), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : s.numel()] = s
    pos = torch.arange(7).expand(3, 7)
    nets = [StaticDecoder(model, max_rows=4, max_len=12, capture_ids=[0, 2]) for _ in range(2)]
    for net in nets:  # stale keys everywhere, as rows a finished regeneration left behind
        net(torch.randint(0, 100, (4, 12), generator=g), torch.arange(12).expand(4, 12))
    fresh = nets[0](ids, pos, rows=rows, fresh=True)
    masked = nets[1](ids, pos, rows=rows)
    for i, s in enumerate(seqs):
        n = s.numel()
        for a, b in zip(fresh, masked, strict=True):
            torch.testing.assert_close(a[i, :n], b[i, :n])
        with torch.no_grad():
            ref = model(s[None], output_hidden_states=True)
        torch.testing.assert_close(fresh[0][i, :n], ref.logits[0])
        torch.testing.assert_close(fresh[1][i, :n, :32], ref.hidden_states[1][0])
        # one step after the prefill, at each row's own next position
        nxt = torch.randint(0, 100, (1,), generator=g)
        step = nets[0](nxt[None], torch.tensor([[n]]), rows=rows[i : i + 1])[0]
        with torch.no_grad():
            torch.testing.assert_close(step[0, 0], model(torch.cat((s, nxt))[None]).logits[0, -1])


def test_engine_attends_over_the_bucket_that_holds_its_positions():
    """A step attends over the smallest cache-length bucket that holds its positions: outputs
    equal the whole-cache engine's while the prompt and the verify blocks cross bucket borders,
    and positions past the cache are refused."""
    from splitserve.target.runtime.engines import extent_buckets

    assert extent_buckets(4096) == [256, 512, 1024, 2048, 4096]
    assert extent_buckets(300) == [256, 300]
    model = tiny(num_hidden_layers=2)
    bucketed = StaticEngine(model, [0, 1], max_len=24, widths=[1, 3], buckets=[4, 8, 16, 24])
    whole = StaticEngine(model, [0, 1], max_len=24, widths=[1, 3], buckets=[24])
    seq = torch.randint(0, 100, (23,), generator=torch.Generator().manual_seed(3))
    for start, end in ((0, 3), (3, 6), (6, 9), (9, 10), (10, 13), (13, 20), (20, 23)):
        a, b = bucketed.forward(seq[start:end], start), whole.forward(seq[start:end], start)
        torch.testing.assert_close(a[0], b[0])
        torch.testing.assert_close(a[1], b[1])
    with pytest.raises(ValueError, match="positions up to 24; the static cache holds 24"):
        bucketed.forward(seq[:2], 23)
    with pytest.raises(ValueError, match=r"buckets \[8, 16\] must be >= 1 and end at max_len=24"):
        StaticEngine(model, [0], max_len=24, buckets=[16, 8])


def test_engine_choice():
    model = tiny()
    assert isinstance(make_engine(model, [1], "auto"), EagerEngine)  # CPU: eager unless asked
    assert isinstance(make_engine(model, [1], "static"), StaticEngine)
    with pytest.raises(ValueError, match="runtime 'fast' is invalid; allowed: auto, eager, static"):
        make_engine(model, [1], "fast")
    from splitserve.target.embedded import LING3_MINI

    hybrid = AutoModelForCausalLM.from_config(BailingHybridConfig(**LING3_MINI, pad_token_id=0))
    with pytest.raises(ValueError, match="runtime=static runs llama, .* targets .* bailing_hybrid"):
        make_engine(hybrid, [1], "static")
    assert isinstance(make_engine(hybrid, [1], "auto"), EagerEngine)
    rescaled = tiny(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(ValueError, match="runs RoPE types default.*rope_type 'dynamic'"):
        make_engine(rescaled, [1], "static")
    engine = make_engine(model, [1], "static")
    with pytest.raises(ValueError, match="needs 5000 positions; the static cache holds 4096"):
        engine.begin(5000)


def test_sampler_draws_from_the_tempered_nucleus_and_argmax_at_zero():
    """Counter-based inverse CDF: over many seeds the frequencies follow softmax(logits / T);
    top_p drops the tail; temperature 0 is argmax; the draw is a function of (seed, position)."""
    from splitserve.target.runtime.sampling import sample_rows

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 40_000
    rows = logits.expand(n, -1)
    seed, pos = torch.arange(n), torch.full((n,), 5)
    ones = torch.ones(n)
    for t in (1.0, 0.5):
        drawn = sample_rows(rows, seed, pos, ones * t, ones, nucleus=False)
        freq = torch.bincount(drawn, minlength=6).float() / n
        torch.testing.assert_close(freq, (logits / t).softmax(-1), atol=0.01, rtol=0)
    probs = logits.softmax(-1)  # 0.61, 0.22, 0.14, ...: top_p 0.8 keeps the first three
    drawn = sample_rows(rows, seed, pos, ones, ones * 0.8, nucleus=True)
    freq = torch.bincount(drawn, minlength=6).float() / n
    torch.testing.assert_close(freq[:3], probs[:3] / probs[:3].sum(), atol=0.01, rtol=0)
    assert freq[3:].sum() == 0
    assert sample_rows(rows[:4], seed[:4], pos[:4], ones[:4] * 0, ones[:4], True).eq(0).all()
    again = sample_rows(rows[:100], seed[:100], pos[:100], ones[:100], ones[:100], False)
    assert torch.equal(again, sample_rows(rows, seed, pos, ones, ones, False)[:100])
    moved = sample_rows(rows[:100], seed[:100], pos[:100] + 1, ones[:100], ones[:100], False)
    assert not torch.equal(again, moved)
    # peaked logits at a low temperature: most probabilities round to 0 in fp32, in any order
    peaked = torch.full((n, 49), -200.0)
    peaked[:, [0, 9, 30]] = torch.tensor([0.0, 0.3, 0.0])
    for nucleus in (False, True):
        drawn = sample_rows(peaked, seed, pos, ones * 0.1, ones, nucleus)
        assert set(drawn.unique().tolist()) <= {0, 9, 30}
        freq = torch.bincount(drawn, minlength=49)[[0, 9, 30]].float() / n
        law = (peaked[0, [0, 9, 30]] / 0.1).softmax(-1)
        torch.testing.assert_close(freq, law, atol=0.01, rtol=0)
    # the draw walks the vocabulary in its own order, the nucleus only masks it: top_p 1 draws
    # what the sort-free path draws, over a near-uniform 49k vocabulary too (a CDF walked in
    # sorted order would move whenever two near-equal logits traded places)
    flat = torch.randn(500, 49152, generator=torch.Generator().manual_seed(3)) * 0.1
    args = (seed[:500], pos[:500], ones[:500])
    assert torch.equal(
        sample_rows(flat, *args, ones[:500], True), sample_rows(flat, *args, ones[:500], False)
    )
    # a tie at the nucleus's edge keeps every tied token (no order among equals decides)
    tied = torch.tensor([0.5, 0.25, 0.25]).log().expand(n, -1)
    drawn = sample_rows(tied, seed, pos, ones, ones * 0.6, nucleus=True)
    freq = torch.bincount(drawn, minlength=3).float() / n
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.25, 0.25]), atol=0.01, rtol=0)
    drawn = sample_rows(tied, seed, pos, ones, ones * 0.4, nucleus=True)
    assert drawn.eq(0).all()  # 0.5 alone reaches 0.4
    from draft_models.sampling import unit_interval

    ends = unit_interval(torch.tensor([0, 255, 256, (1 << 31) - 256, (1 << 31) - 1]))
    assert ends.min() > 0 and ends.max() < 1 and torch.isfinite(-torch.log(-torch.log(ends))).all()


def test_regeneration_with_refill_captures_what_a_forward_over_the_answer_gives():
    """Three requests through two slots (the third takes the first free slot), one ending at its
    EOS: each answer is the greedy continuation of its prompt, and the states stored while it was
    generated equal one transformers forward over prompt + answer, every position."""
    from splitserve.target.runtime.regen import Regenerator, Request

    model = tiny(num_hidden_layers=3)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 100, (n,), generator=g) for n in (5, 9, 3)]

    def regen(eos, budgets):
        engine = Regenerator(model, [0, 2], slots=2, max_len=24, eos=eos, nucleus=False)
        return engine.run([Request(p, b, seed=0) for p, b in zip(prompts, budgets, strict=True)])

    free = regen((), (8, 6, 10))
    assert [d.ids.numel() - d.prompt_len for d in free] == [8, 6, 10]
    eos = int(free[1].ids[9 + 2])  # the third new token of request 1
    out = regen({eos}, (8, 6, 10))
    stop = out[1].ids[9:].tolist()
    assert stop == free[1].ids[9 : 9 + stop.index(eos) + 1].tolist() and stop[-1] == eos
    for d in out:
        with torch.no_grad():
            ref = model(d.ids[None], output_hidden_states=True)
        hs = ref.hidden_states
        greedy = ref.logits[0, d.prompt_len - 1 : -1].argmax(-1)
        assert torch.equal(greedy, d.ids[d.prompt_len :])
        torch.testing.assert_close(d.aux[:, :32], hs[1][0])
        # layer 2, normed (transformers' RMSNorm computes in fp32, hence the tolerance)
        torch.testing.assert_close(model.model.norm(d.aux[:, 32:]), hs[3][0], atol=1e-6, rtol=0)
        torch.testing.assert_close(d.final, hs[3][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("compile_step", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_reading_one_step_late_keeps_the_schedule_and_every_state(compile_step, monkeypatch):
    """Answers ending at the cache's last position (prompt + budget = max_len), some at their
    first token, through two slots: reading each step's tokens after launching the next gives
    the synchronous loop's results, bit for bit, in as many steps and prefills (the same
    schedule), and every stored state equals one forward over prompt + answer; the same with a
    compiled step."""
    from splitserve.target.runtime.regen import Regenerator, Request

    monkeypatch.setattr(Regenerator, "compile_step", compile_step)
    model = tiny(num_hidden_layers=2)
    g = torch.Generator().manual_seed(5)
    shapes = [(14, 10), (4, 20), (20, 4), (6, 3), (23, 1), (9, 1), (5, 7)]
    requests = [Request(torch.randint(0, 100, (n,), generator=g), b, seed=0) for n, b in shapes]
    runs = {}
    for late in (True, False):
        monkeypatch.setattr(Regenerator, "one_ahead", late)
        engine = Regenerator(model, [0, 1], slots=2, max_len=24, eos=(), nucleus=False)
        runs[late] = engine.run(requests), (engine.steps, engine.prefills)
    assert runs[True][1] == runs[False][1]
    for late, sync, (n, b) in zip(runs[True][0], runs[False][0], shapes, strict=True):
        assert late.ids.numel() == n + b and torch.equal(late.ids, sync.ids)
        assert torch.equal(late.aux, sync.aux) and torch.equal(late.final, sync.final)
        with torch.no_grad():
            ref = model(late.ids[None], output_hidden_states=True)
        assert torch.equal(ref.logits[0, n - 1 : -1].argmax(-1), late.ids[n:])
        torch.testing.assert_close(late.aux[:, :32], ref.hidden_states[1][0])
        torch.testing.assert_close(late.final, ref.hidden_states[2][0], atol=1e-6, rtol=0)


def test_idle_rows_rest_at_position_zero_while_others_generate():
    """Three slots, one long request and two short ones: once a short one is handed back (and
    no request is left to refill it) its row is fed position 0 every step, not its old context's
    next positions; the long answer is the same as alone in one slot."""
    from splitserve.target.runtime.regen import Regenerator, Request

    model = tiny(num_hidden_layers=2)
    g = torch.Generator().manual_seed(6)
    requests = [Request(torch.randint(0, 100, (n,), generator=g), b, seed=0) for n, b in
                [(6, 14), (5, 2), (4, 3)]]  # fmt: skip
    engine = Regenerator(model, [1], slots=3, max_len=24, eos=(), nucleus=False)
    assert [i for i, _ in engine.stream(requests)] == [1, 2, 0]  # the short ones end first
    alone = Regenerator(model, [1], slots=1, max_len=24, eos=(), nucleus=False).run(requests[:1])
    out = engine.run(requests)
    assert torch.equal(out[0].ids, alone[0].ids)
    torch.testing.assert_close(out[0].final, alone[0].final)
    engine.step()  # every row now idle: each was fed position 0, and moved to 1
    assert engine.pos[:, 0].tolist() == [1, 1, 1]
    assert engine.live.sum() == 0


def test_regeneration_reads_its_requests_lazily_with_the_same_schedule():
    """A generator of requests (what the static backend hands over: one stream over a worker's
    samples) is read a few beyond the free slots at a time, and gives the list's results in the
    list's number of steps (the schedule depends on the tokens only)."""
    from splitserve.target.runtime.regen import Regenerator, Request

    model = tiny(num_hidden_layers=2)
    g = torch.Generator().manual_seed(4)
    lengths = torch.randint(2, 9, (9,), generator=g).tolist()
    requests = [
        Request(torch.randint(0, 100, (n,), generator=g), b, seed=i, temperature=1.0)
        for i, (n, b) in enumerate(zip(lengths, [3, 7, 2] * 3, strict=True))
    ]
    listed = Regenerator(model, [1], slots=2, max_len=24, eos=(), nucleus=False)
    expected = listed.run(requests)
    lazy = Regenerator(model, [1], slots=2, max_len=24, eos=(), nucleus=False)
    pulled = []

    def source():
        for i, r in enumerate(requests):
            pulled.append(i)
            yield r

    stream = lazy.stream(source())
    first = next(stream)
    assert len(pulled) <= 2 + lazy.refill_group + 1  # not read to the end before working
    got = dict([first, *stream])
    assert len(pulled) == len(requests) and lazy.steps == listed.steps
    for i, d in enumerate(expected):
        assert torch.equal(got[i].ids, d.ids)
        torch.testing.assert_close(got[i].aux, d.aux, rtol=0, atol=0)


def test_a_refill_prefills_in_chunks_with_a_step_between_them(monkeypatch):
    """Four slots refilled in groups of four from prompts of 3 to 20 tokens with a budget of 16
    padded tokens a prefill forward: no forward holds more (a longer prompt goes alone); the
    first refill takes three forwards with a decode step of the rows already in between, and
    only its own four requests (the slot its first request frees meanwhile waits for the next
    group); every answer and stored state is what one forward per group gives (budget 0), with
    the step read one late or at once."""
    from splitserve.target.runtime.regen import Regenerator, Request

    model = tiny(num_hidden_layers=2)
    g = torch.Generator().manual_seed(7)
    shapes = [(3, 1), (12, 2), (5, 6), (4, 3), (9, 5), (20, 2), (6, 3), (3, 4), (7, 2), (4, 5)]
    requests = [
        Request(torch.randint(0, 100, (n,), generator=g), b, seed=i, temperature=1.0)
        for i, (n, b) in enumerate(shapes)
    ]
    index = {id(r.prompt): i for i, r in enumerate(requests)}
    calls, done = [], []  # per prefill forward: (budget, steps before it, tokens, requests, done)
    prefill = Regenerator.prefill

    def recorded(self, slots, prompts):
        tokens = len(prompts) * max(p.numel() for p in prompts)
        which = [index[id(p)] for p in prompts]
        calls.append((self.prefill_tokens, self.steps, tokens, which, len(done)))
        return prefill(self, slots, prompts)

    monkeypatch.setattr(Regenerator, "prefill", recorded)
    runs = {}
    for budget, late in ((0, True), (16, True), (16, False)):
        monkeypatch.setattr(Regenerator, "prefill_tokens", budget)
        monkeypatch.setattr(Regenerator, "one_ahead", late)
        engine = Regenerator(model, [1], slots=4, max_len=24, eos=(), nucleus=True)
        engine.refill_group = 4
        done.clear()
        out = [None] * len(requests)
        for i, result in engine.stream(requests):
            done.append(i)
            out[i] = result
        runs[budget, late] = out
    whole = [c[1:] for c in calls if c[0] == 0]
    chunked = [c[1:] for c in calls if c[0] == 16]
    assert whole[0][:3] == (0, 4 * 12, [0, 1, 2, 3])  # the idle batch's four in one forward
    # 3 | 12 | 5, 4: a step apart; request 0 (one new token) ends meanwhile, and its slot
    # waits: request 4 starts only once the whole first group is done
    assert [c[:3] for c in chunked[:3]] == [(0, 3, [0]), (1, 12, [1]), (2, 10, [2, 3])]
    assert next(c for c in chunked if 4 in c[2])[3] == 4
    assert all(tokens <= 16 or len(which) == 1 for _, tokens, which, _ in chunked)
    assert (20, [5]) in [c[1:3] for c in chunked]  # the 20-token prompt, alone
    assert sorted(i for c in chunked for i in c[2]) == sorted(list(range(10)) * 2)  # once a run
    for a, b, c in zip(runs[0, True], runs[16, True], runs[16, False], strict=True):
        assert torch.equal(a.ids, b.ids) and torch.equal(b.ids, c.ids)
        torch.testing.assert_close(a.aux, b.aux)
        torch.testing.assert_close(a.final, b.final)


def test_a_compiled_step_writes_the_cache_in_place():
    """Under torch.compile the cache writes stay in place: outputs and caches equal the eager
    step's, and the generated code allocates no buffer that spans the cache's positions (the
    step attends over 16 of its 48). A write into a view of one stacked [layers, ...] cache had
    been turned into a copy of each layer's cache and a rewrite of the whole cache on every
    step."""
    from torch._inductor.utils import run_and_get_code

    model = tiny(num_hidden_layers=2).float()
    eager = StaticDecoder(model, max_rows=3, max_len=48, capture_ids=[1])
    compiled = StaticDecoder(model, max_rows=3, max_len=48, capture_ids=[1])
    step = torch.compile(compiled, fullgraph=True, dynamic=False)
    g = torch.Generator().manual_seed(4)
    for t in range(2):  # the second step reads what the first wrote
        ids = torch.randint(0, 100, (2, 3), generator=g)
        pos = torch.arange(3)[None].repeat(2, 1) + 3 * t
        want = eager(ids, pos, 0, extent=16)
        got, code = run_and_get_code(step, ids, pos, 0, extent=16)
        for x, y in zip(want, got, strict=True):
            torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)
    for k, v in ((eager.k_cache, compiled.k_cache), (eager.v_cache, compiled.v_cache)):
        for a, b in zip(k, v, strict=True):
            assert a.abs().sum() > 0
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    positions = f", 48, {compiled.head_dim})"  # [..., max_len, head dim]: a copy of cache rows
    made = [x for c in code for x in c.splitlines() if "empty_strided" in x and positions in x]
    assert code and not made, made
