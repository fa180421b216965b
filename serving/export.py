"""Export a trained draft for SGLang 0.5.23 (`--speculative-algorithm DSPARK`) or another engine.

    python -m serving.export --checkpoint RUN/checkpoints/step-N --out DIR \
        [--format sglang|speculators|hf] [--sps sps.json] [--sts sts.json]

`sglang` (default) writes `config.json` (the architecture's registered export mapping:
Qwen3-style fields + the DSpark fields SGLang's parser reads) and `model.safetensors` with
exactly the draft's own weights under the names SGLang's DSpark loader maps (`layers.*`, `fc`,
`hidden_norm`, `norm`, `markov_head.*`, `confidence_head.proj.*`); the embedding and LM head
stay the target's. `hf` is DeepSpec's layout (the target's config under the same fields, and
copies of its embedding and LM head), which SGLang loads too; `speculators` is vLLM speculators'
DSpark layout (draft_models.formats). Every format is read back by train.init_from and the
serving CLIs. A pruned draft vocabulary (draft.draft_vocab_size) is written in `hf` and
`speculators` (config `draft_vocab_size`, weights `d2t`, `t2d`, `lm_head.weight` [K, H]) and
refused in `sglang`, which has no place for it. Drafts no engine can serve are refused, with the
reason; an existing output directory is replaced only once the new one is complete. It prints
the files written, with their sizes, and the command that serves them (`serving.launch`'s, for
the target the draft was trained against).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

from draft_models import (
    DraftConfig,
    DraftModel,
    FrozenTargetHead,
    TargetSpec,
    get_arch,
)
from draft_models.config_io import read_json
from draft_models.formats import (
    FORMATS,
    SGLANG_PRUNED,
    check_format,
    hf_config,
    speculators_config,
)
from draft_models.sts import read_temperatures
from splitserve import checkpoint

from . import cli, launch
from .sps import SpsTable


def export_config(cfg: DraftConfig, target: TargetSpec) -> dict:
    """SGLang's config.json for `cfg`; ValueError with the reason when SGLang cannot serve it."""
    arch = get_arch(cfg.arch)
    if arch.export is None:
        reason = arch.not_servable or "no SGLang export mapping is registered for this architecture"
        raise ValueError(f"arch={cfg.arch}: {reason}")
    return arch.export(cfg, target)


WEIGHT_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def export(
    ckpt: Path,
    out: Path,
    sps: Path | None = None,
    sts: Path | None = None,
    dtype: str = "bfloat16",
    max_shard_mb: float = checkpoint.DEFAULT_SHARD_MB,
    fmt: str = "sglang",
) -> Path:
    """Write the draft directory `out` in format `fmt` for checkpoint `ckpt` (weights cast to
    `dtype`, sharded past `max_shard_mb` with a safetensors index, which SGLang's loader reads)."""
    return export_draft(checkpoint.read_draft(ckpt), out, sps, sts, dtype, max_shard_mb, fmt)


def export_draft(
    draft: checkpoint.DraftCheckpoint,
    out: Path,
    sps: Path | None = None,
    sts: Path | None = None,
    dtype: str = "bfloat16",
    max_shard_mb: float = checkpoint.DEFAULT_SHARD_MB,
    fmt: str = "sglang",
) -> Path:
    """`export` of a draft already read (the CLI keeps it: its target names the launch command)."""
    check_format(fmt)
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"dtype {dtype!r} is invalid; allowed: {', '.join(sorted(WEIGHT_DTYPES))}")
    if draft.exported:
        what = (
            "is already an exported draft"
            if checkpoint.is_exported(draft.path)
            else "is a checkpoint's draft/ folder alone, which names no target"
        )
        raise ValueError(f"{draft.path} {what} (pass its run's checkpoint)")
    weights = dict(draft.weights)
    try:
        config = export_config(draft.cfg, draft.target)
        if fmt == "sglang" and draft.cfg.pruned_vocab:
            k, v = draft.cfg.draft_vocab_size, draft.target.vocab_size
            raise ValueError(SGLANG_PRUNED.format(k=k, v=v))
        if fmt != "sglang":
            target_config = read_json(Path(draft.model_dir) / "config.json", "target config")
        if fmt == "hf":
            config = hf_config(config, target_config)
            copies = target_copies(Path(draft.model_dir))
            if draft.cfg.pruned_vocab:  # its lm_head.weight is the draft's own [K, H]
                del copies["lm_head.weight"]
            weights.update(copies)
        elif fmt == "speculators":
            verifier = {
                "name_or_path": str(draft.model_dir),
                "architectures": target_config.get("architectures") or [],
            }
            config = speculators_config(config, draft.target, verifier)
    except ValueError as exc:
        raise ValueError(f"cannot export {draft.path} in the {fmt} format: {exc}") from None
    if sts is not None:
        read_temperatures(sts, draft.cfg.block_size)  # validates, with the file named in any error
    if sps is not None:
        SpsTable.load(sps)  # validates, with the file named in any error
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype}, indent=1))
    checkpoint.save_weights(
        {
            k: checkpoint.as_weight(v, WEIGHT_DTYPES[dtype]).contiguous()
            for k, v in sorted(weights.items())
        },
        tmp,
        max_shard_mb,
    )
    for src, name in ((sps, "sps.json"), (sts, "sts.json")):
        if src is not None:
            shutil.copyfile(src, tmp / name)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def target_copies(model_dir: Path) -> dict[str, torch.Tensor]:
    """The hf layout's copies of the target's embedding and LM head (DeepSpec ships them)."""
    from splitserve.target.models import load_frozen_head

    head = load_frozen_head(model_dir, "cpu", torch.float32)
    # two tensors even for a tied target: DeepSpec writes tie_word_embeddings false, both copies
    return {"embed_tokens.weight": head.embed_weight, "lm_head.weight": head.lm_head_weight.clone()}


