"""Where a training step's time goes: torch.profiler over a few steps of trainer rank 0.

`log.profile_steps=N` (with `log.profile_start`, default 5: after compilation and warm-up)
writes <run_dir>/profile/trainer0.txt (torch's tables, by self device time and by self CPU time)
and trainer0.json:
the wall time per step (the window's, so it includes the loop's work between its steps: data
waits, logging), the device's busy time per step (the sum of kernel times; one stream, so they
do not overlap), the phases the trainer marks (`splitserve.*` ranges: packing with the loss
denominator's all-reduce, the draft's forward and loss, backward, the optimizer step) with the
CPU time and device span of each, the shares of the window's time in each phase's work, in
attention and on the host alone (`step_shares`), the costliest kernels and the operators with
the most CPU time of their own. Profiled steps run slower than others (the profiler's own
cost), so compare figures within one profile, not with the step times in metrics.jsonl.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ROWS = 40  # operators kept in the table and the JSON


def _device_us(evt) -> float:
    """An event's own device time in microseconds."""
    return float(evt.self_device_time_total)


def is_kernel(evt) -> bool:
    """A device-side event that is a kernel or a copy (not a range marked by user code)."""
    on_device = getattr(evt, "device_type", DeviceType.CPU) != DeviceType.CPU
    return on_device and not getattr(evt, "is_user_annotation", False)


def is_range(evt) -> bool:
    """A record_function range, not an operator (torch flags them as user annotations; the
    name rules catch the trainer's and the optimizer's wherever a torch leaves the flag off)."""
    flagged = bool(getattr(evt, "is_user_annotation", False))
    return flagged or evt.key.startswith(("splitserve.", "Optimizer."))


# operators and kernels of attention (flex attention's, SDPA's, flash/cuDNN fused ones)
_ATTENTION = re.compile(r"flex_attention|scaled_dot_product|flash|fmha|attention", re.I)


def _phase_and_attention(evt) -> tuple[str, bool]:
    """The marked phase an operator ran in (its nearest `splitserve.*` range, without the
    prefix; `backward` for autograd's own thread, whose operators have no range above them on a
    GPU; `other` else) and whether it is attention's (its name or an enclosing one's)."""
    attention = False
    node = evt
    while node is not None:
        attention = attention or bool(_ATTENTION.search(node.name))
        if node.name.startswith("splitserve."):
            return node.name.removeprefix("splitserve."), attention
        if node.name.startswith("autograd::engine::"):
            return "backward", attention
        node = node.cpu_parent
    return "other", attention


def step_shares(events, wall_us: float, cuda: bool) -> dict:
    """Shares of a profiled window's wall time: the work of each marked phase (pack, forward,
    loss, backward, optimizer_step; on a GPU its kernels' times, on a CPU its operators' own
    times), attention's work (forward and backward, wherever it ran) and the host's share, the
    time no work ran (the device waiting on the host: launches, Python, synchronisations; on a
    CPU the interpreter between operators). `events`: the profile's events (`prof.events()`,
    not averaged: an operator's enclosing range is read from its parents)."""
    work: dict[str, float] = defaultdict(float)
    attention = 0.0
    for e in events:
        if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU:
            continue  # a kernel's own event: counted through the operator that launched it
        if is_range(e):
            continue  # a range: its time is its operators'
        us = sum(k.duration for k in e.kernels) if cuda else float(e.self_cpu_time_total)
        if us <= 0:
            continue
        phase, is_attention = _phase_and_attention(e)
        work[phase] += us
        attention += us if is_attention else 0.0
    wall = max(float(wall_us), 1e-9)
    shares = {k: round(v / wall, 4) for k, v in sorted(work.items())}
    shares["attention"] = round(attention / wall, 4)
    shares["host"] = round(max(0.0, 1.0 - sum(work.values()) / wall), 4)
    return shares


