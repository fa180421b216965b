"""The trainer side: a DeepSpeed engine over the draft, one optimizer step per call.

Each step takes B = micro_batch * grad_accum samples: micro-batches of `micro_batch` sequences
are packed (anchors seeded by sample id), run through the draft, scored by the chunked loss
with the frozen target head, and handed to DeepSpeed, which accumulates, clips, averages over
the trainer group and steps the optimizer and the LR schedule.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.profiler import record_function

from draft_models import (
    DraftConfig,
    FrozenTargetHead,
    SequenceSample,
    TargetSpec,
    build_draft,
    get_arch,
    pack_sequences,
)
from draft_models.losses import label_weight_total
from draft_models.packing import NoAnchorsError, host_tokens
from draft_models.vocab import DraftVocab

from .config import TrainConfig


def lr_lambda(cfg: TrainConfig):
    """Linear warm-up to lr, then cosine decay to lr * min_lr_ratio at the last step."""

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def clips_in_step(cfg: TrainConfig) -> bool:
    """Whether the trainer clips the gradients itself (amp at ZeRO-0: plain fp32 gradients on
    the parameters) rather than DeepSpeed, whose clipping copies its bound from pageable host
    memory and so waits for all queued work at every optimizer step. Elsewhere DeepSpeed's
    optimizers clip (bf16 and ZeRO >= 1 also read the norm's validity on the host)."""
    return cfg.grad_clip > 0 and cfg.precision == "amp" and cfg.zero_stage == 0


def deepspeed_config(cfg: TrainConfig, dp_world: int, on_gpu: bool) -> dict:
    """bf16 on a GPU: bf16 weights with DeepSpeed's fp32 master copies; amp: fp32 weights that
    fused Adam steps in place, matmuls in bf16 under DeepSpeed's torch.autocast."""
    amp = cfg.precision == "amp"
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.micro_batch * cfg.grad_accum * dp_world,
        "gradient_clipping": 0.0 if clips_in_step(cfg) else cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": on_gpu and not amp},
        "torch_autocast": {"enabled": amp, "dtype": "bfloat16"},
        "optimizer": {
            "type": "AdamW",
            # torch's AdamW on CPU; DeepSpeed's fused Adam on GPU
            "params": {
                "lr": cfg.lr,
                "betas": [0.9, 0.95],
                "eps": 1e-8,
                "weight_decay": cfg.weight_decay,
                "torch_adam": not on_gpu,
            },
        },
        "checkpoint": {"tag_validation": "Ignore"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
        # DeepSpeed's throughput timer synchronises the device at every forward and step (from
        # its third step): the host could never queue ahead of the device
        "timers": {"throughput": {"enabled": False}},
    }


def compile_layers_here(cfg: TrainConfig, device: torch.device) -> bool:
    """train.compile_layers as set, or (null) on a GPU: compiling pays off there (1.17-1.25x an
    8B-shape step on one H100), while on a CPU it costs minutes of compilation per run."""
    return cfg.compile_layers if cfg.compile_layers is not None else device.type == "cuda"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


class DraftTrainer:
    def __init__(
        self,
        draft_cfg: DraftConfig,
        target: TargetSpec,
        head: FrozenTargetHead,
        cfg: TrainConfig,
        *,
        device: torch.device,
        dp_world: int,
        mpu=None,
        init_weights: dict[str, torch.Tensor] | None = None,
        vocab: DraftVocab | None = None,
    ) -> None:
        """`init_weights`: the draft's starting weights (train.init_from), loaded before
        DeepSpeed copies the parameters into its optimizer state. `vocab`: a pruned draft
        vocabulary's maps (draft.draft_vocab_size; counted or read once, before any worker
        starts: splitserve.train.draft_vocab), installed before either."""
        if device.type == "cpu":  # say so instead of letting DeepSpeed warn that it found no GPU
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        self.cfg, self.device, self.target_spec, self.dp_world = cfg, device, target, dp_world
        seed_everything(cfg.seed)
        draft = build_draft(draft_cfg, target, head)
        if vocab is not None:
            draft.set_vocab(vocab)
        if init_weights is not None:
            try:
                draft.load_state_dict(init_weights, strict=True)
            except RuntimeError as exc:
                raise ValueError(
                    f"train.init_from: the weights do not fit the draft: {exc}"
                ) from None
        draft.check_vocab()
        if compile_layers_here(cfg, device):
            for module in draft.modules():
                if hasattr(module, "compile_regions"):
                    module.compile_regions()
        self.draft_cfg = draft.cfg
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=draft,
            model_parameters=[p for p in draft.parameters() if p.requires_grad],
            config=deepspeed_config(cfg, dp_world, device.type == "cuda"),
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg)),
            mpu=mpu,
            dist_init_required=False,
        )
        # The dtype of what the draft reads (target states, the frozen head, which is not a
        # parameter): its weights' under bf16 (DeepSpeed cast them), bf16 under amp.
        self.compute_dtype = (
            torch.bfloat16 if cfg.precision == "amp" else next(self.draft.parameters()).dtype
        )
        self.engine.module.target_head = head.to(device=device, dtype=self.compute_dtype)
        self.step = 0

    @property
    def draft(self):
        return self.engine.module

    def _zero_loss(self):
        """A micro-batch with nothing to predict (every assistant token truncated away) still takes
        part in the data-parallel gradient exchange, with zero gradients."""
        return sum(p.sum() for p in self.draft.parameters()) * 0.0

    def _pack(self, samples: Sequence[SequenceSample], sample_ids: Sequence[int]):
        """The packed batch of `samples` (wherever they are) on this device; None when none has
        a token to predict. Tokens are read on the host before the hidden states move, so a
        batch received on the host is packed without one read of the device."""
        c = self.draft_cfg
        tokens = host_tokens(samples)
        try:
            batch = pack_sequences(
                [s.hidden_to(self.device) for s in samples],
                num_anchors=self.cfg.num_anchors,
                block_size=c.block_size,
                num_slots=c.num_slots,
                mask_token_id=c.mask_token_id,
                seed=self.cfg.seed,
                sample_ids=sample_ids,
                tokens=tokens,
            )
        except NoAnchorsError:
            return None
        return batch.to(self.device, dtype=self.compute_dtype)

    def _global_weight_total(self, batch) -> torch.Tensor:
        """The loss denominator summed over every trainer rank (each rank calls this once per
        micro-batch, with or without a batch): every supervised token then weighs the same
        whatever rank it lands on, as in DeepSpec."""
        decay = self.draft_cfg.loss.position_decay
        if batch is None:  # (not as_tensor(0.0): a blocking copy from pageable host memory)
            total = torch.zeros(1, dtype=torch.float32, device=self.device)
        else:
            total = label_weight_total(batch, decay).float().reshape(1)
        if self.dp_world > 1:
            dist.all_reduce(total)
        return total[0]

    def _forward(self, batch):
        """The draft's output on a packed batch (under amp, DeepSpeed's autocast)."""
        from deepspeed.runtime.torch_autocast import autocast_if_enabled

        with autocast_if_enabled(self.engine):
            return self.engine(batch)

    def _loss_of(self, out, batch, weight_total=None):
        """LossResult of the draft's output; with `weight_total`, normalised over all ranks."""
        norm = (
            {} if weight_total is None else {"weight_total": weight_total, "scale": self.dp_world}
        )
        from deepspeed.runtime.torch_autocast import autocast_if_enabled

        # the loss runs outside the engine's forward: under amp it takes the same autocast
        with autocast_if_enabled(self.engine):
            return get_arch(self.draft_cfg.arch).loss(self.draft, out, batch, **norm)

    def _loss(self, batch, weight_total=None):
        """LossResult of a packed batch: the forward, then the loss."""
        return self._loss_of(self._forward(batch), batch, weight_total)

    def _backward_and_step(self, loss: torch.Tensor) -> None:
        """DeepSpeed's backward and step of one micro-batch; at an accumulation boundary, where
        `clips_in_step`, the gradients are clipped first by torch's clip_grad_norm_ (device
        ops only; the gradients are already averaged over the ranks, so the local norm is the
        global one)."""
        with record_function("splitserve.backward"):
            self.engine.backward(loss)
        with record_function("splitserve.optimizer_step"):
            if clips_in_step(self.cfg) and self.engine.is_gradient_accumulation_boundary():
                params = [p for p in self.draft.parameters() if p.grad is not None]
                torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
            self.engine.step()

    def train_step(self, samples: Sequence[SequenceSample], sample_ids: Sequence[int]) -> dict:
        """One optimizer step over B samples; returns this rank's metrics (`queue_step`, then
        its metrics: the host waits for the step to finish)."""
        return self.queue_step(samples, sample_ids).metrics()

    def queue_step(
        self, samples: Sequence[SequenceSample], sample_ids: Sequence[int]
    ) -> QueuedStep:
        """Queue one optimizer step over B samples on the device without waiting for it; its
        metrics are read by `QueuedStep.metrics()`. A caller that queues the next step before
        reading this one's keeps the device busy while the host reads, logs, receives and packs
        (the training loop does; a read waits for all work queued before it). Each micro-batch's
        loss is its weighted sum over the weight total of that micro-step on all ranks, times
        the number of ranks (DeepSpeed then averages the ranks' gradients and divides by the
        accumulation steps): the loss and gradients of R ranks with micro-batch B equal those of
        one rank with micro-batch R x B. Across accumulation steps each micro-step is normalised
        by its own total, as in DeepSpec's reference. The loss parts are this rank's share
        times R: their mean over ranks (what the workers log) is the global value."""
        b = self.cfg.micro_batch
        if len(samples) != b * self.cfg.grad_accum:
            raise ValueError(f"a step takes {b * self.cfg.grad_accum} samples, got {len(samples)}")
        lr = self.scheduler.get_last_lr()[0]
        tokens = blocks = empty = 0
        done = []
        for i in range(0, len(samples), b):
            with record_function("splitserve.pack"):
                batch = self._pack(samples[i : i + b], sample_ids[i : i + b])
                weight_total = self._global_weight_total(batch)
            if batch is None:  # (a packed block always supervises its first label)
                empty += 1
                self._backward_and_step(self._zero_loss())
                continue
            with record_function("splitserve.forward"):
                out = self._forward(batch)
            with record_function("splitserve.loss"):  # the fused loss's gradients too
                res = self._loss_of(out, batch, weight_total)
            self._backward_and_step(res.loss)
            res.stage()  # its metrics start towards the host behind this micro-batch's work
            tokens += sum(int(s.input_ids.numel()) for s in samples[i : i + b])
            blocks += batch.num_blocks
            done.append(res)
        self.step += 1
        counts = {"tokens": tokens, "blocks": blocks, "empty_micro_batches": empty}
        return QueuedStep(done, lr, counts, self.cfg.grad_accum, self.draft_cfg.block_size)

    @torch.no_grad()
    def evaluate(self, samples: Sequence[SequenceSample], sample_ids: Sequence[int]) -> dict | None:
        """This rank's own weighted means on held-out samples (the workers average the ranks)."""
        batch = self._pack(samples, sample_ids)
        if batch is None:
            return None
        self.engine.eval()
        try:
            res = self._loss(batch)
        finally:
            self.engine.train()
        return {
            "eval_loss": res.loss.item(),
            "eval_sim_tau": res.sim_tau,
            "eval_c_star": res.c_star,
            "eval_top1": res.top1,
        }

    def rng_state(self) -> dict:
        return {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        }

    def set_rng_state(self, state: dict) -> None:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])


