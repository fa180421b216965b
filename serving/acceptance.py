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
    `count` and `count + 1` of `seed` [1] (the caller advances its counter by NOISE_PER_BLOCK).
    One request of `accept_rows`."""
    accepted, tokens = accept_rows(
        drafts[None],
        None if dists is None else dists[None],
        logits[None],
        n_verify.reshape(1),
        temperature,
        seed,
        count,
    )
    return accepted[0], tokens[0]


def accept_rows(
    drafts: torch.Tensor,
    dists: torch.Tensor | None,
    logits: torch.Tensor,
    n_verify: torch.Tensor,
    temperature: float,
    seed: torch.Tensor,
    count: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`accept_block` for R requests at once: drafts [R, W-1], proposal distributions
    [R, W-1, V] (sampling), logits [R, W, V], n_verify / seed / count [R] -> (accepted [R],
    tokens [R, W]). Each row draws the noise of its own (seed, count), so a row's outcome never
    depends on the other rows."""
    r, w = logits.shape[:2]
    if w == 1:  # nothing to verify: the bonus alone
        bonus = pick_counted(logits[:, 0], temperature, seed, count + 1)[0]
        return torch.zeros(r, dtype=torch.long, device=logits.device), bonus
    allowed = torch.arange(w - 1, device=logits.device)[None] < n_verify[:, None]
    if temperature == 0:
        target_tokens = logits.argmax(-1)
        ok = (drafts == target_tokens[:, :-1]) & allowed
        accepted = torch.cumprod(ok.long(), 1).sum(1)
        bonus = target_tokens.gather(1, accepted[:, None])  # not [accepted]: a host read
    else:
        p = torch.softmax(logits.double() / temperature, -1)
        picked = drafts[..., None]
        ratio = (p[:, :-1].gather(2, picked) / dists.gather(2, picked))[..., 0]
        u = counter_uniform(seed, count, w - 1).double()
        accepted = torch.cumprod(((u < ratio) & allowed).long(), 1).sum(1)
        residual = torch.cat((torch.clamp(p[:, :-1] - dists, min=0), torch.zeros_like(p[:, :1])), 1)
        rejected = accepted < n_verify
        at = accepted[:, None, None].expand(r, 1, p.shape[2])
        dist = torch.where(rejected[:, None], residual.gather(1, at)[:, 0], p.gather(1, at)[:, 0])
        bonus = draw_counted(dist, seed, count + 1)
    slots = torch.arange(w, device=logits.device)[None]
    tokens = torch.where(slots < accepted[:, None], torch.cat((drafts, drafts[:, :1]), 1), bonus)
    return accepted, tokens
