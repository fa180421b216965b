"""Speculative decoder, batch 1: a causal-LM target + a draft of any registered architecture
(DSpark, DFlash, EAGLE-3, ...) or none.

One step: the draft proposes gamma tokens for the block opened by the last emitted token (the
anchor) from the target states of committed positions; the scheduler picks how many of them may
be accepted; the target verifies the anchor and the drafts in one forward; the longest acceptable
prefix plus one bonus token is emitted; the target engine forgets the rejected tokens and the
draft's context grows by the committed positions only.

Lossless: greedy accepts a draft token only if it equals the target's argmax, and the bonus is
the target's argmax, so the output is the target's greedy decoding; with temperature, draft token
d ~ q is accepted with probability min(1, p(d) / q(d)) and a rejection resamples from
norm(max(0, p - q)), the bonus from p, which leaves the target's distribution exactly.

The target runs in an engine (splitserve.target.runtime): eager (transformers with a cropped
DynamicCache; linear-attention (KDA) layers stage each verified position's state and commit the
accepted one) or static (a static KV cache with one CUDA graph per verify width and cache-length
bucket on a GPU). Beside a graphed target, a proposer with static state (DSpark, DFlash,
EAGLE-3) is kept across requests and its proposal replays one CUDA graph per temperature
(GraphedProposal); its sampling draws counter noise of the request's seed, so a graph replays it
too.
Step shape: the draft always proposes gamma tokens; the verify input is padded to one of
`verify_widths` (padding = the remaining draft tokens, masked out of acceptance and forgotten);
the schedule, the acceptance count and the bonus token stay device tensors. With a single verify
width or the fixed schedule the only host read of a step is the emitted tokens; a confidence
schedule with several widths reads the scheduled length once to pick the width, as a
graph-bucket choice must.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from draft_models import get_arch, pick
from splitserve.target.runtime import make_engine
from splitserve.target.runtime.graphs import capture

from .scheduler import SchedulerConfig, fixed_length, single_request_length

MAX_LEN = 4096  # positions one request may use by default (the static cache's length)


@dataclass
class DecodeResult:
    token_ids: list[int]
    # tokens emitted per step (bonus included)
    accept_lengths: list[int] = field(default_factory=list)
    # draft tokens allowed into acceptance per step
    verified: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted per step
    # tokens the target ran per step (anchor + drafts + padding)
    widths: list[int] = field(default_factory=list)
    # raw, per step (record_confidence=True)
    confidence_logits: list[list[float]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.accept_lengths)


def accept_block(
    drafts: torch.Tensor,
    dists: torch.Tensor | None,
    logits: torch.Tensor,
    n_verify: torch.Tensor,
    temperature: float,
    generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(accepted count, tokens [W]) for drafts [W-1], target logits [W, V], all on one device;
    only drafts[:n_verify] may be accepted. tokens[:accepted] are the accepted drafts and
    tokens[accepted] the bonus (resampled from the residual after a rejection)."""
    w = logits.shape[0]
    if w == 1:  # nothing to verify: the bonus alone
        return torch.zeros((), dtype=torch.long, device=logits.device), pick(
            logits[0], temperature, generator
        )[0]
    allowed = torch.arange(w - 1, device=logits.device) < n_verify
    if temperature == 0:
        target_tokens = logits.argmax(-1)
        ok = (drafts == target_tokens[:-1]) & allowed
        accepted = torch.cumprod(ok.long(), 0).sum()
        bonus = target_tokens[accepted]
    else:
        p = torch.softmax(logits.double() / temperature, -1)
        rows = torch.arange(w - 1, device=logits.device)
        ratio = p[rows, drafts] / dists[rows, drafts]
        u = torch.rand(w - 1, generator=generator, dtype=torch.float64, device=logits.device)
        accepted = torch.cumprod(((u < ratio) & allowed).long(), 0).sum()
        residual = torch.cat((torch.clamp(p[:-1] - dists, min=0), p.new_zeros(1, p.shape[1])))
        rejected = accepted < n_verify
        dist = torch.where(rejected, residual[accepted], p[accepted])
        bonus = torch.multinomial(dist / dist.sum(), 1, generator=generator)[0]
    slots = torch.arange(w, device=logits.device)
    tokens = torch.where(slots < accepted, torch.cat((drafts, drafts[:1])), bonus)
    return accepted, tokens


def make_proposer(draft, gamma: int, sts: torch.Tensor, capacity: int):
    """The decode-time state of `draft`, from its architecture's registry entry (a proposer with
    static state gets buffers for `capacity` positions)."""
    cls = get_arch(draft.cfg.arch).proposer
    if getattr(cls, "static_state", False):
        return cls(draft, gamma, sts, capacity)
    return cls(draft, gamma, sts)


