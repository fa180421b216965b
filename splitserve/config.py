"""Typed configuration of a SplitServe training run, mirrored by `conf/config.yaml` and its groups.

The Hydra tree is merged onto `RunConfig` (see `load_run_config`), so an unknown key or a value
of the wrong type is an error that names the key, never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from draft_models import DraftConfig
from draft_models.config_io import load_dataclass

BACKENDS = ("hf", "sglang")
TARGET_KINDS = ("smollm2", "path", "ling3_mini")
SOURCE_KINDS = ("gsm8k", "sharegpt", "jsonl_chat")


@dataclass
class SamplingSetting:
    """One regeneration setting; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0


@dataclass
class TargetConfig:
    kind: str = "smollm2"  # smollm2: embedded default; path: a local HF directory; ling3_mini: tiny random bailing_hybrid
    backend: str = "hf"  # hf (transformers, runs anywhere) | sglang (production, GPU; unverified here)
    path: Optional[str] = None  # required for kind=path
    dtype: str = "auto"  # auto: bf16 on GPU, fp32 on CPU
    tp_size: int = 1  # tensor parallel size inside one target worker (sglang backend)
    regenerate: bool = True  # replace dataset answers with the target's own responses
    max_new_tokens: int = 128
    # Samples regenerated together in one left-padded generate call (hf backend). 1 keeps one
    # sequence per call; larger batches keep a GPU target busy. Batches are cut from the worker's
    # sample list counted from step 0, so a resumed run regenerates the same batches.
    generate_batch: int = 1
    sampling: list[SamplingSetting] = field(default_factory=lambda: [SamplingSetting()])
    # The draft.target_layer_ids this target is meant to be distilled from (recipes point
    # draft.target_layer_ids here); ids count decoder layers from 0 and name a layer's *output*,
    # which is also what SGLang's BailingMoeV3 captures for an id.
    capture_layer_ids: Optional[list[int]] = None
    sglang_mem_fraction: float = 0.8
    # ling3_mini: shape overrides of the tiny bailing_hybrid config (random weights, seeded).
    mini: dict[str, Any] = field(default_factory=dict)


@dataclass
class SourceConfig:
    kind: str = "gsm8k"  # gsm8k | sharegpt | jsonl_chat
    path: Optional[str] = None  # file; null = the packaged / shared default for the kind
    limit: Optional[int] = None  # at most this many conversations from this source
    weight: int = 1  # interleaving weight in the prompt stream


@dataclass
class DataConfig:
    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    max_length: int = 1024  # tokens per training sequence (prompt + response), truncated beyond
    max_prompt_tokens: int = 512
    eval_prompts: int = 8  # held-out prompts (taken from the end of each source, never trained on)
    shuffle_seed: int = 0


@dataclass
class SplitConfig:
    """How one node is divided. null process counts on a GPU node: one trainer and a target on
    every other GPU (or the GPUs the other count leaves); on CPU one process each."""

    target_procs: Optional[int] = None
    trainer_procs: Optional[int] = None
    colocated: bool = False  # one process runs target and trainer (the single-process reference)
    window: int = 4  # samples in flight per target->trainer route (back-pressure bound)
    device: str = "auto"  # auto | cpu | cuda
    master_port: int = 0  # 0: pick free ports; else the data-plane store uses +1 and the trainer world +2


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
    num_anchors: int = 64  # per sequence (DeepSpec: 512)
    seed: int = 0
    checkpoint_every: int = 20
    keep_checkpoints: int = 2
    eval_every: int = 0  # 0: only at the end
    # Real acceptance at each evaluation: trainer rank 0 decodes this many held-out prompts with
    # the live draft (loads its own copy of the target: small targets only; 0 = off).
    decode_eval_prompts: int = 0
    decode_eval_tokens: int = 64  # new tokens per decoded prompt
    run_dir: Optional[str] = None  # null: Hydra's output directory
    resume: bool = True  # continue from the newest complete checkpoint in run_dir, if any
    threads_per_proc: int = 1  # CPU threads for each worker process


@dataclass
class LogConfig:
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "splitserve"
    progress: bool = True


@dataclass
class RunConfig:
    recipe: str = "smol"
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
        if self.target.backend not in BACKENDS:
            raise bad("target.backend", self.target.backend, ", ".join(BACKENDS))
        if self.target.kind == "path" and not self.target.path:
            raise ValueError("target.path is required when target.kind=path (a local HF model directory)")
        if not self.target.sampling:
            raise bad("target.sampling", [], "a non-empty list of {temperature, top_p}")
        for s in self.data.sources:
            if s.kind not in SOURCE_KINDS:
                raise bad("data.sources[].kind", s.kind, ", ".join(SOURCE_KINDS))
        if self.data.max_length < self.draft.block_size + 2:
            raise bad("data.max_length", self.data.max_length, f"at least block_size + 2 = {self.draft.block_size + 2}")
        if self.target.generate_batch < 1:
            raise bad("target.generate_batch", self.target.generate_batch, "an integer >= 1")
        if self.train.decode_eval_prompts < 0 or self.train.decode_eval_tokens < 1:
            raise bad("train.decode_eval_prompts / decode_eval_tokens",
                      (self.train.decode_eval_prompts, self.train.decode_eval_tokens), ">= 0 and >= 1")
        for name in ("steps", "micro_batch", "grad_accum", "num_anchors", "threads_per_proc"):
            if getattr(self.train, name) < 1:
                raise bad(f"train.{name}", getattr(self.train, name), "an integer >= 1")
        if self.train.zero_stage not in (0, 1, 2, 3):
            raise bad("train.zero_stage", self.train.zero_stage, "0, 1, 2, 3")
        if self.split.window < 1:
            raise bad("split.window", self.split.window, "an integer >= 1")
        if self.log.wandb_mode not in ("offline", "online", "disabled"):
            raise bad("log.wandb_mode", self.log.wandb_mode, "offline, online, disabled")
        self.draft._validate_choices()


def load_run_config(node: Any) -> RunConfig:
    """Hydra DictConfig (or dict) -> validated RunConfig; unknown keys raise ValueError naming them."""
    cfg = load_dataclass(RunConfig, node, "")
    cfg.validate()
    return cfg
