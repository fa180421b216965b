"""A pruned draft vocabulary (draft.draft_vocab_size): the maps, the loss in the pruned space,
lossless decoding with proposals mapped back to target ids, export round trips, a real run."""

import json
import math

import pytest
import torch
from conftest import llama_config, tiny_config, tiny_head, tiny_target
from test_losses import hand_batch

from draft_models import DraftConfig, DraftOutput, LossConfig, TargetSpec, build_draft
from draft_models.losses import distillation_loss
from draft_models.vocab import DraftVocab, check_size, to_draft, to_target, to_target_probs

# ----- the maps -----


def test_top_k_by_count_ties_by_id_and_both_maps_agree():
    counts = torch.tensor([5, 1, 5, 0, 3, 9, 1, 0, 3])
    vocab = DraftVocab.from_counts(counts, 4, block_size=2)
    # 9 (id 5), 5 (ids 0 and 2), then a tie of 3s: id 4 wins over id 8
    assert vocab.kept_ids.tolist() == [0, 2, 4, 5]
    assert vocab.d2t.dtype == torch.long and vocab.t2d.dtype == torch.bool
    assert vocab.d2t.tolist() == [0, 1, 2, 2]  # offsets: target id = i + d2t[i]
    assert vocab.t2d.tolist() == [True, False, True, False, True, True, False, False, False]
    # ids both ways
    assert to_target(torch.tensor([[3, 0], [1, 2]]), vocab.d2t).tolist() == [[5, 0], [2, 4]]
    ids, kept = to_draft(torch.tensor([5, 1, 4, 0, 8]), vocab.t2d)
    assert ids[kept].tolist() == [3, 2, 0] and kept.tolist() == [True, False, True, True, False]
    back = to_target(to_draft(vocab.kept_ids, vocab.t2d)[0], vocab.d2t)
    assert torch.equal(back, vocab.kept_ids)
    probs = to_target_probs(torch.tensor([[0.1, 0.2, 0.3, 0.4]]), vocab.d2t, 9)
    assert probs[0].tolist() == pytest.approx([0.1, 0, 0.2, 0, 0.3, 0.4, 0, 0, 0])
    # a sum over duplicated ids would not be a set: a tie of all-equal counts keeps the lowest ids
    assert DraftVocab.from_counts(torch.zeros(10), 3).kept_ids.tolist() == [0, 1, 2]


def test_inconsistent_maps_and_bad_sizes_are_refused():
    vocab = DraftVocab.from_kept(torch.tensor([7, 1, 4]), 9)
    assert vocab.kept_ids.tolist() == [1, 4, 7]
    flipped = DraftVocab(-vocab.d2t, vocab.t2d)  # offsets read the wrong way round
    with pytest.raises(ValueError, match="outside|marks"):
        flipped.validate()
    with pytest.raises(ValueError, match="t2d marks 0 ids"):  # maps never set
        DraftVocab(torch.zeros(3, dtype=torch.long), torch.zeros(9, dtype=torch.bool)).validate()
    for k in (4, 97, 200):  # <= block size, = V, > V
        with pytest.raises(ValueError, match=rf"draft_vocab_size={k} is invalid; .*4 < K < "):
            check_size(k, 97, 4)
        with pytest.raises(ValueError, match=rf"draft.draft_vocab_size={k} is invalid"):
            tiny_config(draft_vocab_size=k).resolve(tiny_target())
    with pytest.raises(ValueError, match="draft_vocab_size=-1 is invalid"):
        tiny_config(draft_vocab_size=-1).resolve(tiny_target())
    for variant in ("dflash", "eagle3"):
        with pytest.raises(ValueError, match=f"0 or null for arch={variant} .* for dspark"):
            tiny_config(variant, draft_vocab_size=20).resolve(tiny_target())
    assert tiny_config(draft_vocab_size=0).resolve(tiny_target()).draft_vocab_size is None