class GraphedProposal:
    """A static-state proposer's proposal as one CUDA-graph replay per temperature: captured on
    first use over the proposer's own input, context and counter buffers, which later requests
    reuse. The capture's warm-up runs advance the draw counter; it is put back, so the first
    replay draws what an eager proposal would."""

    def __init__(self, proposer) -> None:
        self.proposer, self.graphs = proposer, {}
        # one memory pool for every temperature's graph: they never run at once
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, anchor: torch.Tensor, pos: int, temperature: float, generator=None):
        p = self.proposer
        p.anchor_in.copy_(anchor)
        p.pos_in.fill_(pos)
        if temperature not in self.graphs:
            draws = p.draws.clone()
            self.graphs[temperature] = capture(
                lambda: p.step(temperature), p.anchor_in.device, self.pool
            )
            p.draws.copy_(draws)
        graph, outputs = self.graphs[temperature]
        graph.replay()
        tokens, dists, survival, p.confidence_logits = outputs
        return tokens, dists, survival


class SpeculativeDecoder:
    def __init__(
        self,
        target,
        draft=None,
        *,
        scheduler: SchedulerConfig | None = None,
        sps: Callable[[int], float] | None = None,
        sts_temperatures: list[float] | None = None,
        block_size: int | None = None,
        verify_widths: Sequence[int] | None = None,
        runtime: str = "auto",
        max_len: int = MAX_LEN,
    ) -> None:
        """`runtime`: how the target runs (splitserve.target.runtime.make_engine: eager, static =
        static KV cache with one CUDA graph per verify width on a GPU, auto = static where the
        target allows it on a GPU); `max_len`: the most positions one request may use."""
        self.target = target.eval()
        self.device = next(target.parameters()).device
        self.runtime, self.max_len = runtime, max_len
        self.draft = draft.eval() if draft is not None else None
        self.scheduler = scheduler = scheduler or SchedulerConfig("fixed")
        self.gamma, self.layer_ids, self.sps_by_width = 0, [], None
        if draft is not None:
            cfg = draft.cfg
            self.gamma = cfg.block_size if block_size is None else block_size
            if not 1 <= self.gamma <= cfg.block_size:
                why = "is larger than the draft was trained for" if self.gamma > 1 else "is below 1"
                raise ValueError(
                    f"block_size={self.gamma} {why}; allowed 1..{cfg.block_size} "
                    "(the trained block size)"
                )
            if scheduler.mode != "fixed" and not cfg.confidence_head:
                raise ValueError(
                    f"scheduler.mode={scheduler.mode} needs a confidence head; this draft has none"
                )
            self.sts = torch.tensor(
                sts_temperatures or [1.0] * cfg.block_size, dtype=torch.float64, device=self.device
            )
            if self.sts.numel() != cfg.block_size:
                raise ValueError(
                    f"STS file has {self.sts.numel()} temperatures, the draft has block size "
                    f"{cfg.block_size}"
                )
            if scheduler.mode == "prefix":
                if sps is None:
                    raise ValueError(
                        "scheduler.mode=prefix needs an SPS table (steps per second by verify "
                        "width)"
                    )
                self.sps_by_width = torch.tensor(
                    [0.0] + [sps(w) for w in range(1, self.gamma + 2)],
                    dtype=torch.float64,
                    device=self.device,
                )
            self.layer_ids = cfg.target_layer_ids
        widths = sorted(set(verify_widths)) if verify_widths else list(range(1, self.gamma + 2))
        if widths[-1] != self.gamma + 1 or widths[0] < 1:
            raise ValueError(
                f"verify_widths {widths} must be >= 1 and end at gamma + 1 = {self.gamma + 1}"
            )
        self.verify_widths = widths
        self.engine = make_engine(
            self.target, self.layer_ids, runtime, max_len=max_len, widths=widths
        )
        # with a graphed target the proposer is kept across requests and its proposal graphed
        self.kept_proposer = self.graphed_proposal = None

    def _width_for(self, n_verify: torch.Tensor, budget: int) -> int:
        """The verify width of a step: the smallest tier holding anchor + scheduled drafts. A
        fixed schedule's length is known on the host; a confidence schedule's is read from the
        device (the one host read a multi-width step makes, before the verify is launched)."""
        if len(self.verify_widths) == 1:
            return self.verify_widths[0]
        if self.scheduler.mode == "fixed":
            need = min(fixed_length(self.scheduler, self.gamma), budget) + 1
        else:
            need = int(n_verify) + 1
        return next(w for w in self.verify_widths if w >= need)

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        eos_token_id: int | None = None,
        seed: int = 0,
        record_confidence: bool = False,
    ) -> DecodeResult:
        """`record_confidence` keeps each step's raw confidence logits (an extra host read per
        step; for calibration only)."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        self.engine.begin(len(prompt_ids) + max_new_tokens + self.gamma + 1)
        try:
            return self._generate(
                prompt_ids, max_new_tokens, temperature, eos_token_id, seed, record_confidence
            )
        finally:
            self.engine.close()

    def _generate(
        self, prompt_ids, max_new_tokens, temperature, eos_token_id, seed, record_confidence
    ) -> DecodeResult:
        generator = torch.Generator(self.device).manual_seed(seed) if temperature > 0 else None
        engine = self.engine
        prompt = torch.tensor(prompt_ids, device=self.device)
        logits, feats = engine.forward(prompt, 0)
        anchor, _ = pick(logits[-1], temperature, generator)
        proposer = propose = None
        if self.draft is not None:
            proposer, propose = self._proposer(
                len(prompt_ids) + max_new_tokens + self.gamma + 1, seed
            )
            propose = propose or proposer.propose
            proposer.commit(feats, prompt, 0)
        out = DecodeResult(token_ids=[int(anchor)])
        pos = len(prompt_ids)  # position of the anchor (not yet in the target cache)
        while len(out.token_ids) < max_new_tokens and out.token_ids[-1] != eos_token_id:
            budget = max_new_tokens - len(out.token_ids)
            if proposer is not None:
                drafts, dists, survival = propose(anchor, pos, temperature, generator)
                n_verify = torch.clamp(
                    single_request_length(survival, self.scheduler, self.sps_by_width), max=budget
                )
            else:
                drafts, dists, n_verify = (
                    anchor[:0],
                    None,
                    torch.zeros((), dtype=torch.long, device=self.device),
                )
            width = self._width_for(n_verify, budget) if proposer is not None else 1
            logits, feats = engine.forward(torch.cat((anchor, drafts[: width - 1])), pos)
            accepted, tokens = accept_block(
                drafts[: width - 1],
                None if dists is None else dists[: width - 1],
                logits,
                n_verify,
                temperature,
                generator,
            )
            # the host read
            packed = torch.cat((accepted.view(1), n_verify.view(1).to(accepted), tokens)).tolist()
            n_acc, n_ver, emitted = packed[0], packed[1], packed[2 : 3 + packed[0]]
            if eos_token_id is not None and eos_token_id in emitted:
                emitted = emitted[: emitted.index(eos_token_id) + 1]
            engine.accept(width, n_acc)  # forget rejected drafts and padding
            if proposer is not None:
                proposer.commit(feats[: n_acc + 1], torch.cat((anchor, drafts[:n_acc])), pos)
            out.token_ids += emitted
            out.accept_lengths.append(len(emitted))
            out.verified.append(n_ver)
            out.accepted.append(n_acc)
            out.widths.append(width)
            if (
                record_confidence
                and proposer is not None
                and proposer.confidence_logits is not None
            ):
                out.confidence_logits.append(proposer.confidence_logits.tolist())
            pos += n_acc + 1
            anchor = tokens[n_acc : n_acc + 1]
        out.token_ids = out.token_ids[:max_new_tokens]
        return out

    def _proposer(self, need: int, seed: int = 0):
        """(proposer, graphed proposal or None) for a request of `need` positions, its draws
        seeded by `seed`. With CUDA graphs (the static engine on a GPU) a static-state proposer
        is kept, reset per request, and its proposal graphed; else a fresh one per request,
        sized to it."""
        graphs = getattr(self.engine, "graphs", False)
        kept = self.kept_proposer
        if graphs and kept is not None and kept.capacity >= need:
            kept.reset(seed)
            return kept, self.graphed_proposal
        capacity = max(need, self.max_len) if graphs else need
        proposer = make_proposer(self.draft, self.gamma, self.sts, capacity)
        if not getattr(proposer, "static_state", False):
            return proposer, None
        proposer.reset(seed)
        if graphs:
            self.kept_proposer = proposer
            self.graphed_proposal = GraphedProposal(proposer)
            return proposer, self.graphed_proposal
        return proposer, None

    @torch.no_grad()
    def draft_step_seconds(self, prompt_ids: list[int], repeats: int = 10) -> float:
        """Median wall time of one draft proposal (gamma tokens) over the prompt's context."""
        import statistics
        import time

        if self.draft is None:
            return 0.0
        prompt = torch.tensor(prompt_ids, device=self.device)
        self.engine.begin(len(prompt_ids) + 1)
        try:
            logits, feats = self.engine.forward(prompt, 0)
        finally:
            self.engine.close()
        proposer, graphed = self._proposer(len(prompt_ids) + 1)
        proposer.commit(feats, torch.tensor(prompt_ids, device=self.device), 0)
        anchor = logits[-1:].argmax(-1)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            (graphed or proposer.propose)(anchor, len(prompt_ids), 0.0, None)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])
