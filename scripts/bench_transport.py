"""A trainer's step time over a long run, with the sample transport between real processes.

    python scripts/bench_transport.py --out docs/results/splits/transport_cpu.json [--samples 12000]
        [--micro-batch 16] [--syncs 149] [--sync-ms 0.1]

One target process serves tiny samples at once (`serve_samples`, gloo, as on one GPU); the
trainer takes `--micro-batch` samples per step from a `SampleReceiver` and then stands in for a
training step: `--syncs` waits of `--sync-ms` that release the GIL, as a GPU step's host
synchronisations do (149 per step in a DSpark trainer's profile of 2026-12-01, before the
receiver's fix and host-side packing; 10 after both: docs/results/splits, `one_gpu_training`).
Measured for the receiver as it is and, as the baseline in the same run, for the polling form it
replaced (every credit send ever granted kept and polled with is_completed() on each sample; a
gloo send never reports completion unless waited on, so the list only grew). Reported per form:
the median step time over each tenth of the run, and the floor (the stand-in step alone, timed in
the same process before any sample flows). CPU only; the samples are tiny, so this measures the
transport's bookkeeping, not its bandwidth. Writes JSON to --out; the recorded run's figures are
docs/results/splits (`cpu.transport`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from draft_models import SequenceSample  # noqa: E402
from serving import cli  # noqa: E402
from splitserve.launch import free_ports  # noqa: E402
from splitserve.transport import (  # noqa: E402
    SampleReceiver,
    grant_credit,
    open_link,
    recv_sample,
    serve_samples,
)

TIMEOUT = datetime.timedelta(seconds=600)
WINDOW = 32  # split.window's default for micro-batch 16: two steps of samples


class PollingReceiver(SampleReceiver):
    """The receiver before the 2026-12-01 fix, kept here only as this benchmark's baseline."""

    def _receive_all(self) -> None:
        pending = []
        granted = {0: 0}
        for _ in range(min(len(self.plan), self.window)):
            pending.append(grant_credit(self.link, 0))
            granted[0] += 1
        for expected_id, src in self.plan:
            sample_id, sample, stats = recv_sample(self.link.data, src, self.link.device)
            assert sample_id == expected_id
            self.queue.put((sample_id, sample))
            if granted[0] < len(self.plan):
                pending.append(grant_credit(self.link, 0))
                granted[0] += 1
            pending = [w for w in pending if not w.is_completed()]
            self.max_outstanding = max(self.max_outstanding, len(pending))
        for w in pending:
            w.wait()


def _sample(g: int) -> SequenceSample:
    return SequenceSample(
        torch.full((4,), g), torch.ones(4, dtype=torch.bool), torch.zeros(4, 6), torch.zeros(4, 2)
    )


def _worker(rank: int, port: int, args, form: str, out) -> None:
    try:
        _serve_or_train(rank, port, args, form, out)
    except BaseException as exc:  # the parent reports it rather than waiting for a timeout
        out.put(("error", rank, repr(exc)))
        raise


def _serve_or_train(rank: int, port: int, args, form: str, out) -> None:
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=TIMEOUT)
    link = open_link(store, rank, 2, TIMEOUT)  # gloo, as on one GPU
    if rank == 0:
        serve_samples(link, range(args.samples), lambda g: 1, _sample)
        return
    floor = []  # the stand-in step alone, before any sample flows: this run's floor
    for _ in range(20):
        t0 = time.perf_counter()
        _step_waits(args)
        floor.append(time.perf_counter() - t0)
    cls = PollingReceiver if form == "polling" else SampleReceiver
    receiver = cls(link, [(g, 0) for g in range(args.samples)], WINDOW)
    steps = []
    for _ in range(args.samples // args.micro_batch):
        t0 = time.perf_counter()
        for _ in range(args.micro_batch):
            receiver.take()
        _step_waits(args)
        steps.append(time.perf_counter() - t0)
    receiver._thread.join()
    out.put(("done", steps, statistics.median(floor), receiver.max_outstanding))


def _step_waits(args) -> None:
    for _ in range(args.syncs):  # a GPU step's host synchronisations release the GIL
        time.sleep(args.sync_ms / 1e3)


def run_form(args, form: str) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    (port,) = free_ports(1)
    procs = [ctx.Process(target=_worker, args=(r, port, args, form, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        result = out.get(timeout=3600)
        if result[0] == "error":
            raise RuntimeError(f"process {result[1]} failed: {result[2]}")
        _, steps, floor, max_outstanding = result
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    tenth = max(1, len(steps) // 10)
    medians = [
        round(1e3 * statistics.median(steps[k : k + tenth]), 3) for k in range(0, tenth * 10, tenth)
    ]
    return {
        "form": form,
        "steps": len(steps),
        "floor_step_ms": round(1e3 * floor, 3),  # the stand-in step alone, measured first
        "median_step_ms_by_tenth": medians,
        "last_over_first": round(medians[-1] / medians[0], 3),
        "max_outstanding_credits": max_outstanding,
    }


def main(argv=None) -> None:
    p = cli.script_parser(__file__, __doc__)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--samples", type=int, default=12000, help="samples the run takes")
    p.add_argument("--micro-batch", type=int, default=16, help="samples per step")
    p.add_argument("--syncs", type=int, default=149, help="GIL-releasing waits per step")
    p.add_argument("--sync-ms", type=float, default=0.1, help="length of each wait")
    p.add_argument(
        "--forms",
        default="current,polling,current,polling",
        help="receivers to measure, in this order (repeated names run again: alternating them "
        "spreads the machine's drift over both)",
    )
    given = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(given)
    for flag in ("samples", "micro_batch"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    if args.samples < 10 * args.micro_batch:
        p.error("--samples must cover at least 10 steps (the report is by tenth of the run)")
    forms = args.forms.split(",")
    if not set(forms) <= {"current", "polling"} or not forms:
        p.error(f"--forms {args.forms!r}: a comma-separated list of current, polling")
    result = {
        "command": cli.command_line(p, given),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "torch": torch.__version__,
        "args": vars(args),
        "rows": [],
    }
    for form in forms:
        row = run_form(args, form)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
