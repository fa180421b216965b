"""The DSpark training objective, applied in row chunks so memory stays bounded.

Per block prediction k (1-based) with weight w_k = exp(-(k-1)/decay):
  CE   = -log p_d,k(x*_k)
  TV   = || p_d,k - p_t,k ||_1                     (or forward KL(p_t || p_d) as an option)
  c*_k = 1 - 0.5 || p_d,k - p_t,k ||_1             (no gradient: a soft label)
  CONF = BCE(c_k, c*_k)
  L    = ce_weight * CE + distill_weight * TV + confidence_weight * CONF
each averaged over valid predictions with weights w_k (sum_k w_k m_k l_k / sum_k w_k m_k). m_k is
the label mask (a block stops being supervised at its first label outside the loss mask). Under
data parallelism the denominator is that sum over every rank's micro-batch and the loss is
scaled by the number of ranks (`weight_total`, `scale`; see DraftTrainer.train_step), so every
supervised token of a micro-step weighs the same whatever rank it lands on, as in DeepSpec.

Pruned draft vocabulary (`draft.draft_vocab_size` K, draft_models.vocab): the draft's logits come
from its own trainable head [K, H] (and a Markov W2 of K rows); the teacher's are the target's
logits at the K kept ids (the target head's kept rows), softmaxed as usual, so p_t is the target's
distribution renormalised over the kept set. A label outside the kept set drops out of CE (the
draft cannot name it: a target there would only push all kept ids down); TV and the confidence
term keep the row, since the restricted teacher is defined everywhere. Its denominator W is
unchanged, so such rows add zero CE rather than reweighting the rest. c* (and simulated tau) is
then measured against the restricted teacher: it overstates the real acceptance by at most the
target's probability mass outside the kept set. The Triton kernel runs unchanged on [rows, K].

Memory bound: only `chunk_rows` predictions have vocabulary-wide tensors alive at a time. The
training path (`_FusedObjective`) computes each chunk's gradient with respect to its inputs in
the same pass as its value, from closed forms, so nothing vocabulary-wide is kept for backward
or recomputed; peak extra memory is about 7 x chunk_rows x vocab x 4 bytes, independent of the
number of anchors and of the context length. The reference form (`fused=False`: autograd, each
chunk under activation checkpointing) defines the objective; the tests hold the two equal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from . import loss_kernels
from .config import LossConfig
from .heads import FrozenTargetHead
from .models import DraftOutput
from .packing import PackedBatch
from .vocab import DraftVocab, kept_ids, to_draft

PARTS = ("ce", "distill", "conf")


class LossResult:
    """A batch's loss and its metrics. They stay on the device until one is first read; then a
    single transfer brings them all. A plain read waits for every kernel queued before it;
    after `stage()` a read waits only for the work queued before the stage (the trainer stages
    each micro-batch's results once its step is queued, and reads them a step later)."""

    def __init__(self, loss: torch.Tensor, metrics: dict[str, torch.Tensor]) -> None:
        self.loss = loss  # scalar, differentiable
        self._pending = metrics  # name -> 1-D device tensor
        self._host: dict[str, list[float]] | None = None
        self._staged = None  # (host tensor, CUDA event or None)

    def _flat(self) -> torch.Tensor:
        parts = [self.loss.detach().double().reshape(1)]
        return torch.cat(parts + [t.detach().double().reshape(-1) for t in self._pending.values()])

    def stage(self) -> None:
        """Start the transfer now without waiting: on a GPU, a copy into pinned host memory
        behind the work queued so far, and an event marking its end."""
        flat = self._flat()
        if not flat.is_cuda:
            self._staged = (flat, None)
            return
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        host.copy_(flat, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(flat.device))
        self._staged = (host, event)

    def _read(self, name: str) -> list[float]:
        if self._host is None:
            if self._staged is None:
                values = self._flat().tolist()
            else:
                host, event = self._staged
                if event is not None:
                    event.synchronize()
                values = host.tolist()
            self._host, i = {"loss": values[:1]}, 1
            for k, t in self._pending.items():
                self._host[k], i = values[i : i + t.numel()], i + t.numel()
        return self._host[name]

    @property
    def loss_value(self) -> float:
        """The loss as a float (read with the metrics)."""
        return self._read("loss")[0]

    @property
    def parts(self) -> dict[str, float]:
        """Weighted means of each term."""
        return dict(zip(PARTS, self._read("parts"), strict=True))

    # Per block position k (0-based), over valid predictions:
    @property
    def c_star(self) -> list[float]:
        """Mean analytic acceptance probability."""
        return self._read("c_star")

    @property
    def top1(self) -> list[float]:
        """How often argmax p_d == argmax p_t."""
        return self._read("top1")

    @property
    def confidence(self) -> list[float]:
        """Mean predicted c_k ([] without a confidence head)."""
        return self._read("confidence")

    @property
    def count(self) -> list[int]:
        return [int(c) for c in self._read("count")]

    @property
    def sim_tau(self) -> float:
        """Simulated accepted length from c*: mean over fully valid blocks of
        1 + sum_k prod_{i<=k} c*_i (bonus token included); nan when no block has all gamma
        labels."""
        return self._read("sim_tau")[0]


def position_weights(gamma: int, decay: float, device=None) -> torch.Tensor:
    return torch.exp(-torch.arange(gamma, dtype=torch.float32, device=device) / decay)


def _chunk_terms(
    hidden, latent, conf_logit, target_hidden, labels, lm_head, w2, divergence, teacher
):  # fmt: skip
    """Per-row loss terms and metrics for one chunk, by autograd (the reference form of the
    objective; `fused=False`). Rows: predictions; all outputs [rows]. `lm_head` scores the
    draft's output ids, `teacher` the target's at the same ids."""
    if latent is not None:
        logits = (
            torch.cat((hidden, latent.to(hidden.dtype)), -1)
            @ torch.cat((lm_head, w2.to(lm_head.dtype)), 1).T
        )
    else:
        logits = hidden @ lm_head.T
    logp_d = F.log_softmax(logits.float(), dim=-1)
    with torch.no_grad():
        logp_t = F.log_softmax((target_hidden @ teacher.T).float(), dim=-1)
        p_t = logp_t.exp()
    p_d = logp_d.exp()
    l1 = (p_d - p_t).abs().sum(-1)
    ce = -logp_d.gather(-1, labels[:, None]).squeeze(-1)
    if divergence == "forward_kl":
        distill = (p_t * (logp_t - logp_d)).sum(-1)
    else:
        distill = l1
    c_star = (1.0 - 0.5 * l1).detach().clamp(0.0, 1.0)
    if conf_logit is not None:
        conf = F.binary_cross_entropy_with_logits(conf_logit.float(), c_star, reduction="none")
    else:
        conf = torch.zeros_like(ce)
    top1 = (logp_d.argmax(-1) == logp_t.argmax(-1)).float()
    return torch.stack((ce, distill, conf)), torch.stack((c_star, top1))


def _reference_terms(rows_in, lm_head, w2, cfg: LossConfig, teacher):
    """terms [3, rows] and metrics [2, rows] by autograd, each chunk under activation
    checkpointing (its vocabulary-wide tensors are recomputed in backward)."""
    hidden, latent, conf_logit, target_hidden, labels = rows_in
    terms, metrics = [], []
    for start in range(0, hidden.shape[0], cfg.chunk_rows):
        sl = slice(start, start + cfg.chunk_rows)
        args = (
            hidden[sl],
            None if latent is None else latent[sl],
            None if conf_logit is None else conf_logit[sl],
            target_hidden[sl],
            labels[sl],
            lm_head,
            w2,
            cfg.divergence,
            teacher,
        )
        t, m = (
            checkpoint(_chunk_terms, *args, use_reentrant=False)
            if hidden.requires_grad or lm_head.requires_grad
            else _chunk_terms(*args)
        )
        terms.append(t)
        metrics.append(m)
    return torch.cat(terms, 1), torch.cat(metrics, 1)


class _FusedObjective(torch.autograd.Function):
    """The objective with its gradient computed in the same pass as its value.

    Every term is a function of a row's logits z = [h ; latent] @ [E ; W2]^T, and its gradient
    with respect to z has a closed form (p_d = softmax(z), p_t the target's distribution, e_y the
    label's one-hot, s = sign(p_d - p_t)):
      CE: p_d - e_y        TV: p_d * (s - <s, p_d>)        forward KL: p_d * sum(p_t) - p_t
    (c* is a constant label, so the confidence term's gradient reaches only its logit). The
    forward pass therefore keeps just the rows' input gradients ([rows, hidden]) and W2's
    ([vocab, rank]), never a vocabulary-wide tensor: no recomputation in backward, no autograd
    graph over [rows, vocab] (about 3x fewer full-vocabulary passes than the reference, and one
    backward kernel instead of a chunk's worth). Inputs: the rows' hidden states (and Markov
    latents with W2, the bias added inside the logits GEMM), `lm_head` the draft's output head
    (a pruned draft's own, trainable: its gradient g^T h is summed over the chunks as W2's is),
    `teacher` the target head's rows at the same ids, `coef_rows` [3, rows] = term weight x
    position weight x scale / W for each row."""

    @staticmethod
    def forward(
        ctx, hidden, latent, conf_logit, w2, lm_head, teacher, target_hidden, labels, coef_rows,
        cfg, need_grad,
    ):  # fmt: skip
        rows = hidden.shape[0]
        terms = hidden.new_empty((3, rows), dtype=torch.float32)
        metrics = hidden.new_empty((2, rows), dtype=torch.float32)
        grad_h = torch.zeros_like(hidden) if need_grad else None
        grad_lat = torch.zeros_like(latent) if need_grad and latent is not None else None
        grad_w2 = (
            torch.zeros(w2.shape, dtype=torch.float32, device=w2.device)
            if need_grad and w2 is not None
            else None
        )
        grad_head = (
            torch.zeros(lm_head.shape, dtype=torch.float32, device=lm_head.device)
            if need_grad and lm_head.requires_grad
            else None
        )
        vocab_terms = loss_kernels.pick(cfg.kernel, hidden.device)
        for start in range(0, rows, cfg.chunk_rows):
            sl = slice(start, start + cfg.chunk_rows)
            z = hidden[sl] @ lm_head.T
            if latent is not None:  # the Markov bias B = latent @ W2^T, added by the GEMM
                z = torch.addmm(z, latent[sl], w2.T)
            terms[0, sl], terms[1, sl], metrics[0, sl], metrics[1, sl], g = vocab_terms(
                z, target_hidden[sl] @ teacher.T, labels[sl], coef_rows[0, sl],
                coef_rows[1, sl], cfg.divergence, lm_head.dtype if need_grad else None,
            )  # fmt: skip
            del z
            if need_grad:
                grad_h[sl] = g @ lm_head
                if latent is not None:
                    grad_lat[sl] = g @ w2
                    grad_w2 += (g.T @ latent[sl]).float()
                if grad_head is not None:
                    grad_head += (g.T @ hidden[sl]).float()
            del g
        if conf_logit is not None:
            c = conf_logit.float()
            terms[2] = F.binary_cross_entropy_with_logits(c, metrics[0], reduction="none")
            grad_conf = (torch.sigmoid(c) - metrics[0]) * coef_rows[2] if need_grad else None
        else:
            terms[2] = 0.0
            grad_conf = None
        loss = (terms * coef_rows).sum()
        ctx.save_for_backward(
            grad_h,
            grad_lat,
            grad_conf,
            None if grad_w2 is None else grad_w2.to(w2.dtype),
            None if grad_head is None else grad_head.to(lm_head.dtype),
        )
        ctx.conf_dtype = None if conf_logit is None else conf_logit.dtype
        ctx.mark_non_differentiable(terms, metrics)
        return loss, terms, metrics

    @staticmethod
    def backward(ctx, grad_loss, _grad_terms, _grad_metrics):
        grad_h, grad_lat, grad_conf, grad_w2, grad_head = ctx.saved_tensors
        if grad_h is None:
            raise RuntimeError("the fused loss was built without gradients (need_grad=False)")
        scale = lambda t, dt=None: None if t is None else (t * grad_loss).to(dt or t.dtype)  # noqa: E731
        return (
            scale(grad_h),
            scale(grad_lat),
            scale(grad_conf, ctx.conf_dtype),
            scale(grad_w2),
            scale(grad_head),
            *([None] * 6),
        )


def distillation_loss(
    out: DraftOutput,
    batch: PackedBatch,
    target_head: FrozenTargetHead,
    cfg: LossConfig,
    markov_w2: torch.Tensor | None = None,
    weight_total: torch.Tensor | float | None = None,
    scale: float = 1.0,
    *,
    fused: bool = True,
    vocab: DraftVocab | None = None,
    output_head: torch.Tensor | None = None,
) -> LossResult:
    """The weighted DSpark objective over every valid block prediction in `batch`.

    Each term is sum_k w_k m_k l_k / W. W is this batch's own weight total unless `weight_total`
    gives it: data-parallel trainers pass the total over all ranks (`label_weight_total`,
    all-reduced) and `scale` = the number of ranks, so that after the ranks' gradients are averaged
    every supervised token weighs the same whatever rank it landed on (as DeepSpec does).
    `fused`: gradients in the forward pass (`_FusedObjective`, what training uses); False runs
    the reference form by autograd, which the tests and scripts/bench_loss.py compare against.
    `vocab` and `output_head` [K, H] (a pruned draft: both or neither): the draft's logits come
    from `output_head`, the teacher's from the target head's kept rows, and a label outside the
    kept set drops out of CE (module docstring)."""
    n, gamma, h = out.hidden.shape
    if batch.labels.shape != (n, gamma):
        raise ValueError(
            f"draft output has {n}x{gamma} predictions but labels are {tuple(batch.labels.shape)}"
        )
    if (out.seq_latent is None) != (markov_w2 is None):
        raise ValueError("pass markov_w2 exactly when the draft has a sequential head")
    if (vocab is None) != (output_head is None):
        raise ValueError("pass vocab and output_head together (a pruned draft vocabulary)")
    lm_head = teacher = target_head.lm_head_weight
    if vocab is not None:  # the teacher's logits at the kept ids only: its head's kept rows
        teacher = lm_head.index_select(0, kept_ids(vocab.d2t))
        lm_head = output_head
    mask = batch.label_mask.reshape(-1)
    rows = torch.nonzero(mask).squeeze(1) if batch.label_rows is None else batch.label_rows
    if rows.numel() == 0:
        raise ValueError("batch has no valid block prediction (every label is masked)")
    slot = torch.arange(gamma, device=mask.device).repeat(n)[rows]
    weights = position_weights(gamma, cfg.position_decay, mask.device)[slot]
    flat = lambda t: None if t is None else t.reshape(n * gamma, *t.shape[2:])[rows]  # noqa: E731
    hidden, latent, conf_logit = flat(out.hidden), flat(out.seq_latent), flat(out.confidence_logit)
    target_hidden = flat(batch.target_hidden).to(teacher.dtype)
    labels = flat(batch.labels)
    ce_kept = None
    if vocab is not None:  # labels as draft ids; one outside the kept set leaves CE
        labels, ce_kept = to_draft(labels, vocab.t2d)
        ce_kept = ce_kept.float()
    total_w = weights.sum() if weight_total is None else weight_total
    # the term weights stay Python floats: a tensor built from them on a GPU is a blocking copy
    # from pageable memory, which waits for all the work queued before it (tests/test_gpu_trainer)
    coef = (
        cfg.ce_weight,
        cfg.distill_weight,
        cfg.confidence_weight if conf_logit is not None else 0.0,
    )

    if fused:
        if latent is not None:
            latent, w2 = latent.to(hidden.dtype), markov_w2.to(lm_head.dtype)
        else:
            w2 = None
        need_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (hidden, latent, conf_logit, w2, lm_head)
        )
        per_row = weights * (scale / total_w)
        coef_rows = torch.stack([per_row * c for c in coef])
        if ce_kept is not None:
            coef_rows[0] *= ce_kept
        loss, terms, metrics = _FusedObjective.apply(
            hidden, latent, conf_logit, w2, lm_head, teacher, target_hidden, labels, coef_rows,
            cfg, need_grad,
        )  # fmt: skip
    else:
        terms, metrics = _reference_terms(
            (hidden, latent, conf_logit, target_hidden, labels), lm_head, markov_w2, cfg, teacher
        )
    if ce_kept is not None:  # the dropped rows' CE (of a stand-in label) out of the means
        terms = torch.cat((terms[:1] * ce_kept, terms[1:]))
    means = (terms * weights).sum(1) / total_w * scale
    if not fused:
        loss = sum(m * c for m, c in zip(means, coef, strict=True))
    return LossResult(
        loss,
        {
            "parts": means,
            "sim_tau": simulated_tau(rows, n, gamma, metrics[0]).reshape(1),
            **per_position_metrics(slot, gamma, metrics, conf_logit),
        },
    )


