"""Regeneration with continuous refill on the static runtime, capturing as it generates.

`Regenerator.stream(requests)` keeps up to `slots` sequences in flight, one static-cache row each,
and yields each result as it finishes (`run` collects them in request order).
Every step is one forward of the whole batch at width 1 (one CUDA-graph replay on a GPU) that
feeds each row its newest token at that row's own position, writes the draft's target layers and
the final normed state of that position into per-row buffers, and samples each row's next token
on the device (sampling.sample_rows: per-row seed, temperature and top_p). A row whose sequence
ended (EOS or its budget) is fed its last token once more (so that position's states are
captured too), handed back once that step is launched, and its slot refilled from the queue:
free slots are refilled together, once 1/16 of them are free, by one eager prefill forward of
their prompts (one forward per prompt would cost more than the steps). With `prefill_tokens` set,
a refill is chunked: forwards of at most that many padded tokens (whole prompts; a longer prompt
alone) over the slots free when it began, a decode step of the live rows between two of them,
so that long prompts delay decoding one chunk at a time (the aim; that delay is not timed). It
adds forwards and host reads: on one H100 (SmolLM2, 8,192 samples in 1,024 rows) chunks of
16,384 tokens, in a version that also refilled slots freed while chunking (f284ab5), ran 300
prefill forwards (94 unchunked) at 66,573 new tokens/s against 79,879 and 83,480 unchunked in
the same lease (docs/results/throughput_h200), so it is off by default.

The host reads each step's tokens once, one step late (`one_ahead`): step j+1 (whose input, step
j's tokens, is already on the device) is launched before the host waits for step j's, so the
host's bookkeeping and the consumer's work overlap a running step rather than leave the GPU idle
between steps (a refill still waits: it reads its rows' first tokens at once). The schedule
(which row takes which request, before which step) is the same either way.

So the hidden states come from the generating forwards themselves: no padding (rows never share
positions), no second capture forward, and a sample's tokens depend only on its own seed and
logits (counter-based noise), not on which samples share its batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from .graphs import capture, compiled
from .sampling import sample_rows
from .static_model import StaticDecoder

PREFILL_TOKENS = 0  # the default chunk of a refill's prefill (Regenerator.prefill_tokens): none


@dataclass
class Request:
    prompt: torch.Tensor  # [P] token ids
    budget: int  # new tokens at most
    seed: int
    temperature: float = 0.0
    top_p: float = 1.0


@dataclass
class Generated:
    ids: torch.Tensor  # [L] prompt + response, on the host
    prompt_len: int
    aux: torch.Tensor | None  # [L, m*H] the capture layers' outputs, on the device
    final: torch.Tensor  # [L, H] the final normed state


@dataclass
class _Row:
    index: int
    request: Request
    first_step: int  # the first step that feeds it: earlier steps' tokens are not its
    response: list[int] = field(default_factory=list)
    finishing: bool = False  # its last token is fed by step `last_step`, then it is handed back
    last_step: int = -1


class Regenerator:
    # read each step's tokens after launching the next (benchmarks: --sync-regen turns it off)
    one_ahead = True
    # capture the step with its network torch.compile'd (fused elementwise kernels; one
    # compilation on the first capture); the sampler stays eager (its PyTorch path's cumsum over
    # a 49k vocabulary failed in Inductor, torch 2.11, on an H100). Off: no faster on one H100
    # (31,288 against 33,895 new tokens/s at 256 rows, 2026-12-06; --compile-regen)
    compile_step = False
    # padded tokens (prompts x the longest) per refill prefill forward; 0: a refill group's
    # prompts in one forward (benchmarks: --prefill-tokens; see the module's docstring)
    prefill_tokens = PREFILL_TOKENS

    def __init__(
        self,
        model,
        capture_ids: list[int],
        *,
        slots: int,
        max_len: int,
        eos: Collection[int],
        nucleus: bool,
        graphs: bool | None = None,
    ) -> None:
        """`eos`: the token ids that end an answer (kept in it). `nucleus`: some request may use
        top_p < 1 at temperature > 0 (adds the nucleus search, or a sort off CUDA, per step).
        `graphs`: replay the step as a CUDA graph (default: on a GPU)."""
        self.net = StaticDecoder(model, max_rows=slots, max_len=max_len, capture_ids=capture_ids)
        self.slots, self.max_len, self.eos, self.nucleus = slots, max_len, set(eos), nucleus
        dev = self.device = self.net.embed.device
        hidden, dtype = self.net.embed.shape[1], self.net.embed.dtype
        self.ids = torch.zeros((slots, 1), dtype=torch.long, device=dev)
        self.pos = torch.zeros((slots, 1), dtype=torch.long, device=dev)
        self.seed = torch.zeros(slots, dtype=torch.long, device=dev)
        self.temperature = torch.zeros(slots, dtype=torch.float32, device=dev)
        self.top_p = torch.ones(slots, dtype=torch.float32, device=dev)
        self.rows = torch.arange(slots, device=dev)
        # rows holding a sequence; an idle row (handed back, not yet refilled) is fed position 0,
        # so it attends over one key rather than marching on through its old context (at 1,024
        # rows in one wave, the rows that end early would otherwise read up to the whole cache
        # every step until the last row ends)
        self.live = torch.zeros((slots, 1), dtype=torch.bool, device=dev)
        self._live = [False] * slots  # the host's copy, pushed when it changes
        width = self.net.feature_width
        self.aux = torch.zeros((slots, max_len, width), dtype=dtype, device=dev) if width else None
        self.final = torch.zeros((slots, max_len, hidden), dtype=dtype, device=dev)
        # refill when this many slots are free: one prefill forward per group, not per prompt
        self.refill_group = max(1, slots // 16)
        self.steps = self.prefills = 0  # counters, for benchmarks
        self.graph = None
        self._forward = compiled(self.net.forward, 1) if self.compile_step else self.net
        if graphs if graphs is not None else dev.type == "cuda":
            # every row idle at position 0: the warm-up steps write only what a prefill overwrites
            self.graph, self.emitted = capture(self._step, dev)
            self.ids.zero_()
            self.pos.zero_()

    def _step(self) -> torch.Tensor:
        """Feed every row its newest token; store that position's states; sample the next."""
        self.pos.mul_(self.live)  # idle rows at position 0
        logits, feats, final = self._forward(self.ids, self.pos)
        p = self.pos[:, 0]
        if self.aux is not None:
            self.aux[self.rows, p] = feats[:, 0]
        self.final[self.rows, p] = final[:, 0]
        t = self.temperature * self.live[:, 0]  # idle rows greedy: the sampler's cheapest path
        nxt = sample_rows(logits[:, 0], self.seed, p + 1, t, self.top_p, self.nucleus)
        self.ids.copy_(nxt[:, None])
        self.pos.copy_((self.pos + 1).clamp_max(self.max_len - 1))  # rows ending at the end
        return nxt

    def step(self) -> torch.Tensor:
        self.steps += 1
        if self.graph is None:
            return self._step()
        self.graph.replay()
        return self.emitted

    def _push_live(self, slots: list[int], live: bool) -> None:
        """Mark `slots` live or idle on the device without waiting for the running step (a
        plain host-to-device copy would synchronise the stream; this one is queued behind it)."""
        for s in slots:
            self._live[s] = live
        mask = torch.tensor(self._live, dtype=torch.bool)[:, None]
        if self.device.type == "cuda":
            mask = mask.pin_memory()  # the caching host allocator keeps it until copied
        self.live.copy_(mask, non_blocking=True)

    def _launch(self) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Run the next step and start copying its tokens to the host (pinned memory, behind the
        step on its device's stream, whichever device is current); `_read` waits for them."""
        if self.device.type != "cuda":
            return self.step(), None  # the step ran synchronously
        with torch.cuda.device(self.device):
            host = self.step().to("cpu", non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        return host, done

    @staticmethod
    def _read(launched: tuple[torch.Tensor, torch.cuda.Event | None]) -> list[int]:
        host, done = launched
        if done is not None:
            done.synchronize()  # that step and its copy only: a step launched after runs on
        return host.tolist()

    @torch.no_grad()
    def prefill(self, slots: list[int], prompts: list[torch.Tensor]) -> torch.Tensor:
        """One eager forward of the prompts into cache rows `slots`, right-padded to the longest
        (a padded position writes keys past its row's length, which the row's own decode steps
        overwrite before any query can see them), attending causally over its own keys (the rows
        are new: StaticDecoder's `fresh`); stores their states and returns each prompt's
        last-position logits [len(slots), V]."""
        lens = [p.numel() for p in prompts]
        if max(lens) > self.max_len:
            raise ValueError(
                f"a sequence of {max(lens)} tokens does not fit the cache ({self.max_len})"
            )
        self.prefills += 1
        ids = torch.zeros((len(prompts), max(lens)), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : lens[i]] = p
        ids = ids.to(self.device)
        pos = torch.arange(ids.shape[1], device=self.device).expand_as(ids)
        rows = torch.tensor(slots, device=self.device)
        last = torch.tensor(lens, device=self.device) - 1
        logits, feats, final = self.net(ids, pos, rows=rows, logits_at=last, fresh=True)
        for i, (s, n) in enumerate(zip(slots, lens, strict=True)):
            if self.aux is not None:
                self.aux[s, :n] = feats[i, :n]
            self.final[s, :n] = final[i, :n]
        return logits[:, 0]

    def states(self, row: int, n: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Copies of row `row`'s stored states for positions 0..n-1."""
        aux = self.aux[row, :n].clone() if self.aux is not None else None
        return aux, self.final[row, :n].clone()

    def run(self, requests: list[Request]) -> list[Generated]:
        """Every request's result, in request order."""
        out: list[Generated | None] = [None] * len(requests)
        for index, done in self.stream(requests):
            out[index] = done
        return out

    def stream(self, requests: Iterable[Request]) -> Iterator[tuple[int, Generated]]:
        """(request index, result) as each request finishes. `requests` is read lazily, a few
        beyond the free slots at a time, so it can be a long (even endless) iterator: slots are
        refilled from it without ever draining at a boundary. The schedule (which row takes
        which request, when) depends on the generated tokens only, never on when the caller
        pulls, so a request's result is the same however the stream is consumed."""
        queue: deque[tuple[int, Request]] = deque()
        source = enumerate(requests)
        exhausted = False

        def fill(n: int) -> None:  # the next n requests into the queue, if there are that many
            nonlocal exhausted
            while len(queue) < n and not exhausted:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                r = item[1]
                if r.prompt.numel() + r.budget > self.max_len:
                    raise ValueError(
                        f"a prompt of {r.prompt.numel()} tokens with {r.budget} new ones does not "
                        f"fit the cache ({self.max_len} positions)"
                    )
                queue.append(item)

        rows: list[_Row | None] = [None] * self.slots
        ahead = None  # one_ahead: the step launched and not yet read (its index, its tokens)
        pending = 0  # requests the refill under way still takes (its group's free slots)
        while True:
            # hand back the rows whose last token's step is launched (their states are queued
            # before anything a later step or a refill writes)
            finished, emptied = [], []
            for s, row in enumerate(rows):
                if row is not None and row.finishing and row.last_step < self.steps:
                    finished.append((row.index, self._hand_back(s, row)))
                    rows[s] = None
                    emptied.append(s)
            if emptied:
                self._push_live(emptied, False)
            yield from finished
            free = [s for s, row in enumerate(rows) if row is None]
            fill(max(len(free), self.refill_group))
            if not queue and not any(rows):
                return
            # refill in groups, one chunk of the group's prompts before each step; the last
            # prompts, or into an idle batch, at once
            group = min(self.refill_group, len(queue))
            if queue and free and (pending or len(free) >= group or len(free) == self.slots):
                if not pending:  # a new refill: as many requests as slots are free now
                    pending = len(free)
                starts = self._chunk(queue, min(pending, len(free)))
                taken = free[: len(starts)]
                with torch.no_grad():
                    for s, row in zip(taken, self._start(taken, starts), strict=True):
                        rows[s] = row
                pending = (pending - len(starts)) if queue else 0
            with torch.no_grad():
                launched = (self.steps, self._launch())
            if self.one_ahead:
                ahead, launched = launched, ahead
                if launched is None:
                    continue  # the first step: nothing to read yet
            index, tokens = launched
            emitted = self._read(tokens)  # the one host read of a step
            for s, row in enumerate(rows):
                if row is not None and not row.finishing and row.first_step <= index:
                    self._take(row, emitted[s], index)

    def _chunk(self, queue: deque[tuple[int, Request]], n: int) -> list[tuple[int, Request]]:
        """The next refill chunk, off the queue's front: up to `n` requests whose prompts,
        padded to the longest, hold at most `prefill_tokens` tokens (at least one request)."""
        chunk = [queue.popleft()]
        longest = chunk[0][1].prompt.numel()
        while queue and len(chunk) < n:
            wider = max(longest, queue[0][1].prompt.numel())
            if self.prefill_tokens and (len(chunk) + 1) * wider > self.prefill_tokens:
                break
            chunk.append(queue.popleft())
            longest = wider
        return chunk

    def _start(self, slots: list[int], starts: list[tuple[int, Request]]) -> list[_Row]:
        """Prefill the requests into `slots`, sample each one's first token, arm the rows."""
        requests = [r for _, r in starts]
        logits = self.prefill(slots, [r.prompt for r in requests])
        idx = torch.tensor(slots, device=self.device)
        dev = dict(device=self.device)
        self.seed[idx] = torch.tensor([r.seed for r in requests], dtype=torch.long, **dev)
        self.temperature[idx] = torch.tensor([r.temperature for r in requests], **dev)
        self.top_p[idx] = torch.tensor([r.top_p for r in requests], **dev)
        lens = torch.tensor([r.prompt.numel() for r in requests], **dev)
        first = sample_rows(
            logits, self.seed[idx], lens, self.temperature[idx], self.top_p[idx], self.nucleus
        )
        self.ids[idx, 0], self.pos[idx, 0] = first, lens
        self._push_live(slots, True)
        armed = []
        for (index, r), token in zip(starts, first.tolist(), strict=True):
            row = _Row(index, r, first_step=self.steps)  # the next step launched feeds it
            self._take(row, token, self.steps - 1)
            armed.append(row)
        return armed

    def _take(self, row: _Row, token: int, step: int) -> None:
        """`token` (sampled by `step`, or by the prefill before the row's first step) is the
        row's next; the step after feeds it."""
        row.response.append(token)
        row.finishing = token in self.eos or len(row.response) >= row.request.budget
        if row.finishing:
            row.last_step = step + 1

    def _hand_back(self, s: int, row: _Row) -> Generated:
        p = row.request.prompt.numel()
        ids = torch.cat((row.request.prompt.long().cpu(), torch.tensor(row.response)))
        aux, final = self.states(s, ids.numel())
        return Generated(ids, p, aux, final)