def tiny_pruned(kept, seed=0, **overrides):
    """A tiny DSpark draft over the kept target ids `kept`, its maps installed."""
    torch.manual_seed(seed)
    head = tiny_head()
    draft = build_draft(tiny_config(draft_vocab_size=len(kept), **overrides), tiny_target(), head)
    draft.set_vocab(DraftVocab.from_kept(torch.tensor(kept), head.vocab_size))
    return draft


def test_the_pruned_draft_starts_from_the_target_head_s_kept_rows():
    kept = [3, 10, 11, 40, 41, 42, 96]
    draft = tiny_pruned(kept)
    assert torch.equal(draft.lm_head.weight, draft.target_head.lm_head_weight[kept])
    assert draft.lm_head.weight.requires_grad  # trainable, unlike the target's
    assert draft.markov_head.markov_w1.weight.shape[0] == 97  # indexed by target ids
    assert draft.markov_head.markov_w2.weight.shape[0] == 7  # scores the kept ids
    state = draft.state_dict()
    assert state["d2t"].tolist() == [k - i for i, k in enumerate(kept)]
    assert state["t2d"].nonzero().flatten().tolist() == kept
    unset = build_draft(tiny_config(draft_vocab_size=7), tiny_target(), tiny_head())
    with pytest.raises(ValueError, match="draft_vocab_size=7: .*t2d marks 0 ids"):
        unset.check_vocab()


# ----- the loss in the pruned space -----

KEPT = [0, 2, 3]  # of V = 5
P_FULL_D = torch.tensor([[[0.1, 0.3, 0.2, 0.2, 0.2], [0.4, 0.1, 0.1, 0.3, 0.1]]])
P_FULL_T = torch.tensor([[[0.3, 0.1, 0.3, 0.1, 0.2], [0.1, 0.5, 0.2, 0.1, 0.1]]])


def pruned_hand_case(labels):
    """V = 5 with identity heads (logits = hidden = log p), kept ids 0, 2, 3: the draft's head
    is the identity's kept rows, so its logits are the kept coordinates of hidden."""
    head, batch = hand_batch(P_FULL_D, P_FULL_T, labels)
    vocab = DraftVocab.from_kept(torch.tensor(KEPT), 5)
    output_head = torch.eye(5)[KEPT].clone().requires_grad_(True)
    return head, batch, vocab, output_head


def restricted(p):
    q = p[..., KEPT]
    return q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize("fused", [True, False])
def test_pruned_loss_is_the_full_loss_on_the_restricted_logits(fused):
    """By hand: p_d and p_t are the softmax of the kept logits; CE of the mapped labels, TV, c*
    and BCE as in test_losses. It equals the full-vocabulary loss of a 3-token vocabulary built
    from the restricted distributions, and its gradient reaches the draft's own head."""
    labels = torch.tensor([[3, 0]])  # both kept: draft ids 2 and 0
    head, batch, vocab, output_head = pruned_hand_case(labels)
    conf = torch.tensor([[0.0, math.log(4.0)]])
    hidden = P_FULL_D.log().clone().requires_grad_(True)
    out = DraftOutput(hidden=hidden, confidence_logit=conf)
    cfg = LossConfig()
    res = distillation_loss(
        out, batch, head, cfg, fused=fused, vocab=vocab, output_head=output_head
    )
    p_d, p_t = restricted(P_FULL_D)[0], restricted(P_FULL_T)[0]
    l1 = (p_d - p_t).abs().sum(-1)
    c_star = 1 - 0.5 * l1
    ce = -torch.log(torch.stack((p_d[0, 2], p_d[1, 0])))
    c = torch.sigmoid(conf[0])
    bce = -(c_star * c.log() + (1 - c_star) * (1 - c).log())
    w = torch.tensor([1.0, math.exp(-1 / 4)])
    wm = lambda t: float((w * t).sum() / w.sum())  # noqa: E731
    assert res.parts["ce"] == pytest.approx(wm(ce), abs=1e-6)
    assert res.parts["distill"] == pytest.approx(wm(l1), abs=1e-6)
    assert res.parts["conf"] == pytest.approx(wm(bce), abs=1e-6)
    assert res.c_star == pytest.approx(c_star.tolist(), abs=1e-6)
    # the same as the full objective over a vocabulary of the three kept tokens
    head3, batch3 = hand_batch(restricted(P_FULL_D), restricted(P_FULL_T), torch.tensor([[2, 0]]))
    full = distillation_loss(
        DraftOutput(hidden=restricted(P_FULL_D).log(), confidence_logit=conf), batch3, head3, cfg
    )
    assert res.loss.item() == pytest.approx(full.loss.item(), abs=1e-6)
    assert res.parts == pytest.approx(full.parts, abs=1e-6)
    res.loss.backward()
    assert output_head.grad is not None and output_head.grad.abs().sum() > 0
    assert hidden.grad[..., [1, 4]].abs().max() == 0  # dropped ids carry no gradient


