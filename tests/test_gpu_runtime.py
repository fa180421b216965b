"""CUDA graphs of the runtime against the same code run eagerly (skipped without a GPU; run on
the device machine: `python -m pytest -q tests/test_gpu_runtime.py`). fp64 tiny models
throughout, so a graph replay must give exactly what the eager call gives."""

from types import SimpleNamespace

import pytest
import torch
from test_decoder import DRAFT_KINDS, MODES, draft_for, reference_greedy, tiny_target
from torch._dynamo.utils import counters

from serving.decoder import GraphedProposal, SpeculativeDecoder, make_proposer
from serving.evaluate import _decode
from splitserve.target.runtime import StaticEngine
from splitserve.target.runtime.graphs import capture_seconds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")


def test_graphed_verify_steps_equal_eager_ones_across_buckets():
    target = tiny_target().to(CUDA)
    graphed = StaticEngine(target, [0, 1], max_len=64, widths=[1, 3], buckets=[8, 16, 64])
    eager = StaticEngine(
        target, [0, 1], max_len=64, widths=[1, 3], buckets=[8, 16, 64], graphs=False
    )
    assert graphed.graphs and not eager.graphs
    seq = torch.randint(0, 96, (40,), generator=torch.Generator().manual_seed(0)).to(CUDA)
    start = 0
    for width in (5, 3, 1, 3, 3, 1, 3, 3, 1, 3, 3, 3, 1, 3, 3):
        a, b = (
            graphed.forward(seq[start : start + width], start),
            eager.forward(seq[start : start + width], start),
        )
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
        start += width - 1  # the last token is the next block's anchor
    assert {key[1] for key in graphed.step.graphs} == {8, 16, 64}


