"""Target side: the embedded SmolLM2 target, hidden-state capture, assistant-only loss masks."""

import json
import os

import pytest
import torch
from conftest import llama_config
from transformers import AutoModelForCausalLM, AutoTokenizer

from splitserve.target.capture import capture_states, target_sample
from splitserve.target.chat import answer_token_counts, render_with_loss_mask
from splitserve.target.embedded import MARKER, ensure_smollm2, smollm2_gguf


@pytest.fixture(scope="session")
def smol_dir(tmp_path_factory):
    return ensure_smollm2(tmp_path_factory.mktemp("cache"))


@pytest.mark.slow
def test_smollm2_converts_once_and_generates_like_the_gguf(smol_dir, tmp_path_factory):
    tok = AutoTokenizer.from_pretrained(smol_dir)
    model = AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32).eval()
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    out = model.generate(prompt, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, prompt.shape[1] :], skip_special_tokens=True)
    assert "Paris" in text
    gguf = smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    torch.testing.assert_close(model(prompt).logits, reference(prompt).logits, rtol=0, atol=0)
    # a plain directory: the weights are dequantised, so no GGUF quantizer comes with a load
    assert "quantization_config" not in json.loads((smol_dir / "config.json").read_text())
    assert getattr(model, "hf_quantizer", None) is None
    marker = json.loads((smol_dir / MARKER).read_text())
    assert marker["bytes"] == gguf.stat().st_size
    mtime = (smol_dir / MARKER).stat().st_mtime
    # cached
    assert (
        ensure_smollm2(smol_dir.parent) == smol_dir and (smol_dir / MARKER).stat().st_mtime == mtime
    )


@pytest.mark.slow
def test_an_interrupted_conversion_is_redone(tmp_path):
    dest = tmp_path / "smollm2-135m-instruct-float32"
    dest.mkdir()
    (dest / "config.json").write_text("{")  # a conversion that died before its marker
    assert ensure_smollm2(tmp_path) == dest
    assert (dest / MARKER).is_file() and json.loads((dest / "config.json").read_text())[
        "model_type"
    ] == "llama"


def test_a_directory_converted_with_the_gguf_s_quantization_config_is_repaired(tmp_path):
    """Conversions before the fix saved the GGUF's quantization_config beside dequantised
    weights; a complete directory (its marker there) keeps everything else and loses that."""
    dest = tmp_path / "smollm2-135m-instruct-float32"
    dest.mkdir()
    config = {"model_type": "llama", "quantization_config": {"quant_method": "gguf"}}
    (dest / "config.json").write_text(json.dumps(config))
    (dest / MARKER).write_text("{}")
    assert ensure_smollm2(tmp_path) == dest
    assert json.loads((dest / "config.json").read_text()) == {"model_type": "llama"}
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", MARKER]


