"""Loss identities on hand-built distributions, gradient routing, frozen target weights."""

import copy
import dataclasses
import math

import pytest
import torch
from conftest import HostReads, random_sample, tiny_draft

from draft_models import (
    DraftOutput,
    FrozenTargetHead,
    LossConfig,
    distillation_loss,
    pack_sequences,
)
from draft_models.losses import draft_loss, label_weight_total
from draft_models.packing import PackedBatch, TokenIndex


def hand_batch(p_draft, p_target, labels):
    """An identity LM head makes logits == hidden, so hidden = log p builds exact distributions."""
    n, g, v = p_draft.shape
    head = FrozenTargetHead(torch.eye(v), torch.eye(v))
    empty = torch.zeros(0, dtype=torch.long)
    batch = PackedBatch(
        ctx_features=torch.zeros(0, v),
        ctx_input_ids=empty,
        ctx_index=TokenIndex(empty, empty, empty, empty),
        block_input_ids=torch.zeros(n, g, dtype=torch.long),
        block_seq=torch.zeros(n, dtype=torch.long),
        block_anchor=torch.ones(n, dtype=torch.long),
        anchor_ctx_row=torch.zeros(n, dtype=torch.long),
        prev_tokens=torch.zeros(n, g, dtype=torch.long),
        labels=labels,
        label_mask=torch.ones(n, g, dtype=torch.bool),
        target_hidden=p_target.log(),
    )
    return head, batch


