"""The draft-architecture registry: one table from an architecture's name to everything the
trainer, the decoder and the exporter need to know about it.

Adding an architecture is one module that defines its model (a `DraftModel`), its proposer
(decode-time state) and optionally its SGLang export mapping, and one `register_arch(...)` call.
Nothing else in the project switches on the architecture's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DraftArch:
    """What the project knows about one draft architecture.

    - `model`: class built as `model(resolved_cfg, frozen_target_head)`; consumes a PackedBatch.
    - `proposer`: class built as `proposer(draft, gamma, sts_temperatures)`, or with
      `static_state = True` as `proposer(draft, gamma, sts_temperatures, capacity)` (fixed
      buffers, `reset(seed)`, `step(temperature, extent)`: what the decoder graphs, over the
      context positions below `extent`), with `commit(...)` and `propose(...)` (see
      `draft_models.archs.dspark.DSparkProposer` for the contract).
    - `defaults`: DraftConfig fields that differ from the dataclass defaults for this
      architecture (`loss` as a nested mapping); applied to every field a config leaves unset.
    - `samples_from_anchor`: slot 0 holds the anchor and predicts the next token (DSpark); else the
      block is anchor + gamma masks and slots 1..gamma predict. The architecture's convention,
      or its default when `any_slot_convention`: its model and proposer then follow the
      config's `sample_from_anchor` (DSpark); otherwise a config may only restate it.
    - `check`: architecture-specific validation of a config; raises ValueError naming the field.
    - `loss`: (draft, DraftOutput, PackedBatch) -> LossResult: what this architecture trains on.
    - `pruned_vocab`: the model and proposer support `draft_vocab_size` (draft_models.vocab:
      their own LM head over K kept ids, proposals mapped to target ids); others refuse it.
    - `export`: (resolved cfg, TargetSpec) -> SGLang config.json dict, raising ValueError for a
      configuration SGLang cannot serve; None when SGLang cannot serve the architecture at all
      (`not_servable` says why).
    """

    name: str
    model: type
    proposer: type
    loss: Callable[..., Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    samples_from_anchor: bool = True
    any_slot_convention: bool = False
    # (DraftConfig) and (DraftConfig, TargetSpec): typed Any, since draft_models.config imports
    # this table (defaults, check, samples_from_anchor) and the dependency runs one way.
    check: Callable[[Any], None] | None = None
    export: Callable[[Any, Any], dict] | None = None
    not_servable: str = ""
    pruned_vocab: bool = False


_ARCHS: dict[str, DraftArch] = {}


def register_arch(arch: DraftArch, *, replace: bool = False) -> DraftArch:
    """Add `arch` to the table; a second registration of a name is an error unless `replace`."""
    if arch.name in _ARCHS and not replace:
        raise ValueError(f"draft architecture {arch.name!r} is already registered")
    _ARCHS[arch.name] = arch
    return arch


def unregister_arch(name: str) -> None:
    _ARCHS.pop(name, None)


def arch_names() -> tuple[str, ...]:
    return tuple(_ARCHS)


def get_arch(name: str) -> DraftArch:
    try:
        return _ARCHS[name]
    except KeyError:
        raise ValueError(
            f"draft.arch={name!r} is invalid; allowed: {', '.join(_ARCHS)} "
            "(register more with draft_models.register_arch)"
        ) from None
