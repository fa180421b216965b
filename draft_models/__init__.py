"""DSpark draft-model family shared by the trainer (splitserve), the exporter and decoder (serving)."""

from .config import DraftConfig, LossConfig, TargetSpec, dflash_layer_ids
from .heads import ConfidenceHead, FrozenTargetHead, MarkovHead, RNNHead
from .losses import LossResult, distillation_loss
from .models import DraftModel, DraftOutput, DSparkDraft, Eagle3Draft, build_draft
from .packing import PackedBatch, SequenceSample, pack_blocks, pack_sequences, sample_anchors
from .sts import StsResult, fit_sts

__all__ = [
    "ConfidenceHead", "DSparkDraft", "DraftConfig", "DraftModel", "DraftOutput", "Eagle3Draft",
    "FrozenTargetHead", "LossConfig", "LossResult", "MarkovHead", "PackedBatch", "RNNHead",
    "SequenceSample", "StsResult", "TargetSpec", "build_draft", "dflash_layer_ids",
    "distillation_loss", "fit_sts", "pack_blocks", "pack_sequences", "sample_anchors",
]
