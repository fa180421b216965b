"""Typed configuration of a SplitServe training run, mirrored by `conf/config.yaml` and its groups.

The Hydra tree is merged onto `RunConfig` (see `load_run_config`), so an unknown key or a value
of the wrong type is an error that names the key, never silently ignored.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf, open_dict

from draft_models import DraftConfig, load_draft_config
from draft_models.config_io import load_dataclass

from .data import DataConfig, check_data_config
from .target.backends import AUTO, backend_names
from .target.config import TARGET_KINDS, TargetConfig

PRECISIONS = ("bf16", "amp")  # train.precision: see TrainConfig


@dataclass
class SplitConfig:
    """How one node is divided. null process counts on a GPU node: the target backend's share of
    the GPUs for targets (`target_share`: static half, hf all but one trainer's) and the rest for
    trainers (or the GPUs the other count leaves); on CPU one process each."""

    target_procs: int | None = None
    trainer_procs: int | None = None
    colocated: bool = False  # one process runs target and trainer (the single-process reference)
    # samples in flight per target->trainer route (the back-pressure bound); null: two
    # optimizer steps' worth of one trainer's samples (in_flight), at least 4
    window: int | None = None
    device: str = "auto"  # auto | cpu | cuda
    master_port: int = (
        0  # 0: pick free ports; else the data-plane store uses +1 and the trainer world +2
    )


@dataclass
class TrainConfig:
    steps: int = 40
    micro_batch: int = 2  # sequences per trainer per micro-step
    grad_accum: int = 1
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    zero_stage: int = 1
    # bf16: bf16 weights, fp32 master copies in DeepSpeed's optimizer (bf16 off on CPU: fp32);
    # amp: fp32 weights, bf16 compute under torch.autocast (DeepSpeed's torch_autocast; on CPU
    # too); at zero_stage=0 fused Adam steps the weights directly (no master copy to sync)
    precision: str = "bf16"
    # torch.compile each draft layer's regions around attention (norms, rotary, MLP, residuals:
    # their pointwise kernels fused forward and backward); the first steps compile (~1 min).
    # null: on a GPU, for drafts that have the regions (DSpark, DFlash): on one H100 the 8B
    # shapes' trainer steps ran 1.17-1.25x faster (docs/results/throughput_h200)
    compile_layers: bool | None = None
    num_anchors: int = 64  # per sequence (DeepSpec: 512)
    seed: int = 0
    checkpoint_every: int = 20
    keep_checkpoints: int = 2
    # of those, the newest this many keep the training state (the rest: draft weights only); 2
    # lets a resume fall back to the previous checkpoint when the newest's state is damaged
    keep_train_state: int = 2
    # the draft-only weight file is cut into shards of at most this many MiB (with an index)
    weight_shard_mb: float = 2048.0
    eval_every: int = 0  # 0: only at the end
    # Real acceptance at each evaluation: trainer rank 0 decodes this many held-out prompts with
    # the live draft (loads its own copy of the target: small targets only; 0 = off).
    decode_eval_prompts: int = 0
    decode_eval_tokens: int = 64  # new tokens per decoded prompt
    # The class that measures it (import path), built as cls(model_dir, prompts, max_new_tokens,
    # device) and called with the live draft -> metrics dict. Named here, not imported, so the
    # trainer does not depend on serving, which provides the default.
    decode_eval_probe: str = "serving.probe.RealTauProbe"
    # Fit STS on the run's held-out prompts with its final checkpoint once training ends
    # (`python -m serving.calibrate`, run as a process: the trainer does not import serving) into
    # <checkpoint>/sts.json, which serving.export then ships; calibrate_args: more of its flags.
    calibrate_at_end: bool = False
    calibrate_args: list[str] = field(default_factory=list)
    run_dir: str | None = None  # null: Hydra's output directory
    resume: bool = True  # continue from the newest complete checkpoint in run_dir, if any
    # start a new run from these draft weights: an exported draft directory (serving.export), a
    # checkpoint, a checkpoint's draft/ folder alone or a run directory; its draft config must
    # equal this run's (loss weights aside).
    # A run that resumes ignores it (the checkpoint holds the weights by then).
    init_from: str | None = None
    threads_per_proc: int = 1  # CPU threads for each worker process


@dataclass
class LogConfig:
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "splitserve"
    progress: bool = True
    # a worker in one phase this long prints what it waits on (data, compilation, credit); 0: off
    wait_notice_s: float = 30.0
    # Trainer rank 0 runs torch.profiler over this many steps from step `profile_start` (0-based)
    # and writes where their time went to <run_dir>/profile/ (splitserve/profiling.py); 0: off.
    profile_steps: int = 0
    profile_start: int = 5


@dataclass
class RunConfig:
    recipe: str = "smol"
    # Modules imported in every process before anything is built: your own draft architectures
    # (draft_models.register_arch) or target backends (splitserve.target.backends.register_backend).
    plugins: list[str] = field(default_factory=list)
    draft: DraftConfig = field(default_factory=DraftConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def validate(self) -> None:
        def bad(name, value, allowed):
            return ValueError(f"{name}={value!r} is invalid; allowed: {allowed}")

        if self.target.kind not in TARGET_KINDS:
            raise bad("target.kind", self.target.kind, ", ".join(TARGET_KINDS))
        if self.target.backend not in (AUTO, *backend_names()):
            raise bad("target.backend", self.target.backend, ", ".join((AUTO, *backend_names())))
        if self.target.kind == "path" and not self.target.path:
            raise ValueError(
                "target.path is required when target.kind=path (a local HF model directory)"
            )
        if not self.target.sampling:
            raise bad("target.sampling", [], "a non-empty list of {temperature, top_p}")
        if self.train.compile_layers is True and self.draft.arch == "eagle3":
            raise ValueError(
                "train.compile_layers=true: eagle3's layers have no compiled regions (DSpark and "
                "DFlash only); leave it null or false for this draft"
            )
        for i, s in enumerate(self.target.sampling):
            if not s.temperature >= 0:  # (catches NaN too)
                raise bad(f"target.sampling[{i}].temperature", s.temperature, "a number >= 0")
            if not 0 < s.top_p <= 1:
                raise bad(f"target.sampling[{i}].top_p", s.top_p, "a number in (0, 1]")
        check_data_config(self.data)
        if self.data.max_length < self.draft.block_size + 2:
            raise bad(
                "data.max_length",
                self.data.max_length,
                f"at least block_size + 2 = {self.draft.block_size + 2}",
            )
        if self.target.generate_batch < 1:
            raise bad("target.generate_batch", self.target.generate_batch, "an integer >= 1")
        if self.target.produce_window < 0:
            raise bad("target.produce_window", self.target.produce_window, "an integer >= 0")
        if self.target.render_ahead < 0:
            raise bad(
                "target.render_ahead", self.target.render_ahead, "an integer >= 0 (0: inline)"
            )
        if self.train.decode_eval_prompts < 0 or self.train.decode_eval_tokens < 1:
            raise bad(
                "train.decode_eval_prompts / decode_eval_tokens",
                (self.train.decode_eval_prompts, self.train.decode_eval_tokens),
                ">= 0 and >= 1",
            )
        for name in (
            "steps",
            "micro_batch",
            "grad_accum",
            "num_anchors",
            "threads_per_proc",
            "keep_train_state",
        ):
            if getattr(self.train, name) < 1:
                raise bad(f"train.{name}", getattr(self.train, name), "an integer >= 1")
        if self.train.weight_shard_mb <= 0:
            raise bad("train.weight_shard_mb", self.train.weight_shard_mb, "a number > 0")
        if self.train.zero_stage not in (0, 1, 2):  # 3 would shard markov_w2, read by the loss
            raise bad(
                "train.zero_stage",
                self.train.zero_stage,
                "0, 1, 2 (ZeRO-3 shards the "
                "sequential head's W2, which the chunked loss reads whole)",
            )
        if self.train.precision not in PRECISIONS:
            raise bad("train.precision", self.train.precision, ", ".join(PRECISIONS))
        if self.split.window is not None and self.split.window < 1:
            raise bad("split.window", self.split.window, "null or an integer >= 1")
        if self.log.wait_notice_s < 0:
            raise bad("log.wait_notice_s", self.log.wait_notice_s, "a number >= 0 (0: off)")
        if self.log.profile_steps < 0 or self.log.profile_start < 0:
            raise bad(
                "log.profile_steps / log.profile_start",
                (self.log.profile_steps, self.log.profile_start),
                "integers >= 0 (profile_steps 0: off)",
            )
        if self.log.wandb_mode not in ("offline", "online", "disabled"):
            raise bad("log.wandb_mode", self.log.wandb_mode, "offline, online, disabled")
        self.draft._validate_choices()


def in_flight(cfg: RunConfig) -> int:
    """Samples in flight per route: split.window, or two steps of one trainer's samples. Fewer
    than a step's worth stalls both sides: the target stops for credit while the trainer
    computes, then the trainer waits while the target makes the rest of its step."""
    if cfg.split.window is not None:
        return cfg.split.window
    return max(4, 2 * cfg.train.micro_batch * cfg.train.grad_accum)


def import_plugins(names: list[str]) -> None:
    """Import the configured plugin modules (they register architectures or backends)."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"plugins: cannot import {name!r} ({exc})") from None


def load_run_config(node: Any) -> RunConfig:
    """Hydra DictConfig (or dict) -> validated RunConfig; unknown keys raise ValueError naming them.
    Plugins are imported first; the draft part takes its architecture's registered defaults for
    every field it leaves unset."""
    node = OmegaConf.create(node if node is not None else {})
    import_plugins(list(node.get("plugins") or []))
    draft = load_draft_config(node.get("draft"), "draft")
    with open_dict(node):
        node.pop("draft", None)
    cfg = load_dataclass(RunConfig, node, "")
    if draft.target_layer_ids is None and cfg.target.capture_layer_ids is not None:
        draft.target_layer_ids = list(cfg.target.capture_layer_ids)  # the target's own choice
    cfg.draft = draft
    cfg.validate()
    return cfg
