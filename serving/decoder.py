"""Speculative decoder, batch 1: a causal-LM target + a draft of any registered architecture
(DSpark, DFlash, EAGLE-3, ...) or none.

One step: the draft proposes gamma tokens for the block opened by the last emitted token (the
anchor) from the target states of committed positions; the scheduler picks how many of them may
be accepted; the target verifies the anchor and the drafts in one forward; the longest acceptable
prefix plus one bonus token is emitted; the target engine forgets the rejected tokens and the
draft's context grows by the committed positions only.

Lossless: serving.acceptance (the target's greedy decoding at temperature 0, its distribution
exactly with temperature; the draws are counter noise of the request's seed).

The target runs in an engine (splitserve.target.runtime): eager (transformers with a cropped
DynamicCache; linear-attention (KDA) layers stage each verified position's state and commit the
accepted one) or static (a static KV cache with one CUDA graph per verify width and cache-length
bucket on a GPU). A step runs one of two ways:
- fused (serving.fused_step): on the static engine with a proposer with static state (DSpark,
  DFlash, EAGLE-3) or none, when the verify width is known on the host (the fixed schedule, or a
  single verify width): the whole step over device state, one CUDA graph per (width, bucket,
  temperature) on a GPU; one replay and one host read (the emitted tokens) per step.
- split (any engine, any proposer, confidence schedules over several widths): proposal, verify,
  acceptance and commit one after another; beside a graphed target a static-state proposer's
  proposal replays its own graph per temperature and bucket (GraphedProposal), and a confidence
  schedule reads the scheduled length once to pick the verify width (a graph has one shape).
With a graphed target the static-state proposer (and its fused step) is kept across requests.
Step shape: the draft always proposes gamma tokens; the verify input is padded to one of
`verify_widths` (padding = the remaining draft tokens, masked out of acceptance and forgotten).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from draft_models import get_arch
from draft_models.sampling import pick_counted
from splitserve.target.runtime import make_engine
from splitserve.target.runtime.graphs import capture, compiled

from .acceptance import NOISE_PER_BLOCK, accept_block
from .fused_step import FusedStep, StepState
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

    def record(self, packed: list[int], width: int, eos: int | None) -> int:
        """Add one step from its packed row (accepted, scheduled, tokens: FusedStep's layout),
        the emitted tokens cut after an EOS; returns the accepted draft count."""
        n_acc, n_ver, emitted = packed[0], packed[1], packed[2 : 3 + packed[0]]
        if eos is not None and eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        self.token_ids += emitted
        self.accept_lengths.append(len(emitted))
        self.verified.append(n_ver)
        self.accepted.append(n_acc)
        self.widths.append(width)
        return n_acc


def make_proposer(draft, gamma: int, sts: torch.Tensor, capacity: int, rows: int = 1):
    """The decode-time state of `draft`, from its architecture's registry entry (a proposer with
    static state gets buffers for `capacity` positions of each of `rows` requests)."""
    cls = get_arch(draft.cfg.arch).proposer
    if getattr(cls, "static_state", False):
        return cls(draft, gamma, sts, capacity, rows=rows)
    if rows != 1:
        raise ValueError(f"arch={draft.cfg.arch}'s proposer decodes one request at a time")
    return cls(draft, gamma, sts)


class GraphedProposal:
    """A static-state proposer's proposal as one CUDA-graph replay per (temperature, context
    bucket): captured on first use over the proposer's own input, context and counter buffers,
    which later requests reuse. The capture's warm-up runs advance the draw counter; it is put
    back, so the first replay draws what an eager proposal would. `engine`: the static target
    engine whose cache-length bucket holding the anchor the proposal attends over (default:
    the proposer's whole buffer). `compile`: the graphs capture a torch.compile'd proposal (one
    compilation per graph)."""

    def __init__(self, proposer, engine=None, compile: bool = False) -> None:
        self.proposer, self.engine, self.graphs = proposer, engine, {}
        # variants: greedy and sampled, with room, per bucket
        variants = 4 * (len(engine.buckets) if engine is not None else 1)
        self.step = compiled(proposer.step, variants) if compile else proposer.step
        # one memory pool for every graph: they never run at once
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, anchor: torch.Tensor, pos: int, temperature: float, generator=None):
        p = self.proposer
        p.anchor_in.copy_(anchor)
        p.pos_in.fill_(pos)
        extent = None if self.engine is None else self.engine.extent_for(pos + 1)
        key = (temperature, extent)
        if key not in self.graphs:
            draws = p.draws.clone()
            self.graphs[key] = capture(
                lambda: self.step(temperature, extent), p.anchor_in.device, self.pool
            )
            p.draws.copy_(draws)
        graph, outputs = self.graphs[key]
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
        compile: bool = False,
    ) -> None:
        """`runtime`: how the target runs (splitserve.target.runtime.make_engine: eager, static =
        static KV cache with one CUDA graph per verify width on a GPU, auto = static where the
        target allows it on a GPU); `max_len`: the most positions one request may use;
        `compile`: every graph captures torch.compile'd code (the fused step whole, or the
        target's verify and the proposal apart), fewer and fused kernels for a compilation per
        graph on its first use (static runtime on a GPU only)."""
        self.target = target.eval()
        self.device = next(target.parameters()).device
        self.runtime, self.max_len, self.compile = runtime, max_len, compile
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
            self.target,
            self.layer_ids,
            runtime,
            max_len=max_len,
            widths=widths,
            compile_step=compile,
        )
        # with a graphed target the proposer is kept across requests and its proposal graphed
        self.kept_proposer = self.graphed_proposal = None
        self.state = StepState.on(self.device)
        self.fused: FusedStep | None = None  # kept beside a kept proposer (or target-only)

    def _width_for(self, n_verify: torch.Tensor | None, budget: int) -> int:
        """The verify width of a step: the smallest tier holding anchor + scheduled drafts. A
        fixed schedule's length is known on the host; a confidence schedule's is read from the
        device (the one host read a multi-width step makes, before the verify is launched)."""
        if self.draft is None:
            return 1
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
        s, engine = self.state, self.engine
        s.reset(seed)
        prompt = torch.tensor(prompt_ids, device=self.device)
        logits, feats = engine.forward(prompt, 0)
        anchor, _ = pick_counted(logits[-1], temperature, s.seed, s.draws)
        s.draws.add_(1)
        s.anchor.copy_(anchor)
        pos = len(prompt_ids)  # position of the anchor (not yet in the target cache)
        s.pos.fill_(pos)
        s.remaining.fill_(max_new_tokens - 1)
        proposer = propose = None
        if self.draft is not None:
            proposer, propose = self._proposer(pos + max_new_tokens + self.gamma + 1, seed)
            propose = propose or proposer.propose
            proposer.commit(feats, prompt, 0)
        fused = self._fused_step(proposer)
        generator = None
        if fused is None and temperature > 0:  # for a proposer without static state
            generator = torch.Generator(self.device).manual_seed(seed)
        out = DecodeResult(token_ids=[int(anchor)])
        while len(out.token_ids) < max_new_tokens and out.token_ids[-1] != eos_token_id:
            budget = max_new_tokens - len(out.token_ids)
            if fused is not None:
                width = self._width_for(None, budget)
                packed = fused(width, engine.extent_for(pos + width), temperature)[0].tolist()
                confidence = None if fused.confidence is None else fused.confidence[0]
            else:
                packed, width = self._split_step(
                    proposer, propose, pos, budget, temperature, generator
                )
                confidence = getattr(proposer, "confidence_logits", None)
            n_acc = out.record(packed, width, eos_token_id)  # packed: the step's one host read
            if record_confidence and confidence is not None:
                out.confidence_logits.append(confidence.tolist())
            pos += n_acc + 1
        out.token_ids = out.token_ids[:max_new_tokens]
        return out

    def _split_step(self, proposer, propose, pos, budget, temperature, generator):
        """One step piece by piece (any engine, any proposer): (packed as FusedStep's, read to
        the host, width). The target and the proposal may each replay their own graph."""
        s = self.state
        if proposer is not None:
            drafts, dists, survival = propose(s.anchor, pos, temperature, generator)
            n_verify = torch.clamp(
                single_request_length(survival, self.scheduler, self.sps_by_width), max=budget
            )
        else:
            drafts, dists = s.anchor[:0], None
            n_verify = torch.zeros((), dtype=torch.long, device=self.device)
        width = self._width_for(n_verify, budget)
        ids = torch.cat((s.anchor, drafts[: width - 1]))
        logits, feats = self.engine.forward(ids, pos)
        accepted, tokens = accept_block(
            drafts[: width - 1],
            None if dists is None else dists[: width - 1],
            logits,
            n_verify,
            temperature,
            s.seed,
            s.draws,
        )
        packed = torch.cat((accepted.view(1), n_verify.view(1).to(accepted), tokens)).tolist()
        n_acc = packed[0]
        self.engine.accept(width, n_acc)  # forget rejected drafts and padding
        if proposer is not None:
            proposer.commit(feats[: n_acc + 1], ids[: n_acc + 1], pos)
        s.draws.add_(NOISE_PER_BLOCK)
        s.anchor.copy_(tokens[n_acc : n_acc + 1])
        return packed, width

    def _fused_step(self, proposer) -> FusedStep | None:
        """The fused step over `proposer` (None: target-only) where one applies (see
        serving.fused_step): kept, with its graphs, beside a kept proposer on a GPU; built per
        request (eager) otherwise."""
        host_width = len(self.verify_widths) == 1 or self.scheduler.mode == "fixed"
        static = proposer is None or getattr(proposer, "static_state", False)
        if not (hasattr(self.engine, "block_rows") and host_width and static):
            return None
        graphs = self.engine.graphs
        kept = self.fused
        if graphs and kept is not None and kept.proposer is proposer and kept.engine is self.engine:
            return kept
        fused = FusedStep(
            self.engine,
            proposer,
            self.state,
            lambda survival: single_request_length(
                survival[0], self.scheduler, self.sps_by_width
            ).view(1),
            graphs,
            compile=self.compile,
        )
        if graphs:
            self.fused = fused
        return fused

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
            self.graphed_proposal = GraphedProposal(proposer, self.engine, self.compile)
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
