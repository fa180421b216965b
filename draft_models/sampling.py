"""Choosing a token from logits, shared by every proposer and by the decoder's verify step."""

from __future__ import annotations

import torch


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """(token [1] on logits' device, probabilities [V] used or None) from logits [V]; greedy at
    0."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True), None
    probs = torch.softmax(logits.double() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator), probs
