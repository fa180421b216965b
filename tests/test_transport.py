"""The sample transport between real processes over gloo: two targets feed one trainer through
`serve_samples` and `SampleReceiver`, samples arrive in the trainer's order, and the receiver
retires its credit sends as it goes. Before, it kept every credit it had ever granted (a gloo
send never reports completion unless waited on) and scanned them all on each sample, so a long
run's steps grew slower and slower (seen on one H200, docs/ablations/tau_h200.md pass 8)."""

import datetime

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from draft_models import SequenceSample
from splitserve.launch import free_ports
from splitserve.transport import Link, SampleReceiver, serve_samples

SAMPLES = 600  # per target
WINDOW = 3
TIMEOUT = datetime.timedelta(seconds=120)


def _sample(g: int) -> SequenceSample:
    n = 2 + g % 5
    return SequenceSample(
        input_ids=torch.arange(n) + g,
        loss_mask=torch.ones(n, dtype=torch.bool),
        aux_hidden=torch.full((n, 6), float(g)),
        final_hidden=torch.full((n, 2), -float(g)),
    )


def _worker(rank: int, port: int, out) -> None:
    store = dist.TCPStore("127.0.0.1", port, 3, is_master=rank == 0, timeout=TIMEOUT)
    link = Link(
        dist.ProcessGroupGloo(dist.PrefixStore("data", store), rank, 3, TIMEOUT),
        dist.ProcessGroupGloo(dist.PrefixStore("credits", store), rank, 3, TIMEOUT),
        torch.device("cpu"),
    )
    ids = {0: range(0, 2 * SAMPLES, 2), 1: range(1, 2 * SAMPLES, 2)}  # target k sends g = k mod 2
    if rank < 2:
        stats = serve_samples(link, ids[rank], lambda g: 2, _sample)
        out.put(("target", rank, stats["samples"]))
        return
    plan = [(g, g % 2) for g in range(2 * SAMPLES)]  # the trainer takes them interleaved
    receiver = SampleReceiver(link, plan, WINDOW)
    got = []
    for _ in plan:
        g, s = receiver.take()
        assert torch.equal(s.aux_hidden, _sample(g).aux_hidden)
        got.append(g)
    receiver._thread.join(timeout=60)
    out.put(("trainer", got, receiver.max_outstanding, receiver._thread.is_alive()))


def test_samples_arrive_in_order_and_credits_stay_bounded():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    (port,) = free_ports(1)
    procs = [ctx.Process(target=_worker, args=(r, port, out)) for r in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    trainer = next(r for r in results if r[0] == "trainer")
    _, got, max_outstanding, alive = trainer
    assert got == list(range(2 * SAMPLES))
    assert sorted(r[2] for r in results if r[0] == "target") == [SAMPLES, SAMPLES]
    # credits granted per route: SAMPLES; never more than the window outstanding at once
    assert 1 <= max_outstanding <= WINDOW
    assert not alive  # the receiving thread finished (its last credits retired)
