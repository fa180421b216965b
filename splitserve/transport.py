"""Moving `SequenceSample`s from target workers to trainer workers over torch.distributed p2p,
with credits for back-pressure.

Wire format per sample on the data-plane process group (tag DATA): an int64 header
[sample_id, length, aux_width, hidden, dtype_code] and a float64 header [target busy seconds,
target credit-wait seconds], then input_ids, loss_mask, aux_hidden, final_hidden. A credit is one
int64 (tag CREDIT) from trainer to target: "you may send me one more sample". A target sends only
against a credit, and a trainer grants `window` credits per route up front and one more for each
sample it takes in, so at most `window` samples are in flight on a route plus a bounded receive
queue. Full-vocabulary logits never travel.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from draft_models import SequenceSample

from .topology import sample_name

DATA, CREDIT = 0, 1
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
CPU = torch.device("cpu")


@dataclass
class Link:
    """A worker's data plane. `data` carries samples (gloo with CPU tensors, or NCCL with tensors
    on `device`); `credits` is always a gloo group with CPU tensors. Two groups, because NCCL runs
    the point-to-point operations between two ranks in order on one stream: a trainer's queued
    credit sends would sit in front of its receive of the sample the target is sending, while the
    target waits for the next credit before that send completes: a deadlock (seen on two H200s)."""

    data: object
    credits: object
    device: torch.device


def open_link(store, rank: int, size: int, timeout, nccl_device=None) -> Link:
    """Link rank `rank` of `size` over one store: a gloo credit group and a sample group, NCCL on
    `nccl_device` when given (workers between distinct GPUs), else gloo with CPU tensors."""
    credits = dist.ProcessGroupGloo(
        dist.PrefixStore("splitserve-credits", store), rank, size, timeout
    )
    data_store = dist.PrefixStore("splitserve-link", store)
    if nccl_device is not None:
        torch.cuda.set_device(nccl_device)
        nccl = dist.ProcessGroupNCCL(data_store, rank, size, dist.ProcessGroupNCCL.Options())
        return Link(nccl, credits, nccl_device)
    return Link(dist.ProcessGroupGloo(data_store, rank, size, timeout), credits, CPU)


def send_sample(
    pg, dst: int, sample_id: int, s: SequenceSample, stats: tuple[float, float], device
) -> list:
    """`pg`, `device`: the data group and where its backend wants tensors (CPU for gloo, the GPU for
    NCCL). gloo sends complete before this returns. NCCL sends are only enqueued: the returned
    works (which keep their tensors alive) complete once the trainer posts its receives; waiting
    here would make the target's compute stream wait for the trainer, hiding back-pressure inside
    the target's busy time. Credits bound how many can be outstanding."""
    length, width = s.aux_hidden.shape
    header = torch.tensor(
        [sample_id, length, width, s.final_hidden.shape[1], DTYPES.index(s.aux_hidden.dtype)],
        dtype=torch.long,
    )
    pieces = [
        t.to(device)
        for t in (
            header,
            torch.tensor(stats, dtype=torch.float64),
            s.input_ids.long(),
            s.loss_mask.to(torch.uint8),
            s.aux_hidden.contiguous(),
            s.final_hidden.contiguous(),
        )
    ]
    if device.type == "cuda":
        return [pg.send([t], dst, DATA) for t in pieces]
    for t in pieces:
        pg.send([t], dst, DATA).wait()
    return []


def recv_sample(
    pg, src: int, device, pin_memory: bool = False
) -> tuple[int, SequenceSample, tuple[float, float]]:
    """Receive one sample. On a GPU this runs on the receiver thread's own stream and returns only
    once the sample is complete (see `SampleReceiver`). `pin_memory`: host buffers for the hidden
    states are pinned (a GPU trainer on a gloo link copies them on without waiting)."""
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    header = torch.empty(5, dtype=torch.long, device=device)
    pg.recv([header], src, DATA).wait()
    if stream is not None:
        stream.synchronize()
    sample_id, length, width, hidden, code = header.tolist()
    dtype = DTYPES[code]
    stats = torch.empty(2, dtype=torch.float64, device=device)
    ids = torch.empty(length, dtype=torch.long, device=device)
    mask = torch.empty(length, dtype=torch.uint8, device=device)
    pin = pin_memory and device.type == "cpu"
    aux = torch.empty(length, width, dtype=dtype, device=device, pin_memory=pin)
    final = torch.empty(length, hidden, dtype=dtype, device=device, pin_memory=pin)
    for t in (stats, ids, mask, aux, final):
        pg.recv([t], src, DATA).wait()
    sample = SequenceSample(ids, mask.bool(), aux, final)
    if stream is not None:
        stream.synchronize()
    return sample_id, sample, (float(stats[0]), float(stats[1]))


def grant_credit(link: Link, dst: int) -> object:
    return link.credits.send([torch.ones(1, dtype=torch.long)], dst, CREDIT)


def wait_credit(link: Link, src: int) -> None:
    link.credits.recv([torch.empty(1, dtype=torch.long)], src, CREDIT).wait()


