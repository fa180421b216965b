"""The draft-model layer (the bottom of the project): configs, the architecture registry and the
built-in architectures (DSpark, DFlash, EAGLE-3) with their proposers, losses, packing and STS.
Shared by the trainer (splitserve) and by serving; imports neither."""

from . import archs  # noqa: E402,F401
from .archs.dspark import DSparkDraft, DSparkProposer  # noqa: E402  (importing archs registers them)
from .archs.eagle3 import Eagle3Draft, Eagle3Proposer  # noqa: E402
from .config import DraftConfig, LossConfig, TargetSpec, dflash_layer_ids, load_draft_config
from .families import TargetFamily, family, register_family
from .heads import ConfidenceHead, FrozenTargetHead, GatedMarkovHead, MarkovHead, RNNHead
from .losses import LossResult, distillation_loss, draft_loss
from .models import DraftModel, DraftOutput, build_draft
from .packing import (
    NoAnchorsError,
    PackedBatch,
    SequenceSample,
    pack_blocks,
    pack_sequences,
    sample_anchors,
)
from .registry import DraftArch, arch_names, get_arch, register_arch, unregister_arch
from .sampling import pick
from .sts import StsResult, fit_sts, score_sts

__all__ = [
    "ConfidenceHead",
    "DSparkDraft",
    "DSparkProposer",
    "DraftArch",
    "DraftConfig",
    "DraftModel",
    "DraftOutput",
    "Eagle3Draft",
    "Eagle3Proposer",
    "FrozenTargetHead",
    "LossConfig",
    "LossResult",
    "MarkovHead",
    "PackedBatch",
    "RNNHead",
    "GatedMarkovHead",
    "SequenceSample",
    "StsResult",
    "TargetFamily",
    "TargetSpec",
    "arch_names",
    "build_draft",
    "dflash_layer_ids",
    "distillation_loss",
    "draft_loss",
    "family",
    "fit_sts",
    "score_sts",
    "get_arch",
    "load_draft_config",
    "NoAnchorsError",
    "pack_blocks",
    "pack_sequences",
    "pick",
    "register_arch",
    "register_family",
    "sample_anchors",
    "unregister_arch",
]
