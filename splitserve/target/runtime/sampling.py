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

_MASK = (1 << 31) - 1
_MIX = 0x45D9F3B  # odd multiplier < 2**27: a 31-bit value times it stays inside int64


def counter_uniform(seed: torch.Tensor, pos: torch.Tensor, vocab: int) -> torch.Tensor:
    """Uniforms in (0, 1), [B, vocab] fp32, a pure function of (seed [B], pos [B], column)."""
    key = (seed.long() * 1_000_003 + pos.long() * 7_919) & _MASK
    x = (key[:, None] + torch.arange(vocab, device=seed.device)[None] * 2_654_435) & _MASK
    for _ in range(3):  # xor-shift-multiply rounds (a 31-bit integer hash)
        x = ((x ^ (x >> 16)) * _MIX) & _MASK
    return unit_interval(x ^ (x >> 16))


def unit_interval(x: torch.Tensor) -> torch.Tensor:
    """31-bit integers -> fp32 uniforms strictly inside (0, 1): the top 23 bits plus a half,
    which fp32 holds exactly (u = 1.0 would make a Gumbel draw infinite)."""
    return ((x >> 8).float() + 0.5) * (1.0 / (1 << 23))


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
    gumbel = -torch.log(-torch.log(counter_uniform(seed, pos, logits.shape[-1])))
    drawn = (scaled + gumbel).argmax(-1)
    return torch.where(temperature > 0, drawn, logits.argmax(-1))
