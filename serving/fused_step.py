"""The decoder's fused step: one whole speculative decode step (proposal, schedule, verify,
acceptance, commit of the verified block, next anchor and position) over device state, replayed
as one CUDA graph per (verify width, cache-length bucket, temperature) on a GPU.

Why: run piece by piece, a step costs its two graph replays (proposal, verify) plus the host work
between them: the acceptance kernels, the draft's commit (~30 small kernels) and the loop's
Python, with a read of the device in the middle (docs/results/runtime_h200: 6.48 ms a step where the
two replays take 3.85 ms). Fused, a step is one replay and one read of the emitted tokens.

What fusing needs, and where the decoder falls back to the split step (`SpeculativeDecoder`):
every input of a step on the device (`StepState`: anchor, position, tokens left, noise counter,
one row per request); a target engine with `block_rows` (the static engine: positions from a
device tensor); a proposer with static state (or none), whose `commit_rows` takes the whole
verify block and a device count of what is kept, since nothing on the host knows the acceptance
count inside the step; and a verify width known on the host before the step (the fixed
schedule, or a single width), since a graph has one shape. Without graphs (CPU, CI) the same
step runs eagerly. The batch-1 decoder runs it over one row, serving.batch_decoder over R.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from splitserve.target.runtime.graphs import capture, compiled

from .acceptance import NOISE_PER_BLOCK, accept_rows

STREAM = 1 << 30  # the decoder's noise seed is the request's + STREAM: its keys are disjoint from
# the proposer's (same seed, counts from 0) for counts below 2**30, and keys are hashed before
# the column is mixed in (draft_models.sampling.counter_uniform), so no two draws share a run of
# columns


@dataclass
class StepState:
    """The decode state of R requests (R = 1: the batch-1 decoder) on the device, at fixed
    addresses (graphs read and write it), each [R]: the anchor and its position, the tokens still
    to emit after it (a row at 0 or below is finished: it still runs, fixed shapes, but stands
    still), and the decoder's noise seed and counter."""

    anchor: torch.Tensor
    pos: torch.Tensor
    remaining: torch.Tensor
    seed: torch.Tensor
    draws: torch.Tensor

    @classmethod
    def on(cls, device: torch.device, rows: int = 1) -> StepState:
        def z():
            return torch.zeros(rows, dtype=torch.long, device=device)

        return cls(anchor=z(), pos=z(), remaining=z(), seed=z(), draws=z())

    def reset(self, seed: int | torch.Tensor) -> None:
        """Seeds of a new request (an int) or of one per row."""
        self.seed.copy_(torch.as_tensor(seed).expand(self.seed.shape) + STREAM)
        self.draws.zero_()

    def tensors(self) -> list[torch.Tensor]:
        return [self.anchor, self.pos, self.remaining, self.seed, self.draws]


class FusedStep:
    """`step(width, extent, temperature)` -> packed [R, 2 + width] long on the device, per row:
    (accepted drafts, scheduled drafts, tokens: the accepted drafts then the bonus, then
    padding), with `state` advanced to the next anchors; `confidence` then holds the proposal's
    raw confidence logits [R, gamma] (or None). Graphed per (width, extent, temperature) when
    `graphs`, else eager; `compile`: the step is torch.compile'd whole (proposal, verify,
    acceptance and commit fused across their boundaries), one compilation per graph. The
    returned tensors are overwritten by the next step: read them before."""

    def __init__(
        self,
        engine,
        proposer,
        state: StepState,
        schedule: Callable[[torch.Tensor], torch.Tensor],
        graphs: bool,
        compile: bool = False,
    ) -> None:
        """`schedule(survival [R, gamma])`: the drafts each row may verify ([R], no host read).
        `engine`: one with `block_rows` (the static engine with R rows); `proposer`: one with
        static state and R rows, or None (target-only)."""
        self.engine, self.proposer, self.state, self.schedule = engine, proposer, state, schedule
        self.graphs: dict | None = {} if graphs else None
        self.pool = torch.cuda.graph_pool_handle() if graphs else None
        self.confidence: torch.Tensor | None = None
        # variants: up to 16 widths at two temperatures per cache-length bucket
        self.run = compiled(self._step, 32 * len(engine.buckets)) if compile else self._step

    def __call__(self, width: int, extent: int, temperature: float) -> torch.Tensor:
        if self.graphs is None:
            packed, self.confidence = self.run(width, extent, temperature)
            return packed
        key = (width, extent, temperature)
        if key not in self.graphs:
            self.graphs[key] = self._capture(width, extent, temperature)
        graph, (packed, self.confidence) = self.graphs[key]
        graph.replay()
        return packed

    def _capture(self, width: int, extent: int, temperature: float):
        """The capture's warm-up runs are real steps: the state they advance is put back before
        each (position-indexed buffers are rewritten with the same values by the replay)."""
        changed = self.state.tensors() + (
            self.proposer.step_state() if self.proposer is not None else []
        )
        saved = [t.clone() for t in changed]

        def restore() -> None:
            for t, v in zip(changed, saved, strict=True):
                t.copy_(v)

        return capture(
            lambda: self.run(width, extent, temperature),
            self.state.anchor.device,
            self.pool,
            before=restore,
        )

    def _step(self, width: int, extent: int, temperature: float):
        s, p = self.state, self.proposer
        confidence = dists = None
        if p is not None:
            p.anchor_in.copy_(s.anchor)
            p.pos_in.copy_(s.pos)
            drafts, dists, survival, confidence = p.step_rows(temperature, extent)
            n_verify = torch.minimum(self.schedule(survival), s.remaining)
            drafts = drafts[:, : width - 1]
            dists = None if dists is None else dists[:, : width - 1]
        else:
            drafts, n_verify = s.anchor[:, None][:, :0], torch.zeros_like(s.remaining)
        ids = torch.cat((s.anchor[:, None], drafts), 1)
        logits, feats = self.engine.block_rows(ids, s.pos, extent)
        accepted, tokens = accept_rows(
            drafts, dists, logits, n_verify, temperature, s.seed, s.draws
        )
        if p is not None:  # the whole block: positions past the kept ones stay invisible
            p.commit_rows(feats, ids, s.pos, last=accepted)
        advance = (accepted + 1) * (s.remaining > 0)  # finished rows stand still
        s.draws.add_(NOISE_PER_BLOCK)
        s.anchor.copy_(tokens.gather(1, accepted[:, None])[:, 0])
        s.pos.add_(advance)
        s.remaining.sub_(advance)
        packed = torch.cat((accepted[:, None], n_verify[:, None], tokens), 1)
        return packed, confidence
