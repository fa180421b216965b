"""Choosing a token from logits, shared by every proposer and by the decoder's verify step, and
the counter-based noise that makes a draw a pure function of (seed, counter): what a CUDA graph
can replay (a torch.Generator's stream advances on the host) and what the target runtime's
batched sampler uses so that a row's tokens never depend on its neighbours."""

from __future__ import annotations

import torch

_MASK = (1 << 31) - 1
_MIX = 0x45D9F3B  # odd multiplier < 2**27: a 31-bit value times it stays inside int64
_OFFSET = 0x2545F49


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """(token [1] on logits' device, probabilities [V] used or None) from logits [V]; greedy at
    0."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True), None
    probs = torch.softmax(logits.double() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator), probs


def pick_counted(logits: torch.Tensor, temperature: float, seed: torch.Tensor, count: torch.Tensor):
    """As `pick`, with the draw a Gumbel-max over counter noise of (seed [B], count [B]) instead
    of a generator: the same draw for the same (seed, count), no host state (the caller advances
    `count`). argmax(logits / T + Gumbel) is distributed as softmax(logits / T). Logits [V]
    (B = 1: token [1]) or one row per request, [B, V] (tokens [B, 1])."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True), None
    scaled = logits.double() / temperature
    gumbel = counter_gumbel(seed, count, logits.shape[-1]).view(scaled.shape)
    return (scaled + gumbel).argmax(-1, keepdim=True), torch.softmax(scaled, -1)


def draw_counted(weights: torch.Tensor, seed: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A token drawn from weights [V] ([1]) or [B, V] ([B, 1]; non-negative, any positive sum: no
    normalizing) by a Gumbel-max over counter noise of (seed [B], count [B]):
    argmax(log w + Gumbel) ~ w / sum(w)."""
    noise = counter_gumbel(seed, count, weights.shape[-1]).view(weights.shape)
    return (torch.log(weights.double()) + noise).argmax(-1, keepdim=True)


def counter_gumbel(
    seed: torch.Tensor, count: torch.Tensor, vocab: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Standard Gumbel noise [B, vocab] in `dtype`, a pure function of (seed [B], count [B],
    column)."""
    return -torch.log(-torch.log(counter_uniform(seed, count, vocab).to(dtype)))


def counter_uniform(seed: torch.Tensor, pos: torch.Tensor, vocab: int) -> torch.Tensor:
    """Uniforms in (0, 1), [B, vocab] fp32, a pure function of (seed [B], pos [B], column). The
    key (seed, pos) and the column are each hashed before they are combined (xor) and hashed
    again: two draws then share no run of columns, only isolated coincidences of a 31-bit hash
    (a key plus column x K under one hash, as before, made draw (s, c) a column shift of draw
    (s, c + d) for some d: 11,862 between the decoder's and a proposer's stream)."""
    key = _mix((seed.long() * 1_000_003 + pos.long() * 7_919) & _MASK)
    cols = _mix(torch.arange(vocab, device=seed.device))
    return unit_interval(_mix(key[:, None] ^ cols[None]))


def counter_row_uniform(seed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One uniform in (0, 1) per row, [B] fp32, a pure function of (seed [B], pos [B]): what
    an inverse-CDF draw needs (counter_uniform gives one per vocabulary entry)."""
    return unit_interval(_mix(_mix((seed.long() * 1_000_003 + pos.long() * 7_919) & _MASK)))


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 31-bit integer hash: an odd offset (so 0 does not map to 0), then
    xor-shift-multiply rounds."""
    x = (x + _OFFSET) & _MASK
    for _ in range(3):
        x = ((x ^ (x >> 16)) * _MIX) & _MASK
    return x ^ (x >> 16)


def unit_interval(x: torch.Tensor) -> torch.Tensor:
    """31-bit integers -> fp32 uniforms strictly inside (0, 1): the top 23 bits plus a half,
    which fp32 holds exactly (u = 1.0 would make a Gumbel draw infinite)."""
    return ((x >> 8).float() + 0.5) * (1.0 / (1 << 23))
