"""How many draft tokens each request sends to verification.

Inputs: prefix survival a[r, j] = prod_{i<=j} c[r, i] (non-increasing in j) for R requests and
gamma draft slots. Output: lengths l[r] in 0..gamma (tokens verified besides the bonus token).

- `prefix` (DSpark Algorithm 1, hardware aware): start from B = R verified tokens and expected
  accepted tau = R (one bonus token each); visit candidates (r, j) by a[r, j] descending (ties:
  lower j first, so a slot is never visited before the slot before it); admit each while
  tau * SPS(B) improves, and stop at the first candidate that does not improve it. The decision
  about the k-th candidate reads only candidates 1..k, so it is causal, and the schedule never
  depends on what the verification later finds (which keeps decoding lossless).
- `threshold`: admit (r, j) while a[r, j] >= threshold.
- `fixed`: every request verifies `length` draft tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

MODES = ("prefix", "threshold", "fixed")


@dataclass
class SchedulerConfig:
    mode: str = "prefix"
    threshold: float = 0.5  # threshold mode
    length: int | None = None  # fixed mode; None = gamma

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(
                f"scheduler.mode={self.mode!r} is invalid; allowed: {', '.join(MODES)}"
            )
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"scheduler.threshold={self.threshold} must lie in [0, 1]")


def prefix_schedule(survival: torch.Tensor, sps: Callable[[int], float]) -> list[int]:
    """Algorithm 1 for R requests; survival [R, gamma]."""
    r, gamma = survival.shape
    a = survival.double().cpu()
    order = sorted((-float(a[i, j]), j, i) for i in range(r) for j in range(gamma))
    lengths = [0] * r
    b, tau = r, float(r)
    best = tau * sps(b)
    for neg_a, j, i in order:
        if j != lengths[i]:  # only reachable with a non-monotone survival row
            raise ValueError(
                f"survival of request {i} increases at slot {j}: expected a cumulative product"
            )
        value = (tau - neg_a) * sps(b + 1)
        if value <= best:
            break
        lengths[i], b, tau, best = j + 1, b + 1, tau - neg_a, value
    return lengths


def threshold_schedule(survival: torch.Tensor, threshold: float) -> list[int]:
    keep = survival >= threshold
    return torch.cumprod(keep.long(), dim=1).sum(1).tolist()


def schedule(
    survival: torch.Tensor, cfg: SchedulerConfig, sps: Callable[[int], float] | None = None
) -> list[int]:
    """Draft tokens to verify per request, for survival [R, gamma]."""
    if survival.dim() != 2:
        raise ValueError(f"survival must be [requests, gamma], got shape {tuple(survival.shape)}")
    gamma = survival.shape[1]
    if cfg.mode == "fixed":
        length = gamma if cfg.length is None else cfg.length
        if not 0 <= length <= gamma:
            raise ValueError(f"scheduler.length={length} must lie in [0, gamma={gamma}]")
        return [length] * survival.shape[0]
    if cfg.mode == "threshold":
        return threshold_schedule(survival, cfg.threshold)
    if sps is None:
        raise ValueError(
            "scheduler.mode=prefix needs an SPS table (steps per second by verify width)"
        )
    return prefix_schedule(survival, sps)


def fixed_length(cfg: SchedulerConfig, gamma: int) -> int:
    """Drafts a fixed schedule verifies per step (known on the host: no device read)."""
    return gamma if cfg.length is None else cfg.length


def row_lengths(survival: torch.Tensor, cfg: SchedulerConfig) -> torch.Tensor:
    """The fixed or threshold decision of each of R requests by itself ([R] long, from survival
    [R, gamma] on its device, no host read): what batch decoding runs, and a single request's
    decision in those modes. The prefix schedule is joint over requests (`schedule`)."""
    if cfg.mode == "fixed":
        # a fill on the device, not a host-to-device copy (which would wait for the device)
        n = fixed_length(cfg, survival.shape[-1])
        return survival.new_full(survival.shape[:1], n, dtype=torch.long)
    if cfg.mode == "threshold":
        return torch.cumprod((survival >= cfg.threshold).long(), 1).sum(1)
    raise ValueError(f"scheduler.mode={cfg.mode} decides jointly over requests, not row by row")


def single_request_length(
    survival: torch.Tensor, cfg: SchedulerConfig, sps_by_width: torch.Tensor | None
) -> torch.Tensor:
    """The same decision for one request, computed on survival's device as a 0-d tensor (no host
    read, so a decode step can run ahead of the host). `sps_by_width[w]` = SPS(w) for w in
    0..gamma+1 (index 0 unused). For R = 1, Algorithm 1 visits slots in order and admits slot l
    while (1 + a_0 + ... + a_l) * SPS(l + 2) beats the value without it."""
    gamma = survival.shape[0]
    if cfg.mode != "prefix":
        return row_lengths(survival[None], cfg)[0]
    if sps_by_width is None:
        raise ValueError(
            "scheduler.mode=prefix needs an SPS table (steps per second by verify width)"
        )
    tau = torch.cat((survival.new_ones(1), 1 + torch.cumsum(survival.double(), 0)))  # l = 0..gamma
    value = tau * sps_by_width[1 : gamma + 2].to(tau)
    return torch.cumprod((value[1:] > value[:-1]).long(), 0).sum()