def load_exported(path: Path, head: FrozenTargetHead) -> DraftModel:
    """Rebuild our draft from an exported directory in any format (strict: every weight of the
    draft must be there, the hf layout's target copies aside)."""
    cfg, weights = checkpoint.read_init_draft(Path(path))
    draft = get_arch(cfg.arch).model(cfg, head)
    draft.load_state_dict(weights, strict=True)
    return draft


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser("export", "Export a SplitServe draft checkpoint for SGLang's DSPARK")
    ap.add_argument(
        "--checkpoint",
        required=True,
        type=Path,
        help="RUN/checkpoints/step-N, or a run directory (its newest complete checkpoint)",
    )
    ap.add_argument("--out", required=True, type=Path, help="the directory to write")
    ap.add_argument(
        "--format",
        default="sglang",
        choices=FORMATS,
        help="sglang (SGLang 0.5.23's DSPARK), hf (DeepSpec's layout: also loads in SGLang) or "
        "speculators (vLLM speculators' DSpark layout)",
    )
    ap.add_argument(
        "--sps",
        type=Path,
        help="SPS table JSON to ship with the draft (default: the checkpoint's sps.json, if any)",
    )
    ap.add_argument(
        "--sts",
        type=Path,
        help="STS calibration JSON to ship with the draft (default: the checkpoint's sts.json, "
        "which train.calibrate_at_end writes, if any)",
    )
    ap.add_argument(
        "--dtype",
        default="bfloat16",
        choices=sorted(WEIGHT_DTYPES),
        help="weight dtype (SGLang serves the draft in the target's dtype; bf16 for Ling-3)",
    )
    ap.add_argument(
        "--max-shard-mb",
        type=float,
        default=checkpoint.DEFAULT_SHARD_MB,
        help="larger weights are written as shards of at most this size, with an index",
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        if args.max_shard_mb <= 0:
            raise ValueError(f"--max-shard-mb {args.max_shard_mb}: allowed a number > 0")
        draft = checkpoint.read_draft(args.checkpoint)
        sps, sts = (
            given if given is not None else beside(draft.path, name)
            for given, name in ((args.sps, "sps.json"), (args.sts, "sts.json"))
        )
        out = export_draft(draft, args.out, sps, sts, args.dtype, args.max_shard_mb, args.format)
        pruned = draft.cfg.pruned_vocab
        argv, env = (None, None) if pruned else launch.build_command(str(draft.model_dir), out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    files = sorted(p for p in out.iterdir() if p.is_file())
    width = max(len(p.name) for p in files)
    print("files written:")
    for p in files:
        print(f"  {p.name:<{width}}  {_size(p.stat().st_size):>9}")
    if pruned:
        print(
            f"a pruned draft vocabulary ({draft.cfg.draft_vocab_size} ids, maps d2t / t2d): "
            "SplitServe's decoder and vLLM speculators' layout read it; SGLang 0.5.23 does not"
        )
    elif args.format == "speculators":
        print(
            "speculators' DSpark layout: vLLM reads it (not run here); SGLang 0.5.23 does not "
            "(export --format sglang or hf for it)"
        )
    else:
        print(
            "serve it with SGLang 0.5.23, from SGLang's own environment (`python -m "
            "serving.launch` prints this for another --python, --target, --tp-size or --port):"
        )
        print(f"  {launch.shell_line(argv, env)}")
    print(f"wrote {out}")
    return 0


def beside(ckpt: Path, name: str) -> Path | None:
    """`name` in the checkpoint directory (train.calibrate_at_end's sts.json), said when found."""
    path = Path(ckpt) / name
    if not path.is_file():
        return None
    print(f"shipping {path} (found beside the checkpoint; --{name[:3]} FILE picks another)")
    return path


def _size(n: int) -> str:
    """A file size as people read it (1024-based units)."""
    units, size, k = ("B", "KiB", "MiB", "GiB"), float(n), 0
    while size >= 1024 and k < len(units) - 1:
        size, k = size / 1024, k + 1
    return f"{n} B" if k == 0 else f"{size:.1f} {units[k]}"


if __name__ == "__main__":
    sys.exit(main())
