"""Sampling on the device with counter-based noise, one seed per row.

Why counter-based: with continuous refill a sequence shares its batch with whichever others are
in flight, so a generator stream shared by the batch would make a sample's tokens depend on its
neighbours (and a resumed run would have to rebuild the same batch to get the same samples). Here
the noise for token v of the token at position p of a row seeded s is a hash of (s, p, v): a
sample's tokens depend only on its own seed and its own logits, whatever the batch, the slot or
the step. The sampler is Gumbel-max over the temperature-scaled (and nucleus-filtered) logits,
which draws from softmax(logits / T) restricted to the nucleus; temperature 0 is argmax.
"""

from __future__ import annotations

import torch

from draft_models.sampling import counter_gumbel


def sample_rows(
    logits: torch.Tensor,
    seed: torch.Tensor,
    pos: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    nucleus: bool,
) -> torch.Tensor:
    """Next token per row from logits [B, V]: argmax where temperature <= 0, else a draw from
    softmax(logits / T) over the smallest set of tokens whose probability reaches top_p (the
    `nucleus=False` path skips the sort when no row uses top_p < 1). No host reads."""
    logits = logits.float()
    scaled = logits / temperature.clamp_min(1e-6)[:, None]
    if nucleus:
        ordered, order = scaled.sort(dim=-1, descending=True)
        probs = ordered.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        ordered = ordered.masked_fill(before > top_p[:, None], float("-inf"))
        scaled = torch.empty_like(scaled).scatter_(-1, order, ordered)
    gumbel = counter_gumbel(seed, pos, logits.shape[-1], torch.float32)
    drawn = (scaled + gumbel).argmax(-1)
    return torch.where(temperature > 0, drawn, logits.argmax(-1))