class StepProfiler:
    """Profiles steps [start, start + count) of a loop; `begin(step)` / `end(step)` around each.
    A window the loop leaves early is written at `close()` over the steps it did profile."""

    def __init__(self, start: int, count: int, out_dir: Path, name: str, device: torch.device):
        self.start, self.count, self.out_dir, self.name = start, count, Path(out_dir), name
        self.device = device
        self.prof = None
        self.t0 = 0.0
        self.done = 0  # steps profiled so far

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def begin(self, step: int) -> None:
        if step != self.start:
            return
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._sync()
        self.prof = profile(activities=activities)
        self.prof.__enter__()
        self.t0 = time.perf_counter()

    def end(self, step: int) -> None:
        """After each step: the profile closes after its last one."""
        if self.prof is None:
            return
        self.done += 1
        if self.done == self.count:
            self._finish()

    def close(self) -> None:
        """At the loop's end: a profile still open (the loop ended early) is written as is."""
        if self.prof is not None:
            self._finish()

    def _finish(self) -> None:
        self._sync()
        wall = time.perf_counter() - self.t0
        self.prof.__exit__(None, None, None)
        self.write(wall, self.done)
        self.prof = None

    def write(self, wall: float, steps: int) -> None:
        events = self.prof.key_averages()
        table = events.table(sort_by="self_cpu_time_total", row_limit=ROWS)
        if self.device.type == "cuda":  # by device time first; by CPU time shows host-bound work
            by_device = events.table(sort_by="self_device_time_total", row_limit=ROWS)
            table = f"By self device time:\n{by_device}\n\nBy self CPU time:\n{table}"
        n = max(steps, 1)
        ms = lambda us: round(us / 1e3 / n, 3)  # noqa: E731  microseconds in all -> ms per step
        kernels = sorted((e for e in events if is_kernel(e)), key=_device_us, reverse=True)
        phases = {}
        for e in events:  # a range appears twice on a GPU: its CPU span and its device span
            if not e.key.startswith("splitserve."):
                continue
            p = phases.setdefault(e.key, {"cpu_ms_per_step": 0.0, "device_span_ms_per_step": 0.0})
            if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU:
                p["cpu_ms_per_step"] = ms(e.cpu_time_total)
            else:
                p["device_span_ms_per_step"] = ms(_device_us(e))
        summary = {
            "steps": steps,  # fewer than asked: the loop ended inside the window
            "asked": self.count,
            "start": self.start,
            "wall_ms_per_step": round(wall * 1e3 / n, 3),
            # the sum of kernel times (one stream: they do not overlap); against the wall time
            # it says how much of a step the device computes
            "device_busy_ms_per_step": ms(sum(_device_us(e) for e in kernels)),
            # each marked phase: the CPU time spent in it (waits for the device included) and,
            # on a GPU, the span of its kernels from the first one's start to the last one's end
            "phases": phases,
            # shares of the window's wall time: each phase's work, attention's, the host's
            "shares": step_shares(self.prof.events(), wall * 1e6, self.device.type == "cuda"),
            "top_kernels": [
                {
                    "name": e.key[:120],
                    "calls_per_step": round(e.count / n, 2),
                    "device_ms_per_step": ms(_device_us(e)),
                }
                for e in kernels[:ROWS]
            ],
            # the host's side: operators (and runtime calls) by their own CPU time, which says
            # whether a step waits on launching work rather than on the device. A marked range's
            # own time (splitserve.*) is the Python between its operators, and with it any wait
            # for the GIL held by another thread of the process
            "top_cpu_ops": [
                {
                    "name": e.key[:120],
                    "calls_per_step": round(e.count / n, 2),
                    "self_cpu_ms_per_step": ms(e.self_cpu_time_total),
                }
                for e in sorted(
                    (e for e in events if not is_kernel(e)),
                    key=lambda e: e.self_cpu_time_total,
                    reverse=True,
                )[:ROWS]
            ],
        }
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"{self.name}.txt").write_text(table + "\n")
        (self.out_dir / f"{self.name}.json").write_text(json.dumps(summary, indent=1) + "\n")