def test_assistant_only_loss_mask_on_the_real_chat_template(smol_dir):
    tok = AutoTokenizer.from_pretrained(smol_dir)
    messages = [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "2 + 3 = 5."},
        {"role": "user", "content": "Times 4?"},
        {"role": "assistant", "content": "5 x 4 = 20."},
    ]
    ids, mask = render_with_loss_mask(tok, messages)
    spans = []
    for t in range(len(ids)):
        if mask[t] and (t == 0 or not mask[t - 1]):
            start = t
        if mask[t] and (t == len(ids) - 1 or not mask[t + 1]):
            spans.append(tok.decode(ids[start : t + 1]))
    assert [s.strip() for s in spans] == ["2 + 3 = 5.<|im_end|>", "5 x 4 = 20.<|im_end|>"]
    assert "Add 2 and 3." in tok.decode(ids[~mask])
    # ending with a user turn: the answer's span found by rendering up to it, not the whole
    ids3, mask3 = render_with_loss_mask(tok, messages[:3])
    assert torch.equal(ids3, ids[: len(ids3)]) and torch.equal(mask3, mask[: len(ids3)])
    assert tok.decode(ids3[mask3]).strip() == "2 + 3 = 5.<|im_end|>"
    with pytest.raises(ValueError, match="assistant turn"):
        render_with_loss_mask(tok, messages[:1])
    # an answer with no prompt: the template opens with its default system prompt, which the
    # mask would have covered; refused by name. After a system message it is a normal answer
    assert "You are a helpful AI assistant" in tok.apply_chat_template(
        messages[1:2], tokenize=False
    )
    with pytest.raises(ValueError, match="message 0 is an assistant turn"):
        render_with_loss_mask(tok, messages[1:])
    system = [{"role": "system", "content": "Be brief."}, messages[1]]
    ids_s, mask_s = render_with_loss_mask(tok, system)
    assert tok.decode(ids_s[mask_s]).strip() == "2 + 3 = 5.<|im_end|>"
    assert "Be brief." in tok.decode(ids_s[~mask_s])
    # cut: the uncut render's first `cut` tokens, whichever turn the cut falls in
    for cut in range(1, len(ids) + 3):
        for msgs, (whole, whole_mask) in ((messages, (ids, mask)), (messages[:3], (ids3, mask3))):
            got, got_mask = render_with_loss_mask(tok, msgs, cut)
            assert torch.equal(got, whole[:cut]) and torch.equal(got_mask, whole_mask[:cut])
    with pytest.raises(ValueError, match="max_tokens=0"):
        render_with_loss_mask(tok, messages, 0)
    # a template that is not prefix-stable (it opens with the number of messages) is refused
    # once a render breaks the ones before it; a cut that keeps only the first render (the
    # prompt, no loss) checks nothing past it, and returns that render's own tokens
    tok.chat_template = "{{ messages | length }}" + tok.chat_template
    rendered = tok.apply_chat_template(messages[:1], add_generation_prompt=True, return_dict=True)
    prompt = len(rendered["input_ids"])
    for cut in (None, prompt + 1, len(ids)):
        with pytest.raises(
            ValueError, match="prefix-stable: rendering the conversation up to message 1 "
        ):
            render_with_loss_mask(tok, messages, cut)
    got, got_mask = render_with_loss_mask(tok, messages, prompt)
    assert tok.decode(got).startswith("1<|im_start|>") and not got_mask.any()


def tiny_llama():
    torch.manual_seed(0)
    cfg = llama_config()
    return AutoModelForCausalLM.from_config(cfg).eval()


def test_capture_returns_layer_outputs_and_the_lm_head_input():
    model = tiny_llama()
    ids = torch.randint(0, 100, (17,))
    sample = target_sample(model, ids, torch.ones(17), [0, 2, 3])
    with torch.no_grad():
        ref = model(ids[None], output_hidden_states=True)
    hs = ref.hidden_states
    torch.testing.assert_close(sample.aux_hidden[:, :32], hs[1][0])
    torch.testing.assert_close(sample.aux_hidden[:, 32:64], hs[3][0])
    # the last layer's *own* output (pre-norm), not output_hidden_states' normed stand-in
    torch.testing.assert_close(model.model.norm(sample.aux_hidden[:, 64:]), hs[4][0])
    torch.testing.assert_close(
        model.lm_head(sample.final_hidden), ref.logits[0], rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match=r"\[4\] outside \[-1, 3\]"):
        with capture_states(model, [1, 4]):
            pass


def test_id_minus_one_captures_the_embedding_output():
    """As DeepSpec's feature layer -1: the input of layer 0 (hidden_states[0])."""
    model = tiny_llama()
    ids = torch.randint(0, 100, (9,))
    sample = target_sample(model, ids, torch.ones(9), [-1, 2])
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    torch.testing.assert_close(sample.aux_hidden[:, :32], hs[0][0], rtol=0, atol=0)
    torch.testing.assert_close(sample.aux_hidden[:, 32:], hs[3][0])


