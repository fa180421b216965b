"""Load a SplitServe checkpoint and its target into a ready decoder (shared by the serving CLIs)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from draft_models import build_draft
from draft_models.sts import read_temperatures

from .decoder import SpeculativeDecoder
from .export import read_checkpoint
from .scheduler import SchedulerConfig
from .sps import SpsTable


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def target_dir_of(checkpoint: Path, target_dir: Optional[Path] = None) -> Path:
    """The target a checkpoint was trained against (its meta.json), unless `target_dir` is given."""
    if target_dir is None:
        meta = Path(checkpoint) / "meta.json"
        if not meta.is_file():
            raise FileNotFoundError(f"{checkpoint} is not a complete SplitServe checkpoint: missing {meta}")
        target_dir = Path(json.loads(meta.read_text())["model_dir"])
    if not (Path(target_dir) / "config.json").is_file():
        raise FileNotFoundError(f"target {target_dir} is not a HF model directory (no config.json)")
    return Path(target_dir)


def load_decoder(checkpoint: Path, target_dir: Optional[Path] = None, *, scheduler: SchedulerConfig,
                 sps: Optional[Path] = None, sts: Optional[Path] = None, block_size: Optional[int] = None,
                 device: str = "auto", verify_widths=None, dtype: str = "auto"):
    """(decoder, tokenizer) for a SplitServe checkpoint. dtype auto: fp32 on CPU, bf16 on GPU
    (greedy output is bit-identical to target-only decoding in fp32; in bf16 a verify step over
    several tokens rounds differently from a one-token step, so near-ties can resolve apart)."""
    from transformers import AutoModelForCausalLM

    from splitserve.targets import check_tokenizer, load_frozen_head, load_target_spec

    cfg, trained_on, weights = read_checkpoint(checkpoint)
    target_dir = target_dir_of(checkpoint, target_dir)
    spec = load_target_spec(target_dir)
    if asdict(spec) != asdict(trained_on):
        diff = sorted(k for k, v in asdict(spec).items() if asdict(trained_on)[k] != v)
        raise ValueError(f"checkpoint {checkpoint} was trained for a different target: {target_dir} differs in {diff}")
    dev = pick_device(device)
    if dtype not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"--dtype {dtype!r}: allowed auto, float32, bfloat16")
    dtype = getattr(torch, dtype) if dtype != "auto" else (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    temps = read_temperatures(sts, cfg.block_size) if sts is not None else None
    table = SpsTable.load(sps) if sps is not None else None
    tokenizer = check_tokenizer(target_dir, spec)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype).to(dev)
    draft = build_draft(cfg, spec, load_frozen_head(target_dir, dev, dtype))
    draft.load_state_dict(weights, strict=True)
    draft.to(device=dev, dtype=dtype)
    decoder = SpeculativeDecoder(target, draft, scheduler=scheduler, sps=table, sts_temperatures=temps,
                                 block_size=block_size, verify_widths=verify_widths)
    return decoder, tokenizer


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"])


def add_decoder_args(ap, *, scheduler_default: str = "fixed") -> None:
    """The flags every serving CLI shares to build a decoder from a checkpoint."""
    ap.add_argument("--checkpoint", required=True, type=Path, help="RUN/checkpoints/step-N")
    ap.add_argument("--target", type=Path, help="target model directory (default: the one trained against)")
    ap.add_argument("--block-size", type=int, help="draft tokens per step (at most the trained block size)")
    ap.add_argument("--scheduler", default=scheduler_default, choices=["fixed", "threshold", "prefix"])
    ap.add_argument("--threshold", type=float, default=0.5, help="scheduler=threshold: prefix-survival cut")
    ap.add_argument("--sps", type=Path, help="SPS table JSON (scheduler=prefix)")
    ap.add_argument("--sts", type=Path, help="STS calibration JSON")
    ap.add_argument("--verify-widths", type=int, nargs="+",
                    help="verify shapes (graph buckets); default every width 1..gamma+1")
    ap.add_argument("--device", default="auto", help="auto (GPU when available) | cpu | cuda[:i]")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16")


def decoder_from_args(args):
    """(decoder, tokenizer) from `add_decoder_args` flags; raises ValueError / FileNotFoundError."""
    scheduler = SchedulerConfig(mode=args.scheduler, threshold=args.threshold)
    scheduler.validate()
    return load_decoder(args.checkpoint, args.target, scheduler=scheduler, sps=args.sps, sts=args.sts,
                        block_size=args.block_size, device=args.device, verify_widths=args.verify_widths,
                        dtype=args.dtype)
