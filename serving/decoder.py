"""Reference speculative decoder, batch 1: an HF causal-LM target + a DSpark, DFlash or EAGLE-3
draft (or none).

One step: the draft proposes gamma tokens for the block opened by the last emitted token (the
anchor) from the target states of committed positions; the scheduler picks how many of them may
be accepted; the target verifies the anchor and the drafts in one forward over its KV cache; the
longest acceptable prefix plus one bonus token is emitted; the target cache is cropped back past
rejected tokens and the draft's context grows by the committed positions only.

Lossless: greedy accepts a draft token only if it equals the target's argmax, and the bonus is
the target's argmax, so the output is the target's greedy decoding; with temperature, draft token
d ~ q is accepted with probability min(1, p(d) / q(d)) and a rejection resamples from
norm(max(0, p - q)), the bonus from p, which leaves the target's distribution exactly.

Step shape (so a CUDA-graph path can follow without a rewrite): the draft always proposes gamma
tokens; the verify input is padded to one of `verify_widths` (padding = the remaining draft
tokens, masked out of acceptance, their cache entries cropped); the schedule, the acceptance
count and the bonus token stay device tensors. With a single verify width the only host read of
a step is the emitted tokens (which also gives the cache crop length). With several widths the
decoder reads the scheduled length once to pick the width, as a graph-bucket choice must.
Targets with linear-attention (KDA) layers: their recurrent state cannot be cropped, so verify
stages each position's state and the accepted one is committed (`linear_state.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from draft_models import get_arch, pick
from splitserve.target.capture import capture_states
from splitserve.target.linear_state import LinearStateStager, crop_cache, has_linear_layers
from splitserve.target.models import cache_kwarg

from .scheduler import SchedulerConfig, single_request_length


@dataclass
class DecodeResult:
    token_ids: list[int]
    accept_lengths: list[int] = field(
        default_factory=list
    )  # tokens emitted per step (bonus included)
    verified: list[int] = field(
        default_factory=list
    )  # draft tokens allowed into acceptance per step
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted per step
    widths: list[int] = field(
        default_factory=list
    )  # tokens the target ran per step (anchor + drafts + padding)
    confidence_logits: list[list[float]] = field(
        default_factory=list
    )  # raw, per step (record_confidence=True)

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


def make_proposer(draft, gamma: int, sts: torch.Tensor):
    """The decode-time state of `draft`, from its architecture's registry entry."""
    return get_arch(draft.cfg.arch).proposer(draft, gamma, sts)


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
    ) -> None:
        self.target = target.eval()
        self.device = next(target.parameters()).device
        self.linear = has_linear_layers(target)
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

    def _target_forward(self, ids: torch.Tensor, start: int, cache: DynamicCache):
        """Logits [n, V] and captured draft features [n, m*H] for token ids [n] at positions
        start.."""
        pos = torch.arange(start, start + ids.shape[0], device=self.device)[None]
        with capture_states(self.target, self.layer_ids) as store:
            out = self.target(
                input_ids=ids[None],
                position_ids=pos,
                use_cache=True,
                **cache_kwarg(self.target, cache),
            )
        feats = (
            torch.cat([store["layers"][i][0] for i in self.layer_ids], -1)
            if self.layer_ids
            else None
        )
        return out.logits[0].float(), feats

    def _width_for(self, n_verify: torch.Tensor) -> int:
        if len(self.verify_widths) == 1:
            return self.verify_widths[0]
        need = int(n_verify) + 1  # the one host read a multi-width (bucketed) step makes
        return next(w for w in self.verify_widths if w >= need)

    def _new_cache(self) -> DynamicCache:
        return DynamicCache(
            config=self.target.config
        )  # the config tells hybrid models which layers are linear

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
        stager = LinearStateStager(self.target) if self.linear else None
        with stager or contextlib.nullcontext():
            return self._generate(
                prompt_ids,
                max_new_tokens,
                temperature,
                eos_token_id,
                seed,
                record_confidence,
                stager,
            )

    def _generate(
        self,
        prompt_ids,
        max_new_tokens,
        temperature,
        eos_token_id,
        seed,
        record_confidence,
        stager: LinearStateStager | None,
    ) -> DecodeResult:
        generator = torch.Generator(self.device).manual_seed(seed) if temperature > 0 else None
        cache = self._new_cache()
        prompt = torch.tensor(prompt_ids, device=self.device)
        logits, feats = self._target_forward(prompt, 0, cache)
        anchor, _ = pick(logits[-1], temperature, generator)
        proposer = None
        if self.draft is not None:
            proposer = make_proposer(self.draft, self.gamma, self.sts)
            proposer.commit(feats, prompt, 0)
        out = DecodeResult(token_ids=[int(anchor)])
        pos = len(prompt_ids)  # position of the anchor (not yet in the target cache)
        while len(out.token_ids) < max_new_tokens and out.token_ids[-1] != eos_token_id:
            budget = max_new_tokens - len(out.token_ids)
            if proposer is not None:
                drafts, dists, survival = proposer.propose(anchor, pos, temperature, generator)
                n_verify = torch.clamp(
                    single_request_length(survival, self.scheduler, self.sps_by_width), max=budget
                )
            else:
                drafts, dists, n_verify = (
                    anchor[:0],
                    None,
                    torch.zeros((), dtype=torch.long, device=self.device),
                )
            width = self._width_for(n_verify) if proposer is not None else 1
            if stager is not None:
                stager.staging = True
            logits, feats = self._target_forward(
                torch.cat((anchor, drafts[: width - 1])), pos, cache
            )
            if stager is not None:
                stager.staging = False
            accepted, tokens = accept_block(
                drafts[: width - 1],
                None if dists is None else dists[: width - 1],
                logits,
                n_verify,
                temperature,
                generator,
            )
            packed = torch.cat(
                (accepted.view(1), n_verify.view(1).to(accepted), tokens)
            ).tolist()  # the host read
            n_acc, n_ver, emitted = packed[0], packed[1], packed[2 : 3 + packed[0]]
            if eos_token_id is not None and eos_token_id in emitted:
                emitted = emitted[: emitted.index(eos_token_id) + 1]
            if (
                stager is not None
            ):  # linear layers: keep the staged state of the last committed position
                stager.commit(cache, n_acc)
            crop_cache(
                cache, width - n_acc - 1
            )  # drop the target states of rejected and padding tokens
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

    @torch.no_grad()
    def draft_step_seconds(self, prompt_ids: list[int], repeats: int = 10) -> float:
        """Median wall time of one draft proposal (gamma tokens) over the prompt's context."""
        import statistics
        import time

        if self.draft is None:
            return 0.0
        logits, feats = self._target_forward(
            torch.tensor(prompt_ids, device=self.device), 0, self._new_cache()
        )
        proposer = make_proposer(self.draft, self.gamma, self.sts)
        proposer.commit(feats, torch.tensor(prompt_ids, device=self.device), 0)
        anchor = logits[-1:].argmax(-1)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            proposer.propose(anchor, len(prompt_ids), 0.0, None)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])
