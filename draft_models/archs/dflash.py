"""DFlash, the parallel baseline: DSpark's backbone with anchor + gamma mask slots, trained on
cross-entropy only, without sequential or confidence head. SGLang's DSPARK algorithm does not
serve it."""

from __future__ import annotations

from ..config import DraftConfig, bad_value
from ..losses import draft_loss
from ..registry import DraftArch, register_arch
from .dspark import DSparkDraft, DSparkProposer


def check(cfg: DraftConfig) -> None:
    """No sequential and no confidence head (also EAGLE-3's first check)."""
    if cfg.sequential_head != "none":
        raise bad_value("sequential_head", cfg.sequential_head, f"'none' for arch={cfg.arch}")
    if cfg.confidence_head:
        raise bad_value("confidence_head", cfg.confidence_head, f"false for arch={cfg.arch}")


DEFAULTS = {
    "sequential_head": "none",
    "confidence_head": False,
    "loss": {"ce_weight": 1.0, "distill_weight": 0.0, "confidence_weight": 0.0},
}

register_arch(
    DraftArch(
        name="dflash",
        model=DSparkDraft,
        proposer=DSparkProposer,
        loss=draft_loss,
        defaults=DEFAULTS,
        samples_from_anchor=False,
        check=check,
        not_servable="SGLang's DSPARK algorithm serves DSpark drafts only "
        "(DFlash has no sequential or confidence head)",
    )
)
