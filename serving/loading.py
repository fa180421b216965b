"""Load a SplitServe checkpoint and its target into a ready decoder (shared by the serving CLIs)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from draft_models import build_draft
from draft_models.config_io import read_json
from draft_models.sts import read_temperatures
from splitserve import checkpoint
from splitserve.target.config import RANDOM_WEIGHT_KINDS, resolve_dtype
from splitserve.target.embedded import LING3_MARKER
from splitserve.target.models import (
    check_tokenizer,
    load_causal_lm,
    load_frozen_head,
    load_target_spec,
    resolve_draft,
)

from . import cli
from .decoder import SpeculativeDecoder
from .scheduler import SchedulerConfig
from .sps import SpsTable


def pick_device(name: str = "auto") -> torch.device:
    """--device: auto (a GPU when one is visible), cpu, cuda or cuda:i; ValueError otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"--device {name!r} is invalid; allowed: auto, cpu, cuda, cuda:i"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {name!r} is invalid; allowed: auto, cpu, cuda, cuda:i")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA device is visible")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"--device {name}: only {torch.cuda.device_count()} CUDA devices are visible"
        )
    return device


def target_dir_of(draft: checkpoint.DraftCheckpoint, target_dir: Path | None = None) -> Path:
    """The target a checkpoint was trained against (its meta.json), unless `target_dir` is given
    (required for an exported draft, which names no target)."""
    if target_dir is None and draft.exported:
        raise ValueError(
            f"{draft.path} is an exported draft or a checkpoint's draft/ folder alone, which "
            "does not name its target: pass --target (the target's model directory)"
        )
    target_dir = Path(target_dir) if target_dir is not None else draft.model_dir
    if not (target_dir / "config.json").is_file():
        raise FileNotFoundError(f"target {target_dir} is not a HF model directory (no config.json)")
    return target_dir


def random_weight_target(ckpt: Path, target_dir: Path | None = None) -> str | None:
    """The target.kind of the target `ckpt` is served with (`target_dir`, else the one it was
    trained against) when that target has random weights (its marker file says which kind built
    it), else None: acceptance against such a target says nothing about a trained one."""
    if target_dir is None:
        if checkpoint.is_draft_only(ckpt):
            return None  # no target named: loading refuses it
        meta = read_json(Path(ckpt) / checkpoint.META, "checkpoint meta")
        if not isinstance(meta, dict) or not meta.get("model_dir"):
            return None  # reading the draft names the problem
        target_dir = Path(meta["model_dir"])
    marker = Path(target_dir) / LING3_MARKER
    if not marker.is_file():
        return None
    built = read_json(marker, "target marker")
    kind = built.get("kind") if isinstance(built, dict) else None
    return kind if kind in RANDOM_WEIGHT_KINDS else None


def load_decoder(
    ckpt: Path,
    target_dir: Path | None = None,
    *,
    scheduler: SchedulerConfig,
    sps: Path | None = None,
    sts: Path | None = None,
    block_size: int | None = None,
    device: str = "auto",
    verify_widths=None,
    dtype: str = "auto",
    runtime: str = "auto",
    compile: bool = False,
):
    """(decoder, tokenizer) for a SplitServe checkpoint (or a run directory's newest one). dtype
    auto: fp32 on CPU, bf16 on GPU (greedy output is bit-identical to target-only decoding in
    fp32; in bf16 a verify step over several tokens rounds differently from a one-token step, so
    near-ties can resolve apart)."""
    draft_ckpt = checkpoint.read_draft(ckpt)
    cfg = draft_ckpt.cfg
    target_dir = target_dir_of(draft_ckpt, target_dir)
    spec = load_target_spec(target_dir)
    if draft_ckpt.exported:  # no recorded target: the draft must fit this one
        try:  # its mask token too: not an ordinary token of this target's tokenizer
            resolve_draft(cfg, target_dir, spec)
        except ValueError as exc:
            raise ValueError(
                f"draft {draft_ckpt.path} (no recorded target) does not fit the target "
                f"{target_dir}: {exc}"
            ) from None
    elif asdict(spec) != asdict(draft_ckpt.target):
        diff = sorted(k for k, v in asdict(spec).items() if asdict(draft_ckpt.target)[k] != v)
        raise ValueError(
            f"checkpoint {draft_ckpt.path} was trained for a different target: {target_dir} "
            f"differs in {diff}"
        )
    dev = pick_device(device)
    if dtype not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"--dtype {dtype!r}: allowed auto, float32, bfloat16")
    dtype = resolve_dtype(dtype, dev)
    temps = read_temperatures(sts, cfg.block_size) if sts is not None else None
    table = SpsTable.load(sps) if sps is not None else None
    tokenizer = check_tokenizer(target_dir, spec)
    target = load_causal_lm(target_dir, dev, dtype)
    draft = build_draft(cfg, spec, load_frozen_head(target_dir, dev, dtype))
    draft.load_state_dict(draft_ckpt.weights, strict=True)
    draft.to(device=dev, dtype=dtype)
    decoder = SpeculativeDecoder(
        target,
        draft,
        scheduler=scheduler,
        sps=table,
        sts_temperatures=temps,
        block_size=block_size,
        verify_widths=verify_widths,
        runtime=runtime,
        compile=compile,
    )
    return decoder, tokenizer


