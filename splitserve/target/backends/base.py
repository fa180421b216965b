"""The target-backend interface and its registry.

A target worker asks its backend for samples: (sample id g, conversation) -> `SequenceSample`
(the target's own answer to the conversation's opening turns, regenerated under sampling setting
g mod len(settings) and seeded by `regeneration_seed`; an assistant-only loss mask; the hidden
states of the draft's target layers and the final normed state). Every backend is built from the
same `TargetSetup` and registered by name; `target.backend` picks one (`auto`: resolve_backend).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from draft_models import SequenceSample

from ...data import Conversation, prompt_turns
from ..chat import prompt_ids, render_with_loss_mask
from ..config import SamplingSetting, TargetConfig
from ..models import check_tokenizer, load_target_spec
from ..runtime.static_model import unsupported_reason


@dataclass
class TargetSetup:
    """What every backend is built from."""

    model_dir: Path
    cfg: TargetConfig
    layer_ids: list[int]  # the draft's target_layer_ids: whose outputs to capture, in this order
    device: torch.device
    seed: int  # the run seed (see regeneration_seed)
    max_length: int  # tokens per sample, prompt + response; truncated beyond
    max_prompt_tokens: int  # the prompt keeps its last this many tokens


class TargetBackend:
    """Base of every backend: the target's shape and tokenizer, and the rules all backends share
    (which prompt, which sampling setting, how many new tokens, which tokens carry loss).

    `target_share`: the share of a GPU node's GPUs its targets get when the split leaves the
    counts unset, from measured rates (docs/results/splits); None: every GPU but one trainer's
    (a backend far slower than one trainer).

    `tensor_parallel`: one target worker's model spans `target.tp_size` GPUs (its engine shards
    the target), so the worker is given that many; False: one GPU, `tp_size` unused."""

    target_share: float | None = None
    tensor_parallel = False
    # True: a sample is the same whatever else is produced with it (its noise is its own), so a
    # worker may hand the backend any set of samples, e.g. only those still needed after a resume
    batch_invariant = False

    def __init__(self, setup: TargetSetup) -> None:
        self.setup = setup
        self.cfg = setup.cfg
        self.device = torch.device(setup.device)
        self.layer_ids = list(setup.layer_ids)
        self.spec = load_target_spec(setup.model_dir)
        self.tokenizer = check_tokenizer(setup.model_dir, self.spec)

    @property
    def window(self) -> int:
        """Samples handed to `produce_stream` at a time (fixed slices of the worker's sample
        list, see workers.BatchedProducer); 1: `produce` one by one; 0 (batch-invariant backends
        only): one stream over every sample the worker still needs."""
        return self.cfg.generate_batch

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        raise NotImplementedError

    def produce_batch(
        self, gs: list[int], conversations: list[Conversation]
    ) -> list[SequenceSample]:
        """Several samples at once; backends that batch regeneration override this."""
        return [self.produce(g, c) for g, c in zip(gs, conversations, strict=True)]

    def produce_stream(
        self, gs: list[int], conversations: list[Conversation]
    ) -> Iterator[tuple[int, SequenceSample]]:
        """(index into gs, sample) for every sample, in any order: a backend that finishes
        samples at different times yields each as it is done (so the worker can send it)."""
        yield from enumerate(self.produce_batch(gs, conversations))

    # ----- rules shared by every backend -----
    def prompt(self, conversation: Conversation) -> list[int]:
        """The prompt the target answers: the turns before the first assistant turn, rendered
        with the generation prompt, its last `max_prompt_tokens` tokens."""
        return prompt_ids(self.tokenizer, prompt_turns(conversation), self.setup.max_prompt_tokens)

    def teacher_forced(self, conversation: Conversation) -> tuple[torch.Tensor, torch.Tensor]:
        """A dataset conversation as trained on without regeneration (target.regenerate=false):
        rendered with its assistant-only loss mask and cut to max_length, turns past the cut
        left unrendered."""
        return render_with_loss_mask(self.tokenizer, conversation, self.setup.max_length)

    def stop_ids(self, model) -> set[int]:
        """The tokens that end an answer: the tokenizer's EOS and every id `model`'s generation
        config lists (transformers' generate stops on any of them: Llama 3 and Qwen list
        several, Gemma's instruction-tuned models their <end_of_turn>)."""
        ids = model.generation_config.eos_token_id
        ids = set() if ids is None else {ids} if isinstance(ids, int) else set(ids)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def setting(self, g: int) -> SamplingSetting:
        return self.cfg.sampling[g % len(self.cfg.sampling)]

    def budget(self, prompt_len: int) -> int:
        """New tokens a sample may get: max_new_tokens, within max_length, at least one."""
        return max(1, min(self.cfg.max_new_tokens, self.setup.max_length - prompt_len))

    @staticmethod
    def with_mask(prompt, response) -> tuple[torch.Tensor, torch.Tensor]:
        """(prompt + response ids, loss mask True on the response) as tensors."""
        ids = torch.cat(
            (torch.as_tensor(prompt, dtype=torch.long), torch.as_tensor(response, dtype=torch.long))
        )
        mask = torch.zeros(ids.numel(), dtype=torch.bool)
        mask[len(prompt) :] = True
        return ids, mask


_BACKENDS: dict[str, type[TargetBackend]] = {}


def register_backend(name: str) -> Callable[[type[TargetBackend]], type[TargetBackend]]:
    """Class decorator: make `target.backend=<name>` build this class."""

    def add(cls: type[TargetBackend]) -> type[TargetBackend]:
        if name in _BACKENDS and _BACKENDS[name] is not cls:
            raise ValueError(f"target backend {name!r} is already registered")
        _BACKENDS[name] = cls
        return cls

    return add


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backend_class(name: str) -> type[TargetBackend]:
    if name not in _BACKENDS:
        raise ValueError(f"target.backend={name!r} is invalid; allowed: {', '.join(_BACKENDS)}")
    return _BACKENDS[name]


AUTO = "auto"


def resolve_backend(name: str, model_dir: Path, device: str) -> tuple[str, str]:
    """(backend, why) for `target.backend=name`: any registered name is itself; `auto` is
    `static` on a GPU for a target the static runtime runs (its graphs are what make it fast:
    ~20x hf per target step), else `hf` (on CPU the two compute the same at the same speed)."""
    if name != AUTO:
        return name, ""
    if device != "cuda":
        return "hf", "no GPU: the static runtime's speed comes from CUDA graphs"
    from transformers import AutoConfig

    why = unsupported_reason(AutoConfig.from_pretrained(model_dir))
    if why is None:
        return "static", "the static runtime runs this target"
    return "hf", f"the static runtime {why}"


def make_backend(setup: TargetSetup) -> TargetBackend:
    """The backend `setup.cfg.backend` names (`auto` resolved for this target and device)."""
    name, _ = resolve_backend(setup.cfg.backend, setup.model_dir, torch.device(setup.device).type)
    return backend_class(name)(setup)
