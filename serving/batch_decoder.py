"""Speculative decoding of R requests at once, for evaluation throughput.

Why: at batch 1 a 135M target and its draft leave an H200 mostly idle between tiny kernels;
`serving.evaluate` decoded ~2 answers/s on one H200, so the benchmark sets did
not fit a session. R requests decoded in lockstep share every kernel.

What it runs: the decoder's fused step (serving.fused_step) over R rows of the static engine and
of a static-state proposer (DSpark, DFlash, EAGLE-3) or none, the fixed or threshold schedule per
row, one verify width for every step (the fixed length + 1, or gamma + 1 for the threshold
schedule; batch 1 narrows a step to what it can verify, so `widths` differ from batch 1's, what
is verified and accepted does not). Each row has its own anchor, position, seed and noise
counter, so in exact arithmetic a row emits what the batch-1 decoder emits for that request and
seed, token for token (the tests: fp64 tiny models, on CPU and graphed on a GPU). In bf16 another
batch shape rounds the target's and the draft's arithmetic differently, so a near-tie can go the
other way and an answer diverge from there: tau and acceptance are then batch 1's in
distribution, not token for token. Batching is static: a batch runs until its last row is done,
finished rows stand still. Its tokens/s are a throughput of R requests, not a batch-1 speed.
"""

from __future__ import annotations

import torch

from draft_models.sampling import pick_counted
from splitserve.target.runtime.engines import StaticEngine, static_refusal

from .decoder import DecodeResult, SpeculativeDecoder, make_proposer
from .fused_step import FusedStep, StepState
from .scheduler import fixed_length, row_lengths

MODES = ("fixed", "threshold")


class BatchDecoder:
    """R rows beside `decoder` (a SpeculativeDecoder: its target, draft, block size, STS
    temperatures, schedule and max_len), with an engine and a proposer of their own."""

    def __init__(self, decoder: SpeculativeDecoder, rows: int, graphs: bool | None = None) -> None:
        if rows < 1:
            raise ValueError(f"rows={rows} must be >= 1")
        mode = decoder.scheduler.mode
        if decoder.draft is not None and mode not in MODES:
            raise ValueError(
                f"batch decoding schedules each row by itself: scheduler.mode {', '.join(MODES)}, "
                f"not {mode} (DSpark's prefix schedule is joint over rows; decode at batch 1)"
            )
        why = static_refusal(decoder.target)
        if why is None and decoder.runtime == "eager":
            why = "was switched off (runtime=eager)"
        if why is not None:
            raise ValueError(f"batch decoding needs the static runtime, which {why}")
        self.rows, self.device = rows, decoder.device
        self.gamma, self.max_len = decoder.gamma, decoder.max_len
        self.engine = StaticEngine(
            decoder.target, decoder.layer_ids, max_len=decoder.max_len, graphs=graphs, rows=rows
        )
        self.proposer = None
        if decoder.draft is not None:
            self.proposer = make_proposer(
                decoder.draft, self.gamma, decoder.sts, decoder.max_len, rows=rows
            )
        self.state = StepState.on(self.device, rows)
        cfg = decoder.scheduler
        self.width = 1 if decoder.draft is None else self.gamma + 1
        if decoder.draft is not None and cfg.mode == "fixed":
            self.width = min(fixed_length(cfg, self.gamma), self.gamma) + 1
        self.step = FusedStep(
            self.engine,
            self.proposer,
            self.state,
            lambda survival: row_lengths(survival, cfg),
            self.engine.graphs,
            compile=decoder.compile,  # the decoder's choice, as its schedule and widths
        )

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        eos_token_id: int | None = None,
        seeds: list[int] | None = None,
    ) -> list[DecodeResult]:
        """One DecodeResult per prompt (request i seeded by seeds[i], default 0), decoded R at a
        time."""
        seeds = [0] * len(prompts) if seeds is None else list(seeds)
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"prompt {i} is empty")
            need = len(p) + max_new_tokens + self.gamma + 1
            if need > self.max_len:
                raise ValueError(
                    f"prompt {i} needs {need} positions with {max_new_tokens} new tokens; the "
                    f"static cache holds {self.max_len} (raise max_len)"
                )
        out: list[DecodeResult] = []
        for i in range(0, len(prompts), self.rows):
            chunk = slice(i, i + self.rows)
            out += self._batch(
                prompts[chunk], seeds[chunk], max_new_tokens, temperature, eos_token_id
            )
        return out

    def _batch(self, prompts, seeds, max_new_tokens, temperature, eos) -> list[DecodeResult]:
        n, r, s = len(prompts), self.rows, self.state
        lengths = [len(p) for p in prompts] + [1] * (r - n)  # idle rows: one token, finished
        ids = torch.zeros(r, max(lengths), dtype=torch.long)
        for j, p in enumerate(prompts):
            ids[j, : len(p)] = torch.tensor(p)
        ids, lens = ids.to(self.device), torch.tensor(lengths, device=self.device)
        row_seeds = torch.tensor(seeds + [0] * (r - n), device=self.device)
        s.reset(row_seeds)
        logits, feats = self.engine.prefill_rows(ids, lens)
        first, _ = pick_counted(logits, temperature, s.seed, s.draws)
        s.draws.add_(1)
        s.anchor.copy_(first[:, 0])
        s.pos.copy_(lens)
        results = [DecodeResult(token_ids=[t]) for t in first[:n, 0].tolist()]
        live = [max_new_tokens > 1 and res.token_ids[0] != eos for res in results]
        s.remaining.copy_(
            torch.tensor([max_new_tokens - 1 if a else 0 for a in live] + [0] * (r - n))
        )
        if self.proposer is not None:
            self.proposer.reset(row_seeds)
            self.proposer.commit_rows(feats, ids, 0, last=lens - 1)
        width = self.width
        pos = lengths[:n]
        while any(live):
            top = max(p for p, a in zip(pos, live, strict=True) if a) + width
            packed = self.step(width, self.engine.extent_for(top), temperature).tolist()
            finished = []
            for j, res in enumerate(results):
                if not live[j]:
                    continue
                pos[j] += res.record(packed[j], width, eos) + 1
                if len(res.token_ids) >= max_new_tokens or res.token_ids[-1] == eos:
                    live[j] = False
                    finished.append(j)
            if finished:  # rows that met their EOS stand still from the next step on
                s.remaining[torch.tensor(finished, device=self.device)] = 0
        for res in results:
            res.token_ids = res.token_ids[:max_new_tokens]
        return results
