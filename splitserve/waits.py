"""Saying what a worker waits on: one line when a phase runs long, and compilation time apart.

A worker names its phase as it goes (`watch.phase("data", "samples for step 3 from target 0")`,
`watch.phase("step", "step 3")`, `watch.phase("credit", ...)`). A daemon thread prints one line
to stderr when the same phase has lasted `after` seconds, and again at 2x, 4x, ... that time,
naming what the worker waits on: data, compilation or credit. Whether a long step is compiling
is read from the worker thread's own Python stack (torch.compile's compiling frames: dynamo's
frame conversion, inductor's compile_fx), so no phase has to guess it in advance.

`compile_seconds()`: the process's total torch.compile time so far (dynamo's own timer; NaN
where this torch does not keep it); the trainer logs each step's share as `compile_s`.
"""

from __future__ import annotations

import math
import sys
import threading
import time

# modules on a thread's stack only while torch.compile compiles (dynamo's frame conversion;
# inductor's compile_fx, which a lazily compiled backward enters too); running compiled code goes
# through other torch/_dynamo and torch/_inductor modules (eval_frame, output_code), so those
# directories as a whole would call every compiled step "compiling"
COMPILING = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py")

# what each phase means to someone reading the log
WAITING_ON = {
    "data": "waiting for data",
    "credit": "waiting for credit (the trainer has not taken earlier samples)",
    "step": "computing",
    "produce": "producing",
}


def compile_seconds() -> float:
    """Seconds this process has spent in torch.compile (frames traced and compiled) so far."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:  # pragma: no cover - older or newer torch without the timer
        return math.nan
    # frames compiled (forward included), and backwards AOTAutograd compiles lazily
    keys = ("_compile.compile_inner", "backward._backward_impl")
    return float(sum(sum(compilation_time_metrics.get(k, [])) for k in keys))


def is_compiling(thread_id: int) -> bool:
    """Whether that thread is inside torch.compile right now (from its current stack)."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith(COMPILING):
            return True
        frame = frame.f_back
    return False


class WaitWatch:
    """One line per long phase of the calling thread (see the module docstring); `after` <= 0
    turns the watch off."""

    def __init__(self, who: str, after: float, poll: float = 1.0, out=None) -> None:
        self.who, self.after, self.poll = who, after, poll
        self.out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._phase, self._detail, self._since, self._next = "", "", time.monotonic(), after
        self._stop = threading.Event()
        self._thread = None
        if after > 0:
            self._thread = threading.Thread(target=self._run, name="wait-watch", daemon=True)
            self._thread.start()

    def phase(self, name: str, detail: str = "") -> None:
        """Enter phase `name` ("" = idle: nothing to report)."""
        with self._lock:
            self._phase, self._detail = name, detail
            self._since, self._next = time.monotonic(), self.after

    def describe(self) -> str:
        """What the watched thread is doing now, in words."""
        with self._lock:
            name, detail = self._phase, self._detail
        what = WAITING_ON.get(name, name)
        if name in ("step", "produce") and is_compiling(self.thread_id):
            what = "waiting for compilation (torch.compile)"
        return f"{what}: {detail}" if detail else what

    def check(self) -> str | None:
        """The line to print now, if the current phase has just passed its next notice time."""
        with self._lock:
            if not self._phase:
                return None
            elapsed = time.monotonic() - self._since
            if elapsed < self._next:
                return None
            self._next *= 2
        return f"{self.who}: {self.describe()} ({elapsed:.0f} s so far)"

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            line = self.check()
            if line is not None:
                self.out(line)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