P_D = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]])
P_T = torch.tensor([[[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]])
LABELS = torch.tensor([[0, 2]])


def test_tv_cstar_ce_and_bce_match_hand_computation():
    head, batch = hand_batch(P_D, P_T, LABELS)
    conf_logit = torch.tensor([[0.0, math.log(4.0)]])  # c = 0.5 and 0.8
    out = DraftOutput(hidden=P_D.log(), confidence_logit=conf_logit)
    cfg = LossConfig(position_decay=4.0)
    res = distillation_loss(out, batch, head, cfg)
    # position 0: L1 = 0.6, c* = 0.7; position 1: identical distributions, L1 = 0, c* = 1.
    assert res.c_star == pytest.approx([0.7, 1.0], abs=1e-6)
    assert res.top1 == [0.0, 1.0]
    w = torch.tensor([1.0, math.exp(-1 / 4)])
    ce = torch.tensor([-math.log(0.5), -math.log(0.8)])
    tv = torch.tensor([0.6, 0.0])
    bce = torch.tensor([-(0.7 * math.log(0.5) + 0.3 * math.log(0.5)), -math.log(0.8)])
    wm = lambda t: float((w * t).sum() / w.sum())  # noqa: E731
    assert res.parts["ce"] == pytest.approx(wm(ce), abs=1e-6)
    assert res.parts["distill"] == pytest.approx(wm(tv), abs=1e-6)
    assert res.parts["conf"] == pytest.approx(wm(bce), abs=1e-6)
    assert res.loss.item() == pytest.approx(0.1 * wm(ce) + 0.9 * wm(tv) + 1.0 * wm(bce), abs=1e-6)
    assert res.confidence == pytest.approx([0.5, 0.8], abs=1e-6)
    assert res.sim_tau == pytest.approx(1 + 0.7 + 0.7 * 1.0, abs=1e-6)


def test_forward_kl_option():
    head, batch = hand_batch(P_D, P_T, LABELS)
    res = distillation_loss(
        DraftOutput(hidden=P_D.log()), batch, head, LossConfig(divergence="forward_kl")
    )
    kl0 = sum(t * math.log(t / d) for t, d in zip([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], strict=True))
    w1 = math.exp(-1 / 4)
    assert res.parts["distill"] == pytest.approx(kl0 / (1 + w1), abs=1e-6)


def test_confidence_label_carries_no_gradient():
    head, batch = hand_batch(P_D, P_T, LABELS)
    hidden = P_D.log().clone().requires_grad_(True)
    conf_logit = torch.zeros(1, 2, requires_grad=True)
    cfg = LossConfig(ce_weight=0.0, distill_weight=0.0, confidence_weight=1.0)
    distillation_loss(
        DraftOutput(hidden=hidden, confidence_logit=conf_logit), batch, head, cfg
    ).loss.backward()
    assert hidden.grad is None or torch.count_nonzero(hidden.grad) == 0  # c* is a constant label
    w = torch.tensor([1.0, math.exp(-1 / 4)])
    expected = (torch.sigmoid(conf_logit.detach()) - torch.tensor([0.7, 1.0])) * w / w.sum()
    torch.testing.assert_close(conf_logit.grad, expected)


def test_masked_positions_do_not_count():
    head, batch = hand_batch(P_D, P_T, LABELS)
    batch.label_mask[0, 1] = False
    res = distillation_loss(DraftOutput(hidden=P_D.log()), batch, head, LossConfig())
    assert res.count == [1, 0]
    assert res.parts["distill"] == pytest.approx(0.6, abs=1e-6)
    assert math.isnan(res.sim_tau)  # no block has all its labels


def test_simulated_tau_averages_only_fully_labelled_blocks():
    p_d, p_t = P_D.expand(3, -1, -1).clone(), P_T.expand(3, -1, -1).clone()
    p_t[1] = p_d[1]  # c* = 1 at both positions: 1 + 1 + 1
    head, batch = hand_batch(p_d, p_t, LABELS.expand(3, -1))
    batch.label_mask[2, 1] = False  # not fully labelled: left out
    res = distillation_loss(DraftOutput(hidden=p_d.log()), batch, head, LossConfig())
    assert res.sim_tau == pytest.approx(((1 + 0.7 + 0.7) + 3.0) / 2, abs=1e-6)
    # label_rows from a packer: the same rows, found on the host
    rows = torch.nonzero(batch.label_mask.reshape(-1)).squeeze(1)
    given = dataclasses.replace(batch, label_rows=rows)
    again = distillation_loss(DraftOutput(hidden=p_d.log()), given, head, LossConfig())
    assert again.sim_tau == res.sim_tau and again.parts == res.parts


def _train_batch(model):
    samples = [random_sample(40, seed=1), random_sample(33, seed=2)]
    return pack_sequences(
        samples,
        num_anchors=6,
        block_size=model.cfg.block_size,
        num_slots=model.cfg.num_slots,
        mask_token_id=model.cfg.mask_token_id,
        seed=0,
    )


def _loss(model, batch, chunk_rows=256, fused=True, **loss_fields):
    out = model(batch)
    w2 = model.markov_head.markov_w2.weight if model.sequential_head is not None else None
    cfg = LossConfig(**{**vars(model.cfg.loss), "chunk_rows": chunk_rows, **loss_fields})
    return distillation_loss(out, batch, model.target_head, cfg, w2, fused=fused)


@pytest.mark.parametrize(
    "variant,loss_fields",
    [
        ("dspark", {}),
        ("dspark_rnn", {}),
        ("dspark_rnn", {"divergence": "forward_kl", "ce_weight": 0.5}),
        ("dspark_mla", {"confidence_weight": 0.3}),
        ("dspark_from_masks", {}),
        ("dflash", {}),
        ("eagle3", {"divergence": "forward_kl"}),
    ],
)
def test_fused_objective_equals_the_autograd_reference(variant, loss_fields):
    """Training's closed-form gradients against autograd over the plain objective: same loss,
    parts and metrics, same gradient in every parameter (the Markov projection included), under
    data-parallel normalisation and with uneven chunks."""
    model = tiny_draft(variant)
    if model.sequential_head is not None:
        with torch.no_grad():
            model.markov_head.markov_w2.weight.normal_(0, 0.1)
    batch = _train_batch(model)
    batch.label_mask[0, -2:] = False  # masked rows are left out of both
    batch.label_rows = None  # the packer's rows predate the edit: the loss finds them again
    norm = {"weight_total": torch.tensor(7.5), "scale": 2.0}
    results = []
    for fused in (True, False):
        model.zero_grad()
        out = model(batch)
        w2 = model.markov_head.markov_w2.weight if model.sequential_head is not None else None
        cfg = LossConfig(**{**vars(model.cfg.loss), "chunk_rows": 5, **loss_fields})
        res = distillation_loss(out, batch, model.target_head, cfg, w2, fused=fused, **norm)
        res.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((res, grads))
    (fused, g_fused), (ref, g_ref) = results
    assert fused.loss.item() == pytest.approx(ref.loss.item(), rel=1e-6)
    assert fused.parts == pytest.approx(ref.parts, rel=1e-6)
    for name in ("c_star", "top1", "confidence"):
        assert getattr(fused, name) == pytest.approx(getattr(ref, name), rel=1e-6, abs=1e-7)
    assert fused.count == ref.count and fused.sim_tau == pytest.approx(ref.sim_tau, rel=1e-6)
    assert sum(fused.count) == int(batch.label_mask.sum())  # the two edited rows are left out
    assert g_fused.keys() == g_ref.keys() and len(g_ref) == len(list(model.parameters()))
    for name, ref_grad in g_ref.items():  # float32 rounding, relative to the gradient's size
        atol = 1e-6 * float(ref_grad.abs().max())
        torch.testing.assert_close(g_fused[name], ref_grad, rtol=1e-4, atol=atol, msg=name)


def test_fused_objective_without_gradients_matches_the_reference():
    model = tiny_draft("dspark")
    batch = _train_batch(model)
    with torch.no_grad():
        fused, ref = _loss(model, batch), _loss(model, batch, fused=False)
    assert fused.loss.item() == pytest.approx(ref.loss.item(), rel=1e-6)
    assert fused.c_star == pytest.approx(ref.c_star, rel=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_chunking_does_not_change_loss_or_gradients(fused):
    model = tiny_draft("dspark_rnn")
    with torch.no_grad():  # a non-zero Markov projection so the bias path is exercised
        model.markov_head.markov_w2.weight.normal_(0, 0.1)
    batch = _train_batch(model)
    grads = []
    for rows in (1, 7, 10_000):
        model.zero_grad()
        res = _loss(model, batch, rows, fused=fused)
        res.loss.backward()
        grads.append((res.loss.item(), [p.grad.clone() for p in model.parameters()]))
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], rel=1e-6)
        for a, b in zip(g, grads[0][1], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "variant", ["dspark", "dspark_rnn", "dspark_mla", "dspark_from_masks", "dflash", "eagle3"]
)
def test_gradients_reach_only_trainable_parameters_and_target_head_stays_frozen(variant):
    model = tiny_draft(variant)
    head = model.target_head
    embed_before, lm_before = head.embed_weight.clone(), head.lm_head_weight.clone()
    names = {n for n, _ in model.named_parameters()}
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert not any("embed" in k or "lm_head" in k for k in model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    res = _loss(model, _train_batch(model))
    res.loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None, f"{n} got no gradient"
    assert head.embed_weight.grad is None and head.lm_head_weight.grad is None
    opt.step()
    torch.testing.assert_close(head.embed_weight, embed_before, rtol=0, atol=0)
    torch.testing.assert_close(head.lm_head_weight, lm_before, rtol=0, atol=0)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert len(moved) > 0.9 * len(before)


@pytest.mark.parametrize("variant", ["dspark", "dspark_from_masks"])
def test_training_reduces_the_loss(variant):
    model = tiny_draft(variant)
    batch = _train_batch(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        opt.zero_grad()
        res = _loss(model, batch)
        res.loss.backward()
        opt.step()
        first = first if first is not None else res.loss.item()
    assert res.loss.item() < 0.8 * first


def test_loss_kernel_is_chosen_by_name_and_a_bad_name_is_refused():
    from draft_models.loss_kernels import pick, torch_terms, triton_terms

    assert pick("auto", torch.device("cpu")) is torch_terms  # CPU: the torch kernel
    assert pick("torch", torch.device("cuda")) is torch_terms
    assert pick("triton", torch.device("cpu")) is triton_terms
    with pytest.raises(ValueError, match="loss.kernel"):
        LossConfig(kernel="cuda").validate()
    z = torch.zeros(2, 5)
    with pytest.raises((ValueError, RuntimeError), match="loss.kernel=triton"):
        triton_terms(z, z, torch.zeros(2, dtype=torch.long), z[:, 0], z[:, 0], "tv", None)


@pytest.mark.parametrize("detach", [False, True])
def test_a_detached_confidence_head_trains_alone_and_is_clipped_on_its_own(detach):
    """draft.confidence_detach: the confidence loss alone moves no weight of the backbone or the
    Markov head, only the confidence head, whose tensors' gradients are clipped to
    confidence_clip each; attached (the default), it moves the backbone too."""
    model = tiny_draft(confidence_detach=detach, confidence_clip=1e-3)
    batch = _train_batch(model)
    res = _loss(model, batch, ce_weight=0.0, distill_weight=0.0, confidence_weight=100.0)
    res.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    moved = {n for n, g in grads.items() if g is not None and g.abs().max() > 0}
    conf = {n for n in grads if n.startswith("confidence_head.")}
    assert conf <= moved
    assert any(n.startswith("layers.") for n in moved) != detach
    assert any(n.startswith("markov_head.") for n in moved) != detach
    for n in conf:
        norm = float(grads[n].norm())
        assert (norm <= 1e-3 * (1 + 1e-4)) == detach, (n, norm)


@pytest.mark.parametrize("variant", ["dspark_rnn", "dspark_mla"])
def test_compiled_layer_regions_give_the_eager_loss_and_gradients(variant):
    """train.compile_layers: the layers' regions around attention compiled by Inductor (its CPU
    code here) give eager's loss and gradients over two packed batches of other sizes. Graphs:
    one for the context's keys and values, two for each region around the block's attention
    (the first layer's input needs no gradient, the others' do), shared by every later layer
    and by the second batch (compiled dynamic: no recompile per size)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager = tiny_draft(variant, num_layers=3)
    compiled = copy.deepcopy(eager)
    for module in compiled.modules():
        if hasattr(module, "compile_regions"):
            module.compile_regions()
    for lengths, seed in (((40, 33), 1), ((57, 21), 2)):
        samples = [random_sample(n, seed=seed + i) for i, n in enumerate(lengths)]
        batch = pack_sequences(
            samples, num_anchors=6, block_size=eager.cfg.block_size,
            num_slots=eager.cfg.num_slots, mask_token_id=eager.cfg.mask_token_id, seed=0,
        )  # fmt: skip
        results = []
        for model in (eager, compiled):
            model.zero_grad()
            res = _loss(model, batch)
            res.loss.backward()
            results.append((res.loss.item(), [p.grad for p in model.parameters()]))
        (loss, grads), (loss_c, grads_c) = results
        assert loss_c == pytest.approx(loss, rel=1e-5)
        for a, b in zip(grads_c, grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        assert counters["stats"]["unique_graphs"] == 5


def test_staged_metrics_are_those_of_the_stage_and_read_as_plain_ones():
    """LossResult.stage snapshots the loss and metrics for a later read (the trainer stages a
    micro-batch's results when it is queued and reads them a step later): the same values as a
    plain read, unchanged by what is done to the device tensors afterwards."""
    from draft_models.losses import LossResult

    def metrics():
        return {
            "parts": torch.tensor([0.5, 0.25, 0.125]),
            "c_star": torch.tensor([0.9, 0.6]),
            "top1": torch.tensor([1.0, 0.5]),
            "count": torch.tensor([4.0, 3.0]),
            "sim_tau": torch.tensor([2.5]),
        }

    loss = torch.tensor(0.75, requires_grad=True) * 2
    plain, staged = LossResult(loss, metrics()), LossResult(loss, metrics())
    staged.stage()
    staged._pending["c_star"].add_(1.0)  # later work on the device tensors
    assert staged.loss_value == plain.loss_value == 1.5
    assert staged.parts == plain.parts == {"ce": 0.5, "distill": 0.25, "conf": 0.125}
    assert staged.c_star == plain.c_star == [pytest.approx(0.9), pytest.approx(0.6)]
    assert staged.count == plain.count == [4, 3] and staged.top1 == [1.0, 0.5]


def test_the_loss_its_metrics_gradients_and_flex_mask_never_read_the_device():
    """What a training step queues on the device after packing (the flex block mask, the loss
    with its staged metrics, the backward) reads no device value on the host and copies no
    Python data to the device: on a GPU either would make the host wait for the step, so the
    trainer could not queue the next one (a bincount and a tensor of term weights did)."""
    from draft_models.packed_attention import AttentionPlan, _flex_block_mask

    draft = tiny_draft("dspark")
    samples = [random_sample(n, seed=i, assistant_from=n // 4) for i, n in enumerate((300, 180))]
    batch = pack_sequences(
        samples, num_anchors=32, block_size=draft.cfg.block_size, num_slots=draft.cfg.num_slots,
        mask_token_id=draft.cfg.mask_token_id, seed=0,
    )  # fmt: skip
    out = draft(batch)  # (the CPU's attention backend plans per sequence on the host)
    keys = batch.ctx_index.cat(batch.block_index())
    plan = AttentionPlan(batch.block_index(), keys, backend="flex")
    with HostReads() as reads:
        _flex_block_mask(plan, len(batch.block_index()), len(keys), "cpu")
        res = draft_loss(
            draft,
            out,
            batch,
            weight_total=label_weight_total(batch, draft.cfg.loss.position_decay),
            scale=1,
        )
        res.loss.backward()
        res.stage()
    assert reads.ops == []
    assert math.isfinite(res.loss_value)
    with HostReads() as reads:  # the detector itself: a read it must see
        int(res.loss.detach())
        torch.bincount(batch.labels.reshape(-1))
        batch.labels[batch.label_mask.bool()]
    assert reads.ops == ["_local_scalar_dense.default", "bincount.default", "index.Tensor"]
