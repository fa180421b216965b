"""The target's configuration (one type for every backend) and the target-side policies that more
than one module applies: which dtype `auto` means, and how a regenerated sample is seeded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

TARGET_KINDS = ("smollm2", "gemma3_270m", "path", "ling3_mini")
RANDOM_WEIGHT_KINDS = ("ling3_mini",)  # target.kind values built with random weights
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class SamplingSetting:
    """One regeneration setting; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0


@dataclass
class TargetConfig:
    # smollm2: the embedded default | gemma3_270m: Gemma 3 270M base (PyPI GGUF parts) | path: a
    # local HF directory | ling3_mini: tiny random Ling-3
    kind: str = "smollm2"
    # auto (static on a GPU where the static runtime runs the target, else hf) | a registered
    # target backend: hf (transformers, anywhere) | static (the static-cache runtime's families,
    # draft_models.families: CUDA graphs on a GPU) | sglang (production GPU; unverified)
    backend: str = "auto"
    path: str | None = None  # required for kind=path
    dtype: str = "auto"  # auto: bf16 on GPU, fp32 on CPU
    tp_size: int = 1  # tensor parallel size inside one target worker (sglang backend)
    regenerate: bool = True  # replace dataset answers with the target's own responses
    max_new_tokens: int = 128
    # Sequences regenerated together: hf, one left-padded generate call; static, the sequences in
    # flight (continuous refill). 1 keeps one sequence at a time; larger batches keep a GPU busy.
    generate_batch: int = 1
    # static backend: 0 hands it every sample the worker needs as one lazily read stream (slots
    # never drain at a window's end); > 0 cuts the list into windows of this many samples.
    # (hf: each generate call is one window of generate_batch.)
    produce_window: int = 0
    # static backend: prompts (regeneration) or conversations (regenerate=false) rendered this
    # many samples ahead in a thread while the worker waits for its device (0: inline)
    render_ahead: int = 64
    sampling: list[SamplingSetting] = field(default_factory=lambda: [SamplingSetting()])
    # The draft.target_layer_ids this target is meant to be distilled from: a draft that leaves
    # its ids unset (null) takes these (else DFlash's evenly spaced rule). Ids count decoder
    # layers from 0 and name a layer's *output*, as SGLang's BailingMoeV3 captures an id.
    capture_layer_ids: list[int] | None = None
    sglang_mem_fraction: float = 0.8
    # ling3_mini: shape overrides of the tiny bailing_hybrid config (random weights, seeded).
    mini: dict[str, Any] = field(default_factory=dict)


def resolve_dtype(name: str, device) -> torch.dtype:
    """The dtype a target (or a draft decoding beside it) runs in: `auto` is bf16 on a GPU and
    fp32 on CPU (bit-exact checks want fp32 anywhere: pass float32)."""
    if name == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is invalid; allowed: auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def regeneration_seed(seed: int, sample_id: int) -> int:
    """The seed of sample `sample_id`'s regeneration under run seed `seed`, the same for every
    backend (and < 2**31, which every sampler accepts): same sample id, same tokens, in any
    process, so a resumed run regenerates exactly the samples it lost."""
    return (int(seed) * 1_000_003 + int(sample_id)) % (1 << 31)
