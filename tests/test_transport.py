"""The sample transport between real processes over gloo: two targets feed one trainer through
`serve_samples` and `SampleReceiver`, samples arrive in the trainer's order, and the receiver
retires its credit sends as it goes. Before, it kept every credit it had ever granted (a gloo
send never reports completion unless waited on) and scanned them all on each sample, so a long
run's steps grew slower and slower (seen on one H200)."""

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from draft_models import SequenceSample
from splitserve.launch import free_ports
from splitserve.transport import SampleReceiver, open_link, serve_samples

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

SAMPLES = 600  # from target 0; target 1 sends 2, fewer than the window
WINDOW = 3
TIMEOUT = datetime.timedelta(seconds=120)
# the trainer's order: target 0's samples, with target 1's two taken in between (long runs of one
# route, a route smaller than the window, uneven routes)
ROUTE = {g: 0 for g in range(SAMPLES)} | {SAMPLES: 1, SAMPLES + 1: 1}
PLAN = list(range(100)) + [SAMPLES] + list(range(100, 400)) + [SAMPLES + 1]
PLAN += list(range(400, SAMPLES))


def _sample(g: int) -> SequenceSample:
    n = 2 + g % 5
    return SequenceSample(
        input_ids=torch.arange(n) + g,
        loss_mask=torch.ones(n, dtype=torch.bool),
        aux_hidden=torch.full((n, 6), float(g)),
        final_hidden=torch.full((n, 2), -float(g)),
    )


def _worker(rank: int, port: int, out) -> None:
    try:
        out.put(_serve_or_receive(rank, port))
    except BaseException as exc:  # the parent reports it rather than waiting for a timeout
        out.put(("error", rank, repr(exc)))
        raise


def _serve_or_receive(rank: int, port: int):
    store = dist.TCPStore("127.0.0.1", port, 3, is_master=rank == 0, timeout=TIMEOUT)
    link = open_link(store, rank, 3, TIMEOUT)  # gloo, as on one GPU
    if rank < 2:
        ids = [g for g in PLAN if ROUTE[g] == rank]  # a target sends in the trainer's order
        stats = serve_samples(link, ids, lambda g: 2, _sample)
        return ("target", rank, stats["samples"])
    receiver = SampleReceiver(link, [(g, ROUTE[g]) for g in PLAN], WINDOW)
    got = []
    for _ in PLAN:
        g, s = receiver.take()
        assert torch.equal(s.aux_hidden, _sample(g).aux_hidden)
        got.append(g)
    receiver._thread.join(timeout=60)
    return ("trainer", got, receiver.max_outstanding, receiver._thread.is_alive())


def test_samples_arrive_in_order_and_credits_stay_bounded():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    (port,) = free_ports(1)
    procs = [ctx.Process(target=_worker, args=(r, port, out)) for r in range(3)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=300) for _ in procs]
        errors = [r for r in results if r[0] == "error"]
        assert not errors, errors
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    _, got, max_outstanding, alive = next(r for r in results if r[0] == "trainer")
    assert got == PLAN
    assert sorted(r[2] for r in results if r[0] == "target") == [2, SAMPLES]
    # every credit granted is retired once its sample is in: the up-front window is the most
    # ever outstanding on a route (the old receiver kept all 600 of target 0's)
    assert max_outstanding == WINDOW
    assert not alive  # the receiving thread finished (its last credits retired)
