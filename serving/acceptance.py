"""The lossless acceptance rule of a verify block, on the device, with counter noise.

Greedy accepts a draft token only if it equals the target's argmax, and the bonus is the target's
argmax, so the output is the target's greedy decoding. With temperature, draft token d ~ q is
accepted with probability min(1, p(d) / q(d)) and a rejection resamples from
norm(max(0, p - q)), the bonus from p, which leaves the target's distribution exactly.

The uniforms and the bonus draw are counter noise of (seed, count) (draft_models.sampling), not a
torch.Generator's stream: the rule is then a pure function of device tensors, which a CUDA graph
can replay (the decoder's fused step), and the eager and graphed paths draw the same tokens.
"""

from __future__ import annotations

import torch

from draft_models.sampling import counter_uniform, draw_counted, pick_counted

NOISE_PER_BLOCK = 2  # counts one block uses: the uniforms, then the bonus draw


def accept_block(
    drafts: torch.Tensor,
    dists: torch.Tensor | None,
    logits: torch.Tensor,
    n_verify: torch.Tensor,
    temperature: float,
    seed: torch.Tensor,
    count: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(accepted count, tokens [W]) for drafts [W-1], target logits [W, V], all on one device;
    only drafts[:n_verify] may be accepted. tokens[:accepted] are the accepted drafts and
    tokens[accepted] the bonus (resampled from the residual after a rejection). Noise: counts
    `count` and `count + 1` of `seed` (the caller advances its counter by NOISE_PER_BLOCK)."""
    w = logits.shape[0]
    if w == 1:  # nothing to verify: the bonus alone
        bonus = pick_counted(logits[0], temperature, seed, count + 1)[0]
        return torch.zeros((), dtype=torch.long, device=logits.device), bonus
    allowed = torch.arange(w - 1, device=logits.device) < n_verify
    if temperature == 0:
        target_tokens = logits.argmax(-1)
        ok = (drafts == target_tokens[:-1]) & allowed
        accepted = torch.cumprod(ok.long(), 0).sum()
        bonus = target_tokens.gather(0, accepted.view(1))  # not [accepted]: a host read
    else:
        p = torch.softmax(logits.double() / temperature, -1)
        rows = torch.arange(w - 1, device=logits.device)
        ratio = p[rows, drafts] / dists[rows, drafts]
        u = counter_uniform(seed, count, w - 1)[0].double()
        accepted = torch.cumprod(((u < ratio) & allowed).long(), 0).sum()
        residual = torch.cat((torch.clamp(p[:-1] - dists, min=0), p.new_zeros(1, p.shape[1])))
        rejected = accepted < n_verify
        at = accepted.view(1)
        dist = torch.where(rejected, residual.index_select(0, at)[0], p.index_select(0, at)[0])
        bonus = draw_counted(dist, seed, count + 1)[0]
    slots = torch.arange(w, device=logits.device)
    tokens = torch.where(slots < accepted, torch.cat((drafts, drafts[:1])), bonus)
    return accepted, tokens
