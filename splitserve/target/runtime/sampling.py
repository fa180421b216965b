"""Sampling on the device with counter-based noise, one seed per row.

Why counter-based: with continuous refill a sequence shares its batch with whichever others are
in flight, so a generator stream shared by the batch would make a sample's tokens depend on its
neighbours (and a resumed run would have to rebuild the same batch to get the same samples). Here
the uniform that draws the token at position p of a row seeded s is a hash of (s, p): a sample's
tokens depend only on its own seed and its own logits, whatever the batch, the slot or the step.
The sampler inverts the CDF of softmax(logits / T) (restricted to the nucleus), in vocabulary
order, at one counter uniform per row: the same law as a Gumbel-max draw, without a hash per
vocabulary entry (on one H200 the per-entry hashes and the scatter back from the sort took about
a sixth of a SmolLM2 regeneration step); temperature 0 is argmax. On CUDA the same rule runs as
one Triton program per row (sampling_kernels; on one H100 at 1,024 rows of SmolLM2 regeneration,
52,730 against 36,021 new tokens/s with this PyTorch path, 2026-12-06).
"""

from __future__ import annotations

import torch

from draft_models.sampling import counter_row_uniform

from . import sampling_kernels

# on CUDA, the same rule as one Triton program per row (sampling_kernels: no sort, no [B, V]
# temporaries); benchmarks' --torch-sampler turns it off
use_kernel = True


def sample_rows(
    logits: torch.Tensor,
    seed: torch.Tensor,
    pos: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    nucleus: bool,
) -> torch.Tensor:
    """Next token per row from logits [B, V]: argmax where temperature <= 0, else a draw from
    softmax(logits / T) over the smallest set of most likely tokens whose probability reaches
    top_p, with every token tied with the least likely of them (a rule that needs no order
    among equals; the `nucleus=False` path skips the sort when no row uses top_p < 1). No host
    reads."""
    if use_kernel and logits.is_cuda and sampling_kernels.available():
        u = counter_row_uniform(seed, pos)
        return sampling_kernels.sample_rows(logits, u, temperature, top_p, nucleus)
    logits = logits.float()
    scaled = logits / temperature.clamp_min(1e-6)[:, None]
    probs = scaled.softmax(-1)
    if nucleus:  # the sort finds the nucleus's smallest probability; the draw stays in
        # vocabulary order: a CDF walked in sorted order moves whenever two near-equal logits
        # trade places (a 1e-6 change in the logits, as from a compiled step, redrew ~1 % of
        # the rows of a near-uniform 49k vocabulary), while this one moves only when a token
        # enters or leaves the nucleus
        ordered = probs.sort(dim=-1, descending=True).values
        mass = ordered.double().cumsum(-1)
        before = torch.cat([mass.new_zeros(mass.shape[0], 1), mass[:, :-1]], -1)
        kept = (before <= top_p[:, None]).sum(-1, keepdim=True).clamp_min(1)  # a prefix
        smallest = ordered.gather(-1, kept - 1).masked_fill(top_p[:, None] >= 1, 0.0)
        probs = probs.masked_fill(probs < smallest, 0.0)
    cdf = probs.double().cumsum(-1)  # fp64: monotone, and exact enough at 150k entries
    u = counter_row_uniform(seed, pos).double()[:, None] * cdf[:, -1:]
    # the first entry whose cumulative mass passes u has probability > 0; rounding aside, the
    # draw is clamped to the last entry of probability > 0 (where the running count of them
    # first peaks: in vocabulary order they need not be a prefix)
    last = (probs > 0).cumsum(-1).argmax(-1, keepdim=True)
    idx = torch.searchsorted(cdf, u, right=True).minimum(last)
    return torch.where(temperature > 0, idx[:, 0], logits.argmax(-1))