def add_model_args(ap) -> None:
    """The flags that load a checkpoint's draft and its target."""
    ap.add_argument(
        "--checkpoint",
        required=True,
        type=Path,
        help="RUN/checkpoints/step-N, a run directory (its newest complete checkpoint), an "
        "exported draft or a checkpoint's draft/ folder alone (these two with --target)",
    )
    ap.add_argument(
        "--target",
        type=Path,
        help="target model directory (default: the one trained against; required for an "
        "exported draft or a draft/ folder alone)",
    )
    add_device_args(ap)


def add_device_args(ap) -> None:
    """--device and --dtype (where the models run, in which precision)."""
    ap.add_argument("--device", default="auto", help="auto (GPU when available) | cpu | cuda[:i]")
    ap.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="auto: bf16 on GPU, fp32 on CPU",
    )


def add_decoding_args(ap, *, scheduler_default: str = "fixed") -> None:
    """The flags that shape a speculative decoding step."""
    ap.add_argument(
        "--block-size",
        type=cli.POSITIVE,
        help="draft tokens per step, at most the trained block size (default: the trained one)",
    )
    ap.add_argument(
        "--scheduler",
        default=scheduler_default,
        choices=["fixed", "threshold", "prefix"],
        help="how many drafts each step verifies",
    )
    ap.add_argument(
        "--threshold",
        type=cli.PROBABILITY,
        default=0.5,
        help="scheduler=threshold: verify drafts while their prefix survival is at least this",
    )
    ap.add_argument("--sps", type=Path, help="SPS table JSON (needed by scheduler=prefix)")
    ap.add_argument("--sts", type=Path, help="STS calibration JSON (confidence temperatures)")
    ap.add_argument(
        "--verify-widths",
        type=cli.POSITIVE,
        nargs="+",
        help="verify shapes (graph buckets); default: every width 1..gamma+1",
    )
    ap.add_argument(
        "--runtime",
        default="auto",
        choices=["auto", "eager", "static"],
        help="how the target runs: static = a static KV cache and one CUDA graph per verify width "
        "on a GPU (the families draft_models.families marks static), eager = transformers; "
        "auto: static where it applies on a GPU, else eager",
    )
    add_compile_arg(ap)


def add_compile_arg(ap) -> None:
    """--compile (the static runtime's graphs capture torch.compile'd steps)."""
    ap.add_argument(
        "--compile",
        action="store_true",
        help="static runtime on a GPU: each CUDA graph captures torch.compile'd code (fewer, "
        "fused kernels per step); every graph compiles once, on first use, before its capture",
    )


def decoder_from_args(args):
    """(decoder, tokenizer) from `add_model_args` + `add_decoding_args` flags; raises ValueError /
    FileNotFoundError. A run directory given as --checkpoint is replaced in `args` by its newest
    complete checkpoint."""
    args.checkpoint = checkpoint.resolve(args.checkpoint)
    scheduler = SchedulerConfig(mode=args.scheduler, threshold=args.threshold)
    scheduler.validate()
    return load_decoder(
        args.checkpoint,
        args.target,
        scheduler=scheduler,
        sps=args.sps,
        sts=args.sts,
        block_size=args.block_size,
        device=args.device,
        verify_widths=args.verify_widths,
        dtype=args.dtype,
        runtime=args.runtime,
        compile=args.compile,
    )
