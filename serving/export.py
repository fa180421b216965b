"""Export a trained draft for SGLang 0.5.23 (`--speculative-algorithm DSPARK`).

    python -m serving.export --checkpoint RUN/checkpoints/step-N --out DIR [--sps sps.json] [--sts sts.json]

Writes `config.json` (Qwen3-style fields + the DSpark fields SGLang's parser reads) and
`model.safetensors` with exactly the draft's own weights under the names SGLang's DSpark loader
maps (`layers.*`, `fc`, `hidden_norm`, `norm`, `markov_head.*`, `confidence_head.proj.*`); the
embedding and LM head stay the target's. Ling / Bailing targets get `LingDSparkModel`, others
`Qwen3DSparkModel`. Drafts SGLang's DSpark classes cannot serve are refused, with the reason.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from draft_models import DraftConfig, DSparkDraft, FrozenTargetHead, LossConfig, TargetSpec
from draft_models.sts import read_temperatures

from .sps import SpsTable

LING_TYPES = ("bailing_hybrid", "bailing_moe", "bailing_moe_v2", "bailing_moe_v3")


def servable_problem(cfg: DraftConfig) -> str | None:
    """Why SGLang 0.5.23's DSpark draft classes cannot serve `cfg`, or None."""
    if cfg.arch != "dspark":
        return f"arch={cfg.arch}: SGLang's DSPARK algorithm serves DSpark drafts only"
    if cfg.attention != "qwen3":
        return f"attention={cfg.attention}: SGLang's DSpark drafts are Qwen3-shaped (GQA + q/k norm); MLA drafts have no serving class"
    if cfg.rope == "none":
        return "rope=none: SGLang's draft attention always applies rotary embeddings"
    if cfg.sequential_head == "none":
        return "sequential_head=none: SGLang's DSpark requires markov_rank > 0"
    if not cfg.confidence_head:
        return "confidence_head=false: SGLang builds the confidence head unless ragged verify is static, and then needs its weights"
    return None


def read_checkpoint(ckpt: Path) -> tuple[DraftConfig, TargetSpec, dict[str, torch.Tensor]]:
    ckpt = Path(ckpt)
    needed = [ckpt / "draft" / "draft_config.json", ckpt / "draft" / "model.safetensors", ckpt / "meta.json"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{ckpt} is not a complete SplitServe checkpoint: missing {', '.join(missing)}")
    cfg_dict = json.loads(needed[0].read_text())
    cfg = DraftConfig(**{**cfg_dict, "loss": LossConfig(**cfg_dict["loss"])})
    meta = json.loads(needed[2].read_text())
    if "target" not in meta:
        raise ValueError(f"{needed[2]} does not record the target's shape (checkpoint from an older SplitServe)")
    return cfg, TargetSpec(**meta["target"]), load_file(str(needed[1]))


def sglang_config(cfg: DraftConfig, target: TargetSpec) -> dict:
    arch = "LingDSparkModel" if target.model_type in LING_TYPES else "Qwen3DSparkModel"
    layer_type = "sliding_attention" if cfg.sliding_window else "full_attention"
    out = {
        "architectures": [arch],
        "model_type": "qwen3",
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "attention_bias": False,
        "vocab_size": target.vocab_size,
        "max_position_embeddings": 262144,
        "rope_theta": cfg.rope_theta,
        "partial_rotary_factor": cfg.rotary_fraction,
        "is_neox_style": cfg.rope != "interleaved",
        "num_hidden_layers": cfg.num_layers,
        "layer_types": [layer_type] * cfg.num_layers,
        "tie_word_embeddings": False,
        "num_target_layers": target.num_layers,
        "block_size": cfg.block_size,
        "target_layer_ids": list(cfg.target_layer_ids),
        "mask_token_id": cfg.mask_token_id,
        "markov_rank": cfg.markov_rank,
        "markov_head_type": {"markov": "vanilla", "rnn": "rnn"}[cfg.sequential_head],
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "sample_from_anchor": True,
        "splitserve_draft_config": {k: v for k, v in asdict(cfg).items() if k != "loss"},
    }
    if cfg.sliding_window:
        out["sliding_window"] = cfg.sliding_window
    return out


def export(ckpt: Path, out: Path, sps: Path | None = None, sts: Path | None = None) -> Path:
    cfg, target, weights = read_checkpoint(ckpt)
    why = servable_problem(cfg)
    if why:
        raise ValueError(f"cannot export {ckpt} for SGLang: {why}")
    if sts is not None:
        read_temperatures(sts, cfg.block_size)  # validates, with the file named in any error
    if sps is not None:
        SpsTable.load(sps)  # validates, with the file named in any error
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(sglang_config(cfg, target), indent=1))
    save_file({k: v.contiguous() for k, v in sorted(weights.items())}, str(tmp / "model.safetensors"),
              metadata={"format": "pt"})
    for src, name in ((sps, "sps.json"), (sts, "sts.json")):
        if src is not None:
            shutil.copyfile(src, tmp / name)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def load_exported(path: Path, head: FrozenTargetHead) -> DSparkDraft:
    """Rebuild our draft from an exported directory (strict: every weight must match)."""
    config = json.loads((Path(path) / "config.json").read_text())
    cfg = DraftConfig(**config["splitserve_draft_config"])
    draft = DSparkDraft(cfg, head)
    draft.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=True)
    return draft


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Export a SplitServe draft checkpoint for SGLang's DSPARK")
    ap.add_argument("--checkpoint", required=True, type=Path, help="RUN/checkpoints/step-N")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--sps", type=Path, help="SPS table JSON to ship with the draft")
    ap.add_argument("--sts", type=Path, help="STS calibration JSON to ship with the draft")
    args = ap.parse_args(argv)
    try:
        out = export(args.checkpoint, args.out, args.sps, args.sts)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