def test_a_label_outside_the_kept_set_drops_out_of_ce_only():
    labels = torch.tensor([[1, 0]])  # id 1 is not kept: position 0 leaves CE, not TV
    head, batch, vocab, output_head = pruned_hand_case(labels)
    res = distillation_loss(
        DraftOutput(hidden=P_FULL_D.log()), batch, head, LossConfig(), vocab=vocab,
        output_head=output_head,
    )  # fmt: skip
    p_d, p_t = restricted(P_FULL_D)[0], restricted(P_FULL_T)[0]
    w = torch.tensor([1.0, math.exp(-1 / 4)])
    assert res.parts["ce"] == pytest.approx(float(-w[1] * p_d[1, 0].log() / w.sum()), abs=1e-6)
    l1 = (p_d - p_t).abs().sum(-1)
    assert res.parts["distill"] == pytest.approx(float((w * l1).sum() / w.sum()), abs=1e-6)
    # fused and reference forms agree on it, gradients of the draft's head included
    grads = []
    for fused in (True, False):
        oh = output_head.detach().clone().requires_grad_(True)
        hidden = P_FULL_D.log().clone().requires_grad_(True)
        r = distillation_loss(
            DraftOutput(hidden=hidden), batch, head, LossConfig(), fused=fused, vocab=vocab,
            output_head=oh,
        )  # fmt: skip
        r.loss.backward()
        grads.append((r.loss.item(), oh.grad, hidden.grad))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1])
    torch.testing.assert_close(grads[0][2], grads[1][2])


def test_a_pruned_draft_trains_through_its_own_loss():
    """draft_loss on a packed batch: fused equals reference (loss and every gradient, the head's
    and Markov W2's [K, r] included)."""
    from conftest import random_sample

    from draft_models import pack_sequences
    from draft_models.losses import draft_loss

    draft = tiny_pruned(list(range(0, 97, 2)))  # the even ids
    batch = pack_sequences(
        [random_sample(40, seed=1), random_sample(33, seed=2)],
        num_anchors=6, block_size=4, num_slots=4, mask_token_id=draft.cfg.mask_token_id, seed=0,
    )  # fmt: skip
    labels = batch.labels[batch.label_mask]
    assert (labels % 2 == 1).any() and (labels % 2 == 0).any()  # some labels dropped, some not
    grads = []
    for fused in (True, False):
        draft.zero_grad()
        out = draft(batch)
        if fused:
            res = draft_loss(draft, out, batch)
        else:
            res = distillation_loss(
                out, batch, draft.target_head, draft.cfg.loss, draft.vocab_bias_weight,
                fused=False, vocab=draft.vocab, output_head=draft.lm_head.weight,
            )  # fmt: skip
        res.loss.backward()
        grads.append((res.loss.item(), {n: p.grad.clone() for n, p in draft.named_parameters()}))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-5)
    for name, g in grads[0][1].items():
        torch.testing.assert_close(g, grads[1][1][name], rtol=1e-4, atol=1e-6, msg=name)
    assert grads[0][1]["lm_head.weight"].abs().sum() > 0


# ----- decoding -----