@pytest.mark.parametrize("arch", ["dspark", "dflash", "eagle3"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_graphed_proposal_equals_the_eager_one(arch, temperature):
    target = tiny_target().to(CUDA)
    draft = draft_for(target, **DRAFT_KINDS[arch]).to(CUDA)
    sts = torch.ones(4, dtype=torch.float64, device=CUDA)
    graphed_p, eager_p = (make_proposer(draft, 4, sts, 64) for _ in range(2))
    engine = StaticEngine(
        target, draft.cfg.target_layer_ids, max_len=64, graphs=False, buckets=[8, 16, 64]
    )
    graphed = GraphedProposal(graphed_p, engine)  # over the engine's buckets: 8, then 16
    with torch.no_grad():
        for seed, prompt in enumerate(([5, 17, 42, 8, 3], [9, 1, 4, 4, 60, 2, 7, 30, 11])):
            _, feats = engine.forward(torch.tensor(prompt, device=CUDA), 0)
            for p in (graphed_p, eager_p):
                p.reset(seed)
                p.commit(feats, torch.tensor(prompt, device=CUDA), 0)
            for anchor in (2, 40, 77):
                a = graphed(torch.tensor([anchor], device=CUDA), len(prompt), temperature)
                eager_p.anchor_in.fill_(anchor)  # the eager step over the same bucket
                eager_p.pos_in.fill_(len(prompt))
                b = eager_p.step(temperature, engine.extent_for(len(prompt) + 1))
                assert torch.equal(a[0], b[0])
                torch.testing.assert_close(a[2], b[2], rtol=0, atol=0)
                if temperature > 0:
                    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    assert set(graphed.graphs) == {(temperature, 8), (temperature, 16)}


@pytest.mark.parametrize("arch", ["dspark", "dflash", "eagle3"])
def test_graphed_speculative_decoding_is_lossless(arch):
    on_cpu = tiny_target()
    target = tiny_target().to(CUDA)
    dec = SpeculativeDecoder(
        target, draft_for(target, **DRAFT_KINDS[arch]).to(CUDA), runtime="static", max_len=128
    )
    assert dec.engine.graphs
    for prompt in ([3, 9, 27, 81], [5, 17, 42, 8, 3, 1, 1]):
        res = dec.generate(prompt, 40)
        assert res.token_ids == reference_greedy(on_cpu, prompt, 40)
    assert dec.fused is not None and dec.fused.graphs  # the fixed schedule: the fused step


@pytest.mark.parametrize("arch,mode", [("dspark", 0), ("eagle3", 0), ("dspark", 1)])
def test_graphed_decoding_equals_eager_decoding(arch, mode):
    """Graphed decoding (the fused step for the fixed schedule; the split step with a graphed
    proposal for the threshold schedule) against the same decoder with the engine's graphs off
    (the fused step then runs eagerly), greedy and at temperature 1, over two cache-length
    buckets: the same tokens and acceptance counts."""
    target = tiny_target().to(CUDA)
    draft = draft_for(target, **DRAFT_KINDS[arch]).to(CUDA)
    graphed, eager = (
        SpeculativeDecoder(target, draft, scheduler=MODES[mode], runtime="static", max_len=600)
        for _ in range(2)
    )
    eager.engine = StaticEngine(
        target, draft.cfg.target_layer_ids, max_len=600, widths=eager.verify_widths, graphs=False
    )
    for seed, (prompt, n) in enumerate((([3, 9, 27, 81], 300), ([5, 17, 42, 8, 3, 1, 1], 40))):
        for temperature in (0.0, 1.0):
            a, b = (
                d.generate(prompt, n, temperature=temperature, seed=seed) for d in (graphed, eager)
            )
            assert a.token_ids == b.token_ids
            assert a.accepted == b.accepted and a.widths == b.widths
    if mode == 0:
        assert {key[1] for key in graphed.fused.graphs} == {256, 512}
        assert {key[2] for key in graphed.fused.graphs} == {0.0, 1.0}
    else:
        assert graphed.fused is None
        assert {t for t, _ in graphed.graphed_proposal.graphs} == {0.0, 1.0}


@pytest.mark.parametrize("arch", ["dspark", "eagle3", None])
def test_graphed_batch_decoding_equals_eager_and_batch_one(arch):
    """The batch decoder's graphed fused step over 3 rows against the same rows with graphs off
    (the same tokens and acceptance counts, over two cache-length buckets), and each row against
    the batch-1 decoder (fp64 tiny models: the same tokens)."""
    from serving.batch_decoder import BatchDecoder

    target = tiny_target().to(CUDA)
    draft = draft_for(target, **DRAFT_KINDS[arch]).to(CUDA) if arch else None
    single = SpeculativeDecoder(target, draft, runtime="static", max_len=600)
    graphed, eager = BatchDecoder(single, 3), BatchDecoder(single, 3, graphs=False)
    assert graphed.engine.graphs and not eager.engine.graphs
    prompts = [[3, 9, 27, 81], [5, 17, 42, 8, 3, 1, 1], [7, 7]]
    for temperature in (0.0, 1.0):
        a, b = (
            d.generate(prompts, 300, temperature=temperature, seeds=[4, 5, 6])
            for d in (graphed, eager)
        )
        for x, y, prompt, seed in zip(a, b, prompts, [4, 5, 6], strict=True):
            assert x.token_ids == y.token_ids and x.accepted == y.accepted
            ref = single.generate(prompt, 300, temperature=temperature, seed=seed)
            assert x.token_ids == ref.token_ids
    assert {key[1] for key in graphed.step.graphs} == {256, 512}


def test_evaluate_leaves_graph_captures_out_of_its_timing():
    """serving.evaluate's timed decoding: the captures it makes (a width or bucket first used)
    are counted by graphs.capture_seconds and returned apart from the wall time; graphs kept
    across requests are not captured again."""
    target = tiny_target().to(CUDA)
    draft = draft_for(target, **DRAFT_KINDS["dspark"]).to(CUDA)
    dec = SpeculativeDecoder(target, draft, runtime="static", max_len=600)
    args = SimpleNamespace(temperature=0.0, max_new_tokens=300)
    prompt = [3, 9, 27, 81, 5, 17]  # 6 tokens: no verify width (1..5), so the prefill is eager
    before = capture_seconds()
    _, wall, captured = _decode(dec, [prompt], [0], args, None)
    graphs = len(dec.fused.graphs)
    assert graphs >= 2 and 0 < captured < wall  # buckets 256 and 512, and widths at the end
    assert capture_seconds() - before == pytest.approx(captured)
    _, wall, captured = _decode(dec, [prompt], [0], args, None)
    assert captured == 0.0 and len(dec.fused.graphs) == graphs


@pytest.mark.parametrize("arch,mode", [("dspark", 0), ("eagle3", 0), ("dspark", 1)])
def test_compiled_decoding_equals_graphed_decoding(arch, mode):
    """`compile=True` (graphs of torch.compile'd code: the fused step whole for the fixed
    schedule at one verify width; the verify steps and the proposal apart for the threshold
    schedule, over two verify widths) against the same decoder uncompiled, greedy and at
    temperature 1: the same tokens and acceptance counts (fp64: a fused kernel's other
    rounding order moves a logit by ~1e-16, far below any gap that decides a token here), and
    greedy equal to the target's own greedy decoding."""
    on_cpu = tiny_target()
    target = tiny_target().to(CUDA)
    draft = draft_for(target, **DRAFT_KINDS[arch]).to(CUDA)
    widths = [5] if mode == 0 else [2, 5]  # few graphs: each compiles
    counters.clear()
    compiled, plain = (
        SpeculativeDecoder(
            target,
            draft,
            scheduler=MODES[mode],
            runtime="static",
            max_len=256,
            verify_widths=widths,
            compile=c,
        )
        for c in (True, False)
    )
    for seed, prompt in enumerate(([3, 9, 27, 81], [5, 17, 42, 8, 3, 1, 1])):
        for temperature in (0.0, 1.0):
            a, b = (
                d.generate(prompt, 40, temperature=temperature, seed=seed)
                for d in (compiled, plain)
            )
            assert a.token_ids == b.token_ids
            assert a.accepted == b.accepted and a.widths == b.widths
            if temperature == 0.0:
                assert a.token_ids == reference_greedy(on_cpu, prompt, 40)
    assert counters["stats"]["unique_graphs"] > 0  # dynamo compiled what ran
    assert not counters["graph_break"], dict(counters["graph_break"])  # and in whole graphs
    if mode == 0:
        assert set(compiled.fused.graphs) == {(5, 256, 0.0), (5, 256, 1.0)}
    else:
        assert compiled.fused is None
        assert set(compiled.graphed_proposal.graphs) == {(0.0, 256), (1.0, 256)}


def test_graphed_regeneration_with_refills_equals_requests_run_alone(device=CUDA):
    """Seven requests through three slots, one step late, graphed: the live-row mask is pushed
    from pinned memory behind running steps and slots are refilled in between. Greedy, each
    answer and its states equal the request run alone in a one-slot eager engine (fp64); sampled
    (T=1, top_p 0.9: the Triton sampler), the answers and states equal the eager engine's with
    the same three slots, bit for bit."""
    from splitserve.target.runtime.regen import Regenerator, Request

    model = tiny_target().to(device)
    g = torch.Generator().manual_seed(8)
    shapes = [(5, 9), (3, 2), (8, 4), (4, 12), (6, 1), (2, 7), (7, 5)]
    greedy = [
        Request(torch.randint(0, 96, (n,), generator=g), b, seed=i)
        for i, (n, b) in enumerate(shapes)
    ]

    def engine(slots: int, graphs: bool | None = None) -> Regenerator:
        return Regenerator(
            model, [0, 1], slots=slots, max_len=32, eos=(), nucleus=True, graphs=graphs
        )

    answers = engine(3).run(greedy)
    for r, got in zip(greedy, answers, strict=True):
        (alone,) = engine(1, graphs=False).run([r])
        assert torch.equal(got.ids, alone.ids)
        torch.testing.assert_close(got.aux, alone.aux)
        torch.testing.assert_close(got.final, alone.final)
    sampled = [Request(r.prompt, r.budget, r.seed, temperature=1.0, top_p=0.9) for r in greedy]
    runs = engine(3).run(sampled), engine(3, graphs=False).run(sampled)
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.final, b.final)
    assert any(not torch.equal(a.ids, b.ids) for a, b in zip(runs[0], answers, strict=True))
