"""The `hf` backend: any transformers causal LM (Llama, bailing_hybrid, ...) regenerates with
`generate` and is captured with forward hooks; runs on CPU and GPU."""

from __future__ import annotations

import torch

from draft_models import SequenceSample

from ...data import Conversation
from ..capture import target_sample
from ..config import SamplingSetting, regeneration_seed, resolve_dtype
from ..models import load_causal_lm
from .base import TargetBackend, TargetSetup, register_backend


@register_backend("hf")
class HFTarget(TargetBackend):
    def __init__(self, setup: TargetSetup) -> None:
        super().__init__(setup)
        self.dtype = resolve_dtype(self.cfg.dtype, self.device)
        self.model = load_causal_lm(setup.model_dir, self.device, self.dtype)

    @property
    def pad_id(self) -> int:
        """The tokenizer's pad token, or EOS where it has none (a pad id of 0 is a pad id)."""
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    def _generate_kwargs(self, setting: SamplingSetting, budget: int) -> dict:
        kwargs = dict(
            do_sample=setting.temperature > 0, max_new_tokens=budget, pad_token_id=self.pad_id
        )
        if setting.temperature > 0:
            kwargs.update(temperature=setting.temperature, top_p=setting.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return kwargs

    @torch.no_grad()
    def regenerate(self, g: int, conversation: Conversation) -> tuple[torch.Tensor, torch.Tensor]:
        """The target answers the conversation's opening turns itself (see TargetBackend)."""
        prompt = torch.tensor(self.prompt(conversation), dtype=torch.long)
        torch.manual_seed(regeneration_seed(self.setup.seed, g))
        out = self.model.generate(
            prompt[None].to(self.device),
            **self._generate_kwargs(self.setting(g), self.budget(prompt.numel())),
        )
        return self.with_mask(prompt, out[0, prompt.numel() :].cpu())

    @torch.no_grad()
    def regenerate_batch(
        self, gs: list[int], conversations: list[Conversation]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`regenerate` for samples of one sampling setting in one left-padded generate call,
        seeded by the first id: deterministic for a fixed batch composition, which the worker
        keeps fixed by cutting its sample list into batches counted from step 0."""
        prompts = [torch.tensor(self.prompt(c), dtype=torch.long) for c in conversations]
        stops = torch.tensor(sorted(self.stop_ids(self.model)), dtype=torch.long)
        pad = self.pad_id
        width = max(p.numel() for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - p.numel() :] = p
            attention[i, width - p.numel() :] = 1
        torch.manual_seed(regeneration_seed(self.setup.seed, gs[0]))
        budget = max(self.budget(p.numel()) for p in prompts)
        out = self.model.generate(
            ids.to(self.device),
            attention_mask=attention.to(self.device),
            **self._generate_kwargs(self.setting(gs[0]), budget),
        ).cpu()
        results = []
        for i, p in enumerate(prompts):
            response = out[i, width : width + self.budget(p.numel())]
            ends = torch.isin(response, stops).nonzero()
            if ends.numel():
                # as unbatched generate: stop after the first of its stop tokens
                response = response[: int(ends[0]) + 1]
            results.append(self.with_mask(p, response))
        return results

    def produce_batch(
        self, gs: list[int], conversations: list[Conversation]
    ) -> list[SequenceSample]:
        """Several samples at once: batched regeneration (one generate call per sampling
        setting), then one capture forward per sample."""
        if not self.cfg.regenerate or len(gs) == 1:
            return super().produce_batch(gs, conversations)
        pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        n = len(self.cfg.sampling)
        for setting in range(n):
            group = [i for i, g in enumerate(gs) if g % n == setting]
            if group:
                done = self.regenerate_batch(
                    [gs[i] for i in group], [conversations[i] for i in group]
                )
                pairs.update(zip(group, done, strict=True))
        return [self._capture(*pairs[i]) for i in range(len(gs))]

    def _capture(self, ids: torch.Tensor, mask: torch.Tensor) -> SequenceSample:
        limit = self.setup.max_length
        return target_sample(
            self.model, ids[:limit].to(self.device), mask[:limit].to(self.device), self.layer_ids
        )

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        if self.cfg.regenerate:
            return self._capture(*self.regenerate(g, conversation))
        return self._capture(*self.teacher_forced(conversation))
