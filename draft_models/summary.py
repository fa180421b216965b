"""Print a draft's resolved config and parameter counts for a target shape (no weights needed).

    python -m draft_models.summary               # default DSpark for SmolLM2-135M
    python -m draft_models.summary target_shape=ling3_flash draft=dflash draft.num_layers=2

The frozen target embedding and LM head are counted separately: they are shared by reference
and never saved with the draft.
"""

from __future__ import annotations

import json
from collections import Counter

import hydra
import torch
from omegaconf import DictConfig

from .config import DraftConfig, TargetSpec, load_draft_config, store_hydra_defaults
from .config_io import load_dataclass
from .heads import FrozenTargetHead
from .models import build_draft


def parameter_breakdown(model: torch.nn.Module) -> dict[str, int]:
    """Trainable parameters grouped by top-level component (layers, fc, markov_head, ...)."""
    groups: Counter[str] = Counter()
    for name, p in model.named_parameters():
        groups[name.split(".")[0]] += p.numel()
    return dict(groups)


def summarize(draft_cfg: DraftConfig, target: TargetSpec) -> dict:
    # Meta tensors: shapes without memory, so a Ling-3-sized draft summarises instantly.
    with torch.device("meta"):
        embed = torch.empty(target.vocab_size, target.hidden_size)
        model = build_draft(draft_cfg, target, FrozenTargetHead(embed, embed))
    breakdown = parameter_breakdown(model)
    return {
        "target": target.model_type,
        "arch": model.cfg.arch,
        "target_layer_ids": model.cfg.target_layer_ids,
        "draft_parameters": sum(breakdown.values()),
        "by_component": breakdown,
        "frozen_shared_target_parameters": (1 if target.tie_word_embeddings else 2)
        * target.vocab_size
        * target.hidden_size,
    }


@hydra.main(config_path="../conf", config_name="summary", version_base="1.3")
def main(cfg: DictConfig) -> None:
    draft_cfg = load_draft_config(cfg.draft, "draft")
    target = load_dataclass(TargetSpec, cfg.target_shape, "target_shape")
    print(json.dumps(summarize(draft_cfg, target), indent=2))


if __name__ == "__main__":
    from pathlib import Path

    store_hydra_defaults(str(Path(__file__).resolve().parents[1] / "conf"))
    main()