def label_weight_total(batch: PackedBatch, decay: float) -> torch.Tensor:
    """sum_k w_k over every supervised prediction of `batch`: the loss's denominator."""
    mask = batch.label_mask
    return (mask.float() * position_weights(mask.shape[1], decay, mask.device)).sum()


def draft_loss(draft, out: DraftOutput, batch: PackedBatch, **normalisation) -> LossResult:
    """The objective of every built-in architecture: `distillation_loss` with the draft's
    frozen target head (and, for a pruned vocabulary, its own head and maps), loss weights and
    (if it has one) sequential-head bias weight. `normalisation`:
    `weight_total` and `scale` (see distillation_loss)."""
    pruned = draft.cfg.pruned_vocab
    return distillation_loss(
        out,
        batch,
        draft.target_head,
        draft.cfg.loss,
        draft.vocab_bias_weight,
        vocab=draft.vocab,
        output_head=draft.output_head_weight if pruned else None,
        **normalisation,
    )


@torch.no_grad()
def simulated_tau(rows, n, gamma, c_star) -> torch.Tensor:
    """Expected accepted length if each draft slot survives with its analytic probability c*
    (a 0-d device tensor; nan when no block has all gamma labels)."""
    grid = torch.full((n * gamma,), float("nan"), device=c_star.device)
    grid[rows] = c_star.float()
    grid = grid.view(n, gamma)
    full = ~grid.isnan().any(1)
    lengths = 1.0 + torch.cumprod(grid.nan_to_num(0.0), 1).sum(1)
    return (lengths * full).sum() / full.sum()  # 0 / 0 = nan


@torch.no_grad()
def per_position_metrics(slot, gamma, metrics, conf_logit) -> dict[str, torch.Tensor]:
    """Per block position, as device tensors (LossResult reads them)."""
    # (not bincount: on a GPU it reads the largest slot on the host, waiting for the device)
    count = torch.zeros(gamma, dtype=torch.long, device=slot.device).index_add_(
        0, slot, torch.ones_like(slot)
    )
    denom = count.clamp(min=1).float()

    def mean(v):
        return torch.zeros(gamma, device=v.device).index_add_(0, slot, v.float()) / denom

    return dict(
        c_star=mean(metrics[0]),
        top1=mean(metrics[1]),
        confidence=mean(torch.sigmoid(conf_logit)) if conf_logit is not None else count[:0],
        count=count,
    )
