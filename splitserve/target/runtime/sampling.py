"""Sampling on the device with counter-based noise, one seed per row.

Why counter-based: with continuous refill a sequence shares its batch with whichever others are
in flight, so a generator stream shared by the batch would make a sample's tokens depend on its
neighbours (and a resumed run would have to rebuild the same batch to get the same samples). Here
the uniform that draws the token at position p of a row seeded s is a hash of (s, p): a sample's
tokens depend only on its own seed and its own logits, whatever the batch, the slot or the step.
The sampler inverts the CDF of softmax(logits / T) (restricted to the nucleus) at one
counter uniform per row: the same law as a Gumbel-max draw, without a hash per vocabulary entry
(on one H200 the per-entry hashes and the scatter back from the sort took about a sixth of a
SmolLM2 regeneration step); temperature 0 is argmax.
"""

from __future__ import annotations

import torch

from draft_models.sampling import counter_row_uniform


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
        probs = probs.masked_fill(before > top_p[:, None], 0.0)
    else:
        probs, order = scaled.softmax(-1), None
    cdf = probs.double().cumsum(-1)  # fp64: monotone, and exact enough at 150k entries
    u = counter_row_uniform(seed, pos).double()[:, None] * cdf[:, -1:]
    # the first entry whose cumulative mass passes u has probability > 0; rounding aside, the
    # draw is clamped to the last entry of probability > 0 (where the running count of them
    # first peaks: in vocabulary order they need not be a prefix)
    last = (probs > 0).cumsum(-1).argmax(-1, keepdim=True)
    idx = torch.searchsorted(cdf, u, right=True).minimum(last)
    drawn = (idx if order is None else order.gather(-1, idx))[:, 0]
    return torch.where(temperature > 0, drawn, logits.argmax(-1))
