"""Real acceptance during training: trainer rank 0 decodes a few held-out prompts with the live
draft and the speculative decoder, next to the simulated tau of the same evaluation.

The trainer names this class in its config (`train.decode_eval_probe`) instead of importing it,
so the trainer never depends on serving. The probe loads its own copy of the target (HF, on the
trainer's device) the first time it runs, so it suits targets that fit beside the draft (the
`smol` recipe); recipes with large targets leave `train.decode_eval_prompts` at 0 and evaluate
checkpoints with `serving.evaluate`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from splitserve.data import Conversation, prompt_turns
from splitserve.target.chat import prompt_ids
from splitserve.target.models import load_causal_lm

from .decoder import SpeculativeDecoder


class RealTauProbe:
    def __init__(
        self, model_dir: str, prompts: list[Conversation], max_new_tokens: int, device: torch.device
    ) -> None:
        self.model_dir, self.max_new_tokens, self.device = Path(model_dir), max_new_tokens, device
        self.prompts = [prompt_turns(c) for c in prompts]
        self._target = self._tokenizer = None

    def _load(self) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self._target = load_causal_lm(self.model_dir, self.device, "auto")

    @torch.no_grad()
    def __call__(self, draft: torch.nn.Module) -> dict:
        """Greedy, every draft slot verified: real tau = tokens emitted per decode step."""
        if self._target is None:
            self._load()
        was_training = draft.training
        try:
            decoder = SpeculativeDecoder(self._target, draft)
            emitted = steps = 0
            for messages in self.prompts:
                res = decoder.generate(
                    prompt_ids(self._tokenizer, messages),
                    self.max_new_tokens,
                    eos_token_id=self._tokenizer.eos_token_id,
                )
                emitted += sum(res.accept_lengths)
                steps += res.steps
        finally:
            draft.train(was_training)
        return {
            "eval_real_tau": emitted / steps if steps else float("nan"),
            "eval_real_steps": steps,
        }