class QueuedStep:
    """An optimizer step queued on the device. Its micro-batches' results were staged as each
    was queued (LossResult.stage), so `metrics()` waits for this step's work only, not for a
    step queued after it; it reads them once (later calls return the same dict)."""

    def __init__(self, results: list, lr: float, counts: dict, grad_accum: int, gamma: int):
        self._results, self._lr, self._counts = results, lr, counts
        self._accum, self._gamma = grad_accum, gamma
        self._metrics: dict | None = None

    def metrics(self) -> dict:
        """This rank's metrics of the step: loss parts, lr, tokens, blocks, empty micro-batches,
        per-position c_star and top-1 and the simulated tau (waits for the step's work)."""
        if self._metrics is not None:
            return self._metrics
        totals = {"loss": 0.0, "ce": 0.0, "distill": 0.0, "conf": 0.0}
        count, c_star_sum, top1_sum = (
            torch.zeros(self._gamma, dtype=torch.float64) for _ in range(3)
        )
        taus = []
        for res in self._results:
            totals["loss"] += res.loss_value / self._accum
            for k in ("ce", "distill", "conf"):
                totals[k] += res.parts[k] / self._accum
            w = torch.tensor(res.count, dtype=torch.float64)
            count += w
            c_star_sum += w * torch.tensor(res.c_star, dtype=torch.float64)
            top1_sum += w * torch.tensor(res.top1, dtype=torch.float64)
            if not math.isnan(res.sim_tau):
                taus.append(res.sim_tau)
        denom = count.clamp(min=1)
        self._results = []  # the device tensors are no longer needed
        self._metrics = {
            **totals,
            "lr": self._lr,
            **self._counts,
            "c_star": (c_star_sum / denom).tolist(),
            "top1": (top1_sum / denom).tolist(),
            "sim_tau": sum(taus) / len(taus) if taus else float("nan"),
        }
        return self._metrics
