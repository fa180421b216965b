"""Start the worker processes of one run on this node and watch them.

The launcher spawns one process per target and trainer worker (or a single colocated one). If
any worker dies (an error, or SIGKILL), the others are stopped and the launch fails with the
worker's name and exit code; the newest complete checkpoint is untouched, so the same command
resumes. Ctrl-C (or a worker stopped on its own by a signal) stops every worker the same way and
raises KeyboardInterrupt, which the command line turns into one line.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import socket
import threading
import time

from .workers import INTERRUPTED, RunContext, colocated_main, target_main, trainer_main

STOP_GRACE_S = 30.0  # how long stopped workers may take to close their files before SIGKILL


def free_ports(n: int) -> list[int]:
    """n distinct free ports: every socket stays bound until all are picked (one at a time, the
    OS may hand out a port just released, and the two stores of a run then collide)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch(ctx: RunContext) -> None:
    base = ctx.cfg.split.master_port
    if base:  # fixed ports (runs started side by side cannot race for the same free port)
        ctx.store_port, ctx.trainer_port = base + 1, base + 2
    if not (ctx.store_port and ctx.trainer_port):
        ctx.store_port, ctx.trainer_port = free_ports(2)
    spawn = mp.get_context("spawn")
    procs: list[tuple[str, mp.Process]] = []
    if ctx.cfg.split.colocated:
        procs.append(
            ("colocated", spawn.Process(target=colocated_main, args=(ctx,), name="colocated"))
        )
    else:
        t = ctx.topology
        procs += [
            (f"target{i}", spawn.Process(target=target_main, args=(i, ctx), name=f"target{i}"))
            for i in range(t.num_targets)
        ]
        procs += [
            (f"trainer{r}", spawn.Process(target=trainer_main, args=(r, ctx), name=f"trainer{r}"))
            for r in range(t.num_trainers)
        ]
    _start(procs)
    _record_pids(ctx, {name: p.pid for name, p in procs})
    try:
        while True:
            if any(p.exitcode == INTERRUPTED for _, p in procs):  # a stop signal sent to one
                raise KeyboardInterrupt
            failed = [(n, p.exitcode) for n, p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(
                    f"worker {failed[0][0]} exited with code {failed[0][1]}; stopped the others"
                )
            if all(p.exitcode == 0 for _, p in procs):
                return
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    finally:
        for _, p in procs:
            if p.is_alive():
                p.terminate()
        for _, p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def _start(procs: list[tuple[str, mp.Process]]) -> None:
    """Start the workers with SIGINT ignored (inherited through exec; `workers.stops_quietly`
    installs their own handler once they have imported): a Ctrl-C during their seconds of imports
    would otherwise print one traceback per worker. The launcher stops them instead."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        for _, p in procs:
            p.start()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def _stop(procs: list[tuple[str, mp.Process]]) -> None:
    """SIGTERM to every live worker (their stop request: they close the metrics file and wandb
    and exit), then wait for them; whatever is still alive is killed by the caller."""
    for _, p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for _, p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))


def _record_pids(ctx: RunContext, pids: dict) -> None:
    import json
    from pathlib import Path

    path = Path(ctx.run_dir) / "workers.json"
    path.write_text(json.dumps(pids))