def decoding_target(vocab=96, seed=0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = llama_config(vocab_size=vocab, tie_word_embeddings=False)
    return AutoModelForCausalLM.from_config(cfg).double().eval()


def pruned_draft_for(target, kept, **overrides):
    from draft_models import FrozenTargetHead

    spec = TargetSpec.from_hf_config(target.config)
    base = dict(num_layers=1, block_size=4, markov_rank=8, target_layer_ids=[1, 2])
    base.update(overrides, draft_vocab_size=len(kept))
    torch.manual_seed(1)
    draft = build_draft(DraftConfig(**base), spec, FrozenTargetHead.from_hf_model(target))
    draft = draft.double()
    draft.set_vocab(DraftVocab.from_kept(torch.tensor(kept), spec.vocab_size))
    return draft


def greedy(target, prompt, n):
    from serving.decoder import SpeculativeDecoder

    return SpeculativeDecoder(target, None, max_len=96).generate(prompt, n).token_ids


@pytest.mark.parametrize("runtime", ["eager", "static"])
def test_greedy_decoding_with_a_pruned_draft_equals_target_greedy(runtime):
    """A pruned draft whose kept set misses tokens the target emits: output identical to
    target-only greedy, and its accepted drafts are kept ids."""
    from serving.decoder import SpeculativeDecoder

    target = decoding_target()
    with torch.no_grad():
        target.lm_head.weight.mul_(4)  # a peaked target: drafts get accepted
    prompt = [5, 17, 42, 8]
    want = greedy(target, prompt, 40)
    kept = sorted(set(want[:20]) | set(range(0, 96, 3)))  # most of what it says, not all
    assert set(want) - set(kept)  # tokens the draft can never propose
    draft = pruned_draft_for(target, kept)
    # trained-like: its head's kept rows are the target's, so it proposes what the target says
    res = SpeculativeDecoder(target, draft, runtime=runtime, max_len=96).generate(prompt, 40)
    assert res.token_ids == want
    assert max(res.accept_lengths) > 1  # some drafts were accepted


def test_proposals_are_the_pruned_argmax_mapped_to_target_ids():
    """Greedy proposal = kept_ids[argmax(own head + Markov bias)] slot by slot, fed back as the
    target id; at T = 1 the proposal distribution is zero outside the kept set."""
    from draft_models import DSparkProposer
    from draft_models.packed_attention import TokenIndex
    from serving.decoder import SpeculativeDecoder

    target = decoding_target()
    kept = list(range(1, 96, 2))  # odd ids: draft id i is target id 2i + 1
    draft = pruned_draft_for(target, kept)
    with torch.no_grad():
        draft.lm_head.weight.normal_(std=1.0)  # distinct from the target's rows
        prompt = torch.tensor([5, 17, 42, 8, 3])
        dec = SpeculativeDecoder(target, draft)
        dec.engine.begin(64)
        _, feats = dec.engine.forward(prompt, 0)
        gamma = draft.cfg.block_size
        proposer = DSparkProposer(draft, gamma, torch.ones(gamma, dtype=torch.float64), 64)
        proposer.commit(feats, prompt, 0)
        anchor = torch.tensor([12])
        tokens, _, _ = proposer.propose(anchor, 5, 0.0, None)
        assert all(t % 2 == 1 for t in tokens.tolist())
        ids = torch.tensor([[12] + [draft.cfg.mask_token_id] * (gamma - 1)])
        hidden = draft.backbone(
            ids, TokenIndex.single_block(5, gamma, "cpu"),
            [(k[:5], v[:5]) for k, v in proposer.ctx_kv], TokenIndex.context(5, "cpu"),
            backend="dense",
        )  # fmt: skip
        prev = torch.cat((anchor, tokens[:-1]))[None]  # target ids, as the Markov W1 reads them
        out = draft.heads(hidden, prev)
        logits = draft.lm_head(hidden) + draft.markov_head.markov_w2(out.seq_latent)
        assert tokens.tolist() == [2 * i + 1 for i in logits[0].argmax(-1).tolist()]
        _, dists, _ = proposer.propose(anchor, 5, 1.0, None)
    assert dists.shape == (gamma, 96)
    assert dists[:, 0::2].abs().max() == 0 and torch.allclose(dists.sum(-1), dists.new_ones(gamma))


def test_fused_and_split_sampling_agree_with_a_pruned_draft():
    """At T = 1 the fused step (static runtime) and the split step (eager) draw the same tokens
    from the same seed with a pruned draft, as with a full one."""
    from serving.decoder import SpeculativeDecoder

    target = decoding_target()
    draft = pruned_draft_for(target, list(range(0, 96, 2)))
    decs = {
        rt: SpeculativeDecoder(target, draft, runtime=rt, max_len=96) for rt in ("eager", "static")
    }
    for seed in range(3):
        a = decs["eager"].generate([3, 9, 27, 81], 30, temperature=1.0, seed=seed)
        b = decs["static"].generate([3, 9, 27, 81], 30, temperature=1.0, seed=seed)
        assert a.token_ids == b.token_ids and a.accepted == b.accepted


@pytest.mark.slow
def test_sampling_with_a_pruned_draft_matches_the_target_distribution():
    """Chi-square over (x1, x2) of two sampled tokens, as test_decoder's check: with a draft
    that can never propose ids 0 and 4, the law is still exactly the target's."""
    from test_decoder import assert_two_token_law, two_token_law

    from serving.decoder import SpeculativeDecoder
    from serving.scheduler import SchedulerConfig

    vocab = 6
    target = decoding_target(vocab=vocab, seed=3)
    with torch.no_grad():
        target.lm_head.weight.mul_(20)
    draft = pruned_draft_for(target, [1, 2, 3], block_size=2, mask_token_id=5)
    dec = SpeculativeDecoder(target, draft, scheduler=SchedulerConfig("fixed"), runtime="static")
    exact = two_token_law(target, [1, 2, 3], vocab)
    assert exact[[0, 4]].sum() + exact[:, [0, 4]].sum() > 0.05  # mass the draft cannot propose
    assert_two_token_law(dec, target, [1, 2, 3], vocab)


# ----- export -----


@pytest.fixture
def pruned_checkpoint(tmp_path):
    """A checkpoint as the trainer writes it for a pruned draft of a tiny random Llama target
    saved to disk (export reads the target's config.json and head from there)."""
    from splitserve.checkpoint import final_dir, seal, write_draft_files

    target = decoding_target()
    model_dir = tmp_path / "target"
    target.float().save_pretrained(model_dir)
    target = target.double()
    kept = sorted(set(range(0, 96, 3)) | {5, 7})
    draft = pruned_draft_for(target, kept).float()
    with torch.no_grad():  # trained-like: not the initial copy of the target's rows
        draft.lm_head.weight.add_(torch.randn_like(draft.lm_head.weight) * 0.1)
    staging = tmp_path / "run" / "checkpoints" / ".tmp-step-00000001"
    write_draft_files(
        staging,
        state_dict=draft.state_dict(),
        draft_cfg=draft.cfg,
        target=TargetSpec.from_hf_config(target.config),
        model_dir=str(model_dir),
        config_yaml="{}\n",
        step=1,
    )
    final = final_dir(tmp_path / "run", 1)
    seal(staging, final)
    return final, target


def proposals(target, draft, prompt=(5, 17, 42, 8), n=30, temperature=0.0):
    from serving.decoder import SpeculativeDecoder

    res = SpeculativeDecoder(target, draft.double(), max_len=96).generate(
        list(prompt), n, temperature=temperature, seed=7
    )
    return res.token_ids, res.accept_lengths


@pytest.mark.parametrize("fmt", ["speculators", "hf"])
def test_export_round_trip_keeps_the_pruned_vocabulary(pruned_checkpoint, tmp_path, fmt):
    from safetensors.torch import load_file

    from draft_models import FrozenTargetHead
    from serving.export import export, load_exported
    from splitserve.checkpoint import read_draft, read_draft_vocab, read_init_draft

    ckpt, target = pruned_checkpoint
    original = read_draft(ckpt)
    out = export(ckpt, tmp_path / fmt, dtype="float32", fmt=fmt)
    config = json.loads((out / "config.json").read_text())
    weights = load_file(str(out / "model.safetensors"))
    k = original.cfg.draft_vocab_size
    assert config["draft_vocab_size"] == k == 34
    assert weights["d2t"].dtype == torch.int64 and weights["d2t"].shape == (k,)
    assert weights["t2d"].dtype == torch.bool and weights["t2d"].shape == (96,)
    assert weights["lm_head.weight"].shape == (k, 32)  # the draft's own, not the target's copy
    assert torch.equal(weights["lm_head.weight"], original.weights["lm_head.weight"])
    assert weights["markov_head.markov_w2.weight"].shape == (k, 8)
    if fmt == "speculators":
        assert config["transformer_layer_config"]["vocab_size"] == 96
    else:
        assert config["vocab_size"] == 96 and "embed_tokens.weight" in weights
    cfg, back = read_init_draft(out)
    assert cfg == original.cfg and back.keys() == original.weights.keys()
    assert all(torch.equal(back[n], original.weights[n]) for n in back)
    assert torch.equal(read_draft_vocab(out).d2t, read_draft_vocab(ckpt).d2t)
    # as another tool writes it, without our record: read from its own fields
    del config["splitserve_draft_config"]
    (out / "config.json").write_text(json.dumps(config))
    assert read_init_draft(out)[0].draft_vocab_size == k
    head = FrozenTargetHead.from_hf_model(target)
    mine = load_exported(out, head)
    base = build_draft(original.cfg, original.target, head).double()
    base.load_state_dict(original.weights)
    for temperature in (0.0, 1.0):
        assert proposals(target, mine, temperature=temperature) == proposals(
            target, base, temperature=temperature
        )


def test_sglang_export_and_launch_refuse_a_pruned_draft(pruned_checkpoint, tmp_path):
    from serving.export import export
    from serving.launch import build_command

    ckpt, _ = pruned_checkpoint
    with pytest.raises(ValueError, match=r"in the sglang format: a pruned draft vocabulary "
                       r"\(draft_vocab_size 34 < the target's 96\) .* has no d2t map"):  # fmt: skip
        export(ckpt, tmp_path / "s")
    assert not (tmp_path / "s").exists()
    out = export(ckpt, tmp_path / "hf", fmt="hf")
    with pytest.raises(ValueError, match="cannot be served by SGLang 0.5.23"):
        build_command("target", out)


def test_export_cli_says_who_reads_a_pruned_draft(pruned_checkpoint, tmp_path, capsys):
    from serving.export import main

    ckpt, _ = pruned_checkpoint
    assert main(["--checkpoint", str(ckpt), "--out", str(tmp_path / "o")]) == 2
    assert "cannot be served by SGLang 0.5.23" in capsys.readouterr().err
    assert main(["--checkpoint", str(ckpt), "--out", str(tmp_path / "o"), "--format", "hf"]) == 0
    out = capsys.readouterr().out
    assert "a pruned draft vocabulary (34 ids" in out and "sglang.launch_server" not in out


@pytest.mark.slow
def test_speculators_parses_a_pruned_export(pruned_checkpoint, tmp_path, speculators_site):
    """speculators 0.9.0's own DSparkSpeculatorConfig reads our draft_vocab_size, and its
    DSparkDraftModel built from that config has exactly our pruned weights' shapes."""
    from conftest import run_speculators
    from safetensors.torch import load_file

    from serving.export import export

    ckpt, _ = pruned_checkpoint
    out = export(ckpt, tmp_path / "spec", dtype="float32", fmt="speculators")
    code = f"""
import json
from speculators.models.dspark import DSparkSpeculatorConfig, DSparkDraftModel
config = DSparkSpeculatorConfig.from_dict(json.load(open({str(out / "config.json")!r})))
model = DSparkDraftModel(config)
shapes = {{n: list(t.shape) for n, t in model.state_dict().items()
          if n in ("d2t", "t2d", "lm_head.weight", "markov_head.markov_w1.weight",
                   "markov_head.markov_w2.weight")}}
print(json.dumps({{"k": config.draft_vocab_size, "shapes": shapes}}))
"""
    res = run_speculators(speculators_site, code)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    weights = load_file(str(out / "model.safetensors"))
    assert got["k"] == 34
    assert got["shapes"] == {n: list(weights[n].shape) for n in got["shapes"]}
    assert set(got["shapes"]) == {
        "d2t", "t2d", "lm_head.weight", "markov_head.markov_w1.weight",
        "markov_head.markov_w2.weight",
    }  # fmt: skip


# ----- a real run -----


@pytest.mark.slow
def test_training_with_a_pruned_vocabulary_saves_and_resumes_its_maps(tmp_path, monkeypatch, capfd):
    """SmolLM2, teacher-forced GSM8K answers: the maps are the top K of the answers' token
    counts, saved in every checkpoint; a resumed run reads them back (no recount) and keeps
    them; export carries them."""
    from test_training import TINY, compose_cfg

    import splitserve.train as train
    from splitserve.checkpoint import read_draft, read_draft_vocab

    k = 600
    overrides = TINY + [f"draft.draft_vocab_size={k}", "train.steps=2"]
    run_dir = tmp_path / "run"
    counted = []
    real = train.count_answer_tokens
    monkeypatch.setattr(train, "count_answer_tokens", lambda *a: counted.append(1) or real(*a))
    summary = train.run(compose_cfg(overrides), run_dir)
    assert counted == [1] and math.isfinite(summary["last_loss"])
    assert "draft vocabulary: the 600 most frequent of 49152 target ids" in capfd.readouterr().err
    first = read_draft(summary["checkpoint"])
    vocab = read_draft_vocab(first.path)
    assert first.cfg.draft_vocab_size == k and vocab.size == k
    assert first.weights["lm_head.weight"].shape == (k, 576)
    # the maps are buffers: not counted as parameters
    floats = [t for t in first.weights.values() if t.is_floating_point()]
    assert (
        summary["draft_params"]
        == sum(t.numel() for t in floats)
        < sum(t.numel() for t in first.weights.values())
    )
    # the end of an answer turn and the digits of GSM8K's answers are among the kept
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(first.model_dir)
    ids = [tok.convert_tokens_to_ids("<|im_end|>"), *tok.convert_tokens_to_ids(list("0123"))]
    assert vocab.t2d[ids].all()
    # the counts behind it: the top K of the answer tokens' counts, ties to the lower id
    from splitserve.data import load_prompts

    cfg = train.load_run_config(compose_cfg(overrides))
    counts = real(tok, load_prompts(cfg.data).train, cfg.data.max_length, 49152, k)
    assert torch.equal(vocab.t2d, DraftVocab.from_counts(counts, k).t2d)

    monkeypatch.setattr(train, "count_answer_tokens", lambda *a: pytest.fail("recounted"))
    resumed = train.run(compose_cfg(TINY + [f"draft.draft_vocab_size={k}"]), run_dir)
    assert resumed["steps"] == 4
    err = capfd.readouterr().err
    assert "resuming from" in err and "the maps stored in" in err
    last = read_draft(resumed["checkpoint"])
    assert torch.equal(last.weights["d2t"], first.weights["d2t"])
    assert torch.equal(last.weights["t2d"], first.weights["t2d"])
    assert not torch.equal(last.weights["lm_head.weight"], first.weights["lm_head.weight"])
    # a new run from its export starts from the exported maps (no recount either)
    from serving.export import export

    exported = export(last.path, tmp_path / "exported", dtype="float32", fmt="hf")
    init = [f"draft.draft_vocab_size={k}", "train.steps=1", f"train.init_from={exported}"]
    fresh = train.run(compose_cfg(TINY + init), tmp_path / "from_export")
    assert fresh["steps"] == 1 and f"the maps stored in {exported}" in capfd.readouterr().err
    # a resume with another K is refused by name
    with pytest.raises(ValueError, match=r"different draft config \(fields \['draft_vocab_size'\]"):
        train.run(compose_cfg(TINY + ["draft.draft_vocab_size=700", "train.steps=6"]), run_dir)