@pytest.mark.parametrize("kind", ["smollm2", "ling3_mini"])
def test_trainer_reads_exactly_the_targets_embedding_and_lm_head(kind, smol_dir):
    from splitserve.target.config import TargetConfig
    from splitserve.target.models import load_frozen_head, prepare_target_dir

    model_dir = prepare_target_dir(TargetConfig(kind=kind))
    head = load_frozen_head(model_dir, "cpu", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.testing.assert_close(
        head.embed_weight, model.get_input_embeddings().weight, rtol=0, atol=0
    )
    torch.testing.assert_close(
        head.lm_head_weight, model.get_output_embeddings().weight, rtol=0, atol=0
    )
    tied = head.embed_weight.data_ptr() == head.lm_head_weight.data_ptr()
    assert tied == (kind == "smollm2")


@pytest.mark.slow
def test_batched_regeneration_matches_one_at_a_time(smol_dir):
    """Greedy: one left-padded generate call over prompts of different lengths gives each sample
    the tokens, loss mask and captured states of unbatched regeneration."""
    from splitserve.data import DataConfig, load_prompts
    from splitserve.target.backends import TargetSetup, make_backend
    from splitserve.target.config import SamplingSetting, TargetConfig

    cfg = TargetConfig(max_new_tokens=20, sampling=[SamplingSetting(0.0)], generate_batch=3)
    target = make_backend(
        TargetSetup(
            smol_dir, cfg, [3, 15], device="cpu", seed=0, max_length=200, max_prompt_tokens=150
        )
    )
    convs = load_prompts(DataConfig()).train[:3]
    # different prompt lengths: padding is exercised
    assert len({len(c[0]["content"]) for c in convs}) == 3
    batched = target.produce_batch([0, 1, 2], convs)
    for g, conv, b in zip([0, 1, 2], convs, batched, strict=True):
        one = target.produce(g, conv)
        assert torch.equal(one.input_ids, b.input_ids) and torch.equal(one.loss_mask, b.loss_mask)
        torch.testing.assert_close(one.aux_hidden, b.aux_hidden)


def test_batched_producer_cuts_the_same_batches_after_a_resume():
    from splitserve.workers import BatchedProducer

    calls = []

    def produce_stream(gs, conversations):  # finishes its window's samples in reverse order
        assert isinstance(conversations, list)  # a windowed backend may index them
        calls.append(list(gs))
        for i in reversed(range(len(gs))):
            pulled.append(gs[i])
            yield i, f"sample{gs[i]}"

    pulled = []
    order = [-1, 0, 1, 2, 3, 4, 5, 6, 7]
    resumed = [2, 3, 4, 5, 6, 7]  # a run resumed after samples -1, 0, 1 were trained on
    producer = BatchedProducer(produce_stream, lambda g: f"conv{g}", order, set(resumed), 4)
    assert producer(2) == "sample2" and pulled == [2]  # returned as soon as it arrived
    assert [producer(g) for g in resumed[1:]] == [f"sample{g}" for g in resumed[1:]]
    assert calls == [[-1, 0, 1, 2], [3, 4, 5, 6], [7]]  # the uninterrupted run's windows, whole
    assert pulled == [2, 6, 5, 4, 3, 7]  # 1, 0, -1 were never waited for
    assert producer.ready == {}


def test_single_stream_producer_hands_over_only_needed_samples_lazily():
    """size 0 (a batch-invariant backend): one stream over the samples still needed, whose
    conversations are read only as the backend asks for them."""
    from splitserve.workers import BatchedProducer

    read, calls = [], []

    def conversation(g):
        read.append(g)
        return f"conv{g}"

    def produce_stream(gs, conversations):  # pairs up samples: finishes each pair in reverse
        calls.append(list(gs))
        it = iter(conversations)
        for i in range(0, len(gs), 2):
            got = [next(it) for _ in gs[i : i + 2]]
            for j in reversed(range(len(got))):
                yield i + j, f"sample{gs[i + j]} from {got[j]}"

    order = [-1, 0, 1, 2, 3, 4, 5]
    resumed = [1, 2, 3, 4, 5]
    producer = BatchedProducer(produce_stream, conversation, order, set(resumed), 0)
    assert producer(1) == "sample1 from conv1"
    assert read == [1, 2]  # lazily: the rest not yet read
    assert [producer(g) for g in resumed[1:]] == [f"sample{g} from conv{g}" for g in resumed[1:]]
    assert calls == [resumed]  # one stream, nothing regenerated for -1 and 0
    assert read == resumed and producer.ready == {}


def test_samples_waiting_past_the_device_limit_wait_in_host_memory():
    """A long answer at the head of the line: samples finished meanwhile beyond `on_device`
    wait on the CPU (what they are sent from is the same data)."""
    from draft_models import SequenceSample
    from splitserve.workers import BatchedProducer

    def sample(g):
        n = 3 + g
        return SequenceSample(
            torch.arange(n), torch.ones(n, dtype=torch.bool), torch.full((n, 2), float(g)),
            torch.zeros(n, 2),
        )  # fmt: skip

    seen = []

    class Meta:  # records where each sample sits when it is stored
        def __init__(self, s):
            self.s = s

        def to_device(self, device):
            seen.append(device)
            return Meta(self.s.to_device(device))

    def produce_stream(gs, conversations):
        for i in reversed(range(len(gs))):  # the first sample finishes last
            yield i, Meta(sample(gs[i]))

    producer = BatchedProducer(produce_stream, str, list(range(5)), set(range(5)), 0, on_device=2)
    got = [producer(g).s for g in range(5)]
    assert seen == ["cpu", "cpu"]  # samples 2 and 1 arrived with 4 and 3 already waiting
    assert [int(s.aux_hidden[0, 0]) for s in got] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_regeneration_is_seeded_by_sample_id_in_any_process(smol_dir):
    """Sampling at temperature 1: two fresh backends (as a run and its resumed continuation would
    build) regenerate sample g identically; another id gives another answer."""
    from splitserve.data import DataConfig, load_prompts
    from splitserve.target.backends import TargetSetup, make_backend
    from splitserve.target.config import SamplingSetting, TargetConfig

    cfg = TargetConfig(max_new_tokens=12, sampling=[SamplingSetting(1.0, 1.0)])
    conv = load_prompts(DataConfig()).train[0]

    def fresh():
        return make_backend(
            TargetSetup(
                smol_dir, cfg, [3], device="cpu", seed=7, max_length=200, max_prompt_tokens=150
            )
        )

    first, again = fresh().regenerate(41, conv), fresh().regenerate(41, conv)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(fresh().regenerate(42, conv)[0], first[0])


def _backend(smol_dir, name, cfg, layer_ids=(3, 15), seed=0, lengths=(200, 150)):
    from splitserve.target.backends import TargetSetup, make_backend

    cfg.backend = name
    max_length, max_prompt_tokens = lengths
    return make_backend(
        TargetSetup(
            smol_dir, cfg, list(layer_ids), "cpu", seed=seed, max_length=max_length,
            max_prompt_tokens=max_prompt_tokens,
        )
    )  # fmt: skip


@pytest.mark.parametrize("lengths", [(200, 150), (60, 80)])
@pytest.mark.slow
def test_static_backend_regenerates_and_captures_as_the_hf_backend(smol_dir, lengths):
    """Greedy on the real SmolLM2, five prompts through two slots (refill): the static runtime's
    answers, loss masks and captured states (stored while generating) equal the hf backend's
    (generate, then a capture forward); also when prompts longer than max_length leave one new
    token that truncation then cuts (lengths = (max_length, max_prompt_tokens))."""
    from splitserve.data import DataConfig, load_prompts
    from splitserve.target.config import SamplingSetting, TargetConfig

    def cfg():
        return TargetConfig(max_new_tokens=10, sampling=[SamplingSetting(0.0)], generate_batch=2)

    convs = load_prompts(DataConfig()).train[:5]
    static = _backend(smol_dir, "static", cfg(), lengths=lengths)
    hf = _backend(smol_dir, "hf", cfg(), lengths=lengths)
    assert static.window == 0 and static.batch_invariant  # one stream over the samples
    made = static.produce_batch(list(range(5)), convs)
    for g, conv, s in zip(range(5), convs, made, strict=True):
        h = hf.produce(g, conv)
        assert torch.equal(s.input_ids, h.input_ids) and torch.equal(s.loss_mask, h.loss_mask)
        torch.testing.assert_close(s.aux_hidden, h.aux_hidden, atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(s.final_hidden, h.final_hidden, atol=2e-4, rtol=1e-4)
        assert s.input_ids.numel() <= lengths[0]


@pytest.mark.slow
def test_static_backend_samples_depend_only_on_their_seed(smol_dir):
    """Temperature 1, top_p 0.9: sample g is the same token for token whether it is generated
    alone, beside other samples, in another slot or by a fresh backend (a resumed run); another
    id or run seed gives another answer. Teacher forcing (no regeneration) captures the dataset's
    answer."""
    from splitserve.data import DataConfig, load_prompts
    from splitserve.target.config import SamplingSetting, TargetConfig

    def cfg(slots, regenerate=True):
        return TargetConfig(
            max_new_tokens=8, sampling=[SamplingSetting(1.0, 0.9)], generate_batch=slots,
            regenerate=regenerate,
        )  # fmt: skip

    convs = load_prompts(DataConfig()).train[:4]
    three = _backend(smol_dir, "static", cfg(3)).produce_batch([10, 11, 12, 13], convs)
    alone = _backend(smol_dir, "static", cfg(1)).produce_batch([12, 10], [convs[2], convs[0]])
    assert torch.equal(alone[0].input_ids, three[2].input_ids)
    assert torch.equal(alone[1].input_ids, three[0].input_ids)
    other = _backend(smol_dir, "static", cfg(1)).produce_batch([14], [convs[0]])[0]
    reseeded = _backend(smol_dir, "static", cfg(1), seed=1).produce_batch([10], [convs[0]])[0]
    assert not torch.equal(other.input_ids, three[0].input_ids)
    assert not torch.equal(reseeded.input_ids, three[0].input_ids)
    # teacher forcing: groups of 2 (the cache's rows) over 4 answers of different lengths,
    # each equal to the hf backend's one-at-a-time capture, in order
    forced = _backend(smol_dir, "static", cfg(2, regenerate=False))
    assert forced.window == 0 and forced.prefill_group == 2
    hf = _backend(smol_dir, "hf", cfg(1, regenerate=False))
    got = forced.produce_batch([0, 1, 2, 3], convs)
    assert len({s.input_ids.numel() for s in got}) > 1  # padding in a group is exercised
    for g, (conv, s) in enumerate(zip(convs, got, strict=True)):
        ref = hf.produce(g, conv)
        assert torch.equal(s.input_ids, ref.input_ids) and torch.equal(s.loss_mask, ref.loss_mask)
        torch.testing.assert_close(s.aux_hidden, ref.aux_hidden, atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(s.final_hidden, ref.final_hidden, atol=2e-4, rtol=1e-4)
    # sample by sample, as a worker (and the colocated process) asks: still one forward per group
    from types import SimpleNamespace

    from splitserve.workers import sample_producer

    ctx = SimpleNamespace(cfg=SimpleNamespace(target=forced.cfg), conversation=convs.__getitem__)
    before = forced.engine.prefills
    produce = sample_producer(forced, ctx, [0, 1, 2, 3], [0, 1, 2, 3])
    for g, ref in enumerate(got):
        s = produce(g)
        assert torch.equal(s.input_ids, ref.input_ids)
        torch.testing.assert_close(s.aux_hidden, ref.aux_hidden)
    assert forced.engine.prefills - before == 2  # 4 answers, groups of 2
    forced.produce(0, convs[0])
    assert forced.engine.prefills - before == 3  # what the colocated process did per sample


def test_static_backend_refuses_a_hybrid_target():
    from splitserve.target.backends import TargetSetup, make_backend
    from splitserve.target.config import TargetConfig
    from splitserve.target.embedded import ensure_ling3_mini

    with pytest.raises(ValueError, match="backend=static runs llama, .* targets .* bailing_hybrid"):
        make_backend(
            TargetSetup(
                ensure_ling3_mini({}), TargetConfig(kind="ling3_mini", backend="static"), [1],
                "cpu", seed=0, max_length=64, max_prompt_tokens=32,
            )
        )  # fmt: skip


@pytest.mark.slow  # spawns two processes
def test_answer_token_counts_in_spawned_workers_equal_one_process(smol_dir):
    """The draft vocabulary's counts: every assistant-turn token of each conversation as
    render_with_loss_mask renders it, a conversation listed twice counted twice, a prompt-only
    one not at all; spread over two spawned workers (chunks of 500 conversations) the counts
    are the same, and a pool with no answers is refused by name."""
    from splitserve import train

    tok = AutoTokenizer.from_pretrained(smol_dir)
    convs = [
        [{"role": "user", "content": f"What is {i} + {i % 7}?"},
         {"role": "assistant", "content": f"{i} + {i % 7} = {2 * i % 7 + i} ... {'ok ' * (i % 5)}"}]
        for i in range(1100)
    ]  # fmt: skip
    pool = convs + convs[:3] + [[{"role": "user", "content": "no answer"}]]
    want = torch.zeros(49152, dtype=torch.long)
    for c in convs + convs[:3]:
        ids, mask = render_with_loss_mask(tok, c, 64)
        want += torch.bincount(ids[mask], minlength=49152)
    one = answer_token_counts(tok, pool, 64, 49152, workers=1)
    assert torch.equal(one, want) and want.sum() > 1100 * 5
    assert torch.equal(answer_token_counts(tok, pool, 64, 49152, workers=2), want)
    with pytest.raises(ValueError, match="draft.draft_vocab_size=600: the training data holds no"):
        train.count_answer_tokens(tok, pool[-1:], 64, 49152, 600)


def test_counting_workers_share_the_cores_among_a_nodes_ranks(monkeypatch):
    """The default pool: the cores this process may use, split among torchrun's ranks on the
    node (each counts), at least one and at most 16."""
    from splitserve.target.chat import count_workers

    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert count_workers() == min(cores, 16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores + 1))
    assert count_workers() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert count_workers() == max(min(cores // 2, 16), 1)