class SampleReceiver:
    """A trainer's receiving thread: grants credits and fills a bounded queue, in the exact order
    the trainer consumes (`plan`: (sample_id, source link rank) pairs).

    On a GPU the thread receives on a CUDA stream of its own. On the default stream (which every
    thread of the process shares) its waits for the next sample would stall the training step's
    kernels queued behind them: the trainer's data wait would show up as compute, and the target
    would be held to the trainer's step. `take` marks each tensor as used on the consumer's stream
    so the allocator does not hand its memory back to the receiving stream too early."""

    def __init__(
        self, link: Link, plan: list[tuple[int, int]], window: int, pin_memory: bool = False
    ) -> None:
        """`pin_memory`: receive the hidden states into pinned host memory (a GPU trainer on a
        gloo link)."""
        self.link, self.plan, self.window, self.pin_memory = link, plan, window, pin_memory
        self.queue: queue.Queue = queue.Queue(maxsize=window)
        self.error: BaseException | None = None
        self.target_stats: dict[int, tuple[float, float]] = {}
        self.max_outstanding = 0  # the most credit sends not yet retired on one route (<= window)
        self._thread = threading.Thread(target=self._run, name="sample-receiver", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self.link.device.type == "cuda":
                torch.cuda.set_device(self.link.device)  # the CUDA current device is per thread
                with torch.cuda.stream(torch.cuda.Stream(self.link.device)):
                    self._receive_all()
            else:
                self._receive_all()
        except BaseException as exc:  # surfaced to the training thread by take()
            self.error = exc
            self.queue.put(None)

    def _receive_all(self) -> None:
        # per route, the credit sends not yet retired, oldest first. A gloo send reports
        # completion only through wait(): polled with is_completed() it stays pending forever,
        # and scanning every credit ever granted on each sample made a step cost more the longer
        # a run went (one H200: 0.14 s per step at the start of a 30,000-sample run, ~0.4 s by its
        # 24,000th sample). The target takes credit n before it sends its n-th sample on a route,
        # so once that sample is here credits 1..n have arrived, and waiting on them returns at
        # once: at most `window` stay outstanding per route.
        outstanding: dict[int, deque] = defaultdict(deque)
        granted: dict[int, int] = defaultdict(int)
        received: dict[int, int] = defaultdict(int)
        per_src: dict[int, int] = defaultdict(int)
        for _, src in self.plan:
            per_src[src] += 1

        def grant(src: int) -> None:
            outstanding[src].append(grant_credit(self.link, src))
            granted[src] += 1
            self.max_outstanding = max(self.max_outstanding, len(outstanding[src]))

        for src, n in per_src.items():  # up-front credits: the first `window` samples of a route
            for _ in range(min(n, self.window)):
                grant(src)
        for expected_id, src in self.plan:
            sample_id, sample, stats = recv_sample(
                self.link.data, src, self.link.device, self.pin_memory
            )
            if sample_id != expected_id:
                raise RuntimeError(
                    f"route from link rank {src}: expected sample {expected_id}, got {sample_id}"
                )
            self.target_stats[src] = stats
            self.queue.put((sample_id, sample))
            received[src] += 1
            while granted[src] - len(outstanding[src]) < received[src]:
                outstanding[src].popleft().wait()  # arrived: retire it
            if granted[src] < per_src[src]:
                grant(src)
        for works in outstanding.values():
            for w in works:
                w.wait()

    def take(self) -> tuple[int, SequenceSample]:
        item = self.queue.get()
        if item is None:
            raise RuntimeError("sample receiver failed") from self.error
        sample = item[1]
        if sample.aux_hidden.is_cuda:
            stream = torch.cuda.current_stream(sample.aux_hidden.device)
            for t in (sample.input_ids, sample.loss_mask, sample.aux_hidden, sample.final_hidden):
                t.record_stream(stream)
        return item


def serve_samples(
    link: Link,
    sample_ids: Iterable[int],
    route: Callable[[int], int],
    produce: Callable[[int], SequenceSample],
    on_sent: Callable[[int, SequenceSample], None] | None = None,
    watch=None,
) -> dict:
    """A target worker's loop: produce each sample, wait for a credit from its trainer, send.
    busy = producing (synchronised on a GPU, so it is the GPU's time too), credit wait = idle.
    `watch` (a splitserve.waits.WaitWatch) is told each phase."""
    phase = watch.phase if watch is not None else lambda *a: None
    busy = wait = send = 0.0
    tokens = 0
    sent: list[int] = []
    # per sample; a batched producer charges a whole batch to its first sample
    produce_s: list[float] = []
    pending: list = []  # NCCL sends not yet matched by the trainer's receives
    for g in sample_ids:
        t0 = time.perf_counter()
        name = sample_name(g)
        phase("produce", name)
        sample = produce(g)
        # the compute stream only: the NCCL sends in flight are the trainer's pace
        if sample.aux_hidden.is_cuda:
            torch.cuda.current_stream(sample.aux_hidden.device).synchronize()
        t1 = time.perf_counter()
        dst = route(g)
        phase("credit", f"to send {name} to link rank {dst}")
        wait_credit(link, dst)
        t2 = time.perf_counter()
        busy += t1 - t0
        wait += t2 - t1
        produce_s.append(round(t1 - t0, 6))
        pending = [w for w in pending if not w.is_completed()]
        pending += send_sample(link.data, dst, g, sample, (busy, wait), link.device)
        send += time.perf_counter() - t2
        sent.append(int(g))
        tokens += int(sample.input_ids.numel())
        if on_sent is not None:
            on_sent(g, sample)
    t3 = time.perf_counter()
    phase("")
    for w in pending:
        w.wait()
    if link.device.type == "cuda":
        torch.cuda.current_stream(link.device).synchronize()
    send += time.perf_counter() - t3
    return {
        "samples": len(sent),
        "tokens": tokens,
        "busy_s": busy,
        "credit_wait_s": wait,
        "send_s": send,
        "sample_ids": sent,
        "produce_s": produce_s,
    }
