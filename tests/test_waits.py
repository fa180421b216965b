"""A worker says what it waits on: one line per long phase (again at each doubling), with
compilation named from the worker's own stack, and torch.compile time counted apart."""

import time

import torch

from splitserve.waits import WaitWatch, compile_seconds


def wait_for(lines, n, timeout=10.0):
    end = time.monotonic() + timeout
    while len(lines) < n and time.monotonic() < end:
        time.sleep(0.01)
    return lines


def test_a_long_phase_is_reported_at_its_limit_and_each_doubling():
    lines = []
    watch = WaitWatch("trainer 0", after=0.15, poll=0.01, out=lines.append)
    try:
        watch.phase("data", "16 samples for step 3")
        wait_for(lines, 2)
        assert [line.split(" (")[0] for line in lines[:2]] == [
            "trainer 0: waiting for data: 16 samples for step 3"
        ] * 2
        assert lines[0].endswith(" s so far)")
        watch.phase("credit", "to send sample 7 to link rank 1")  # a new phase: a new clock
        wait_for(lines, 3)
        assert lines[2].startswith(
            "trainer 0: waiting for credit (the trainer has not taken earlier samples): "
            "to send sample 7 to link rank 1 ("
        )
        watch.phase("")  # idle: nothing to say
        n = len(lines)
        time.sleep(0.4)
        assert len(lines) == n
    finally:
        watch.close()
    off = WaitWatch("target 0", after=0)  # 0 turns it off: no thread
    assert off._thread is None
    off.close()


def test_compilation_is_named_from_the_stack_and_timed_apart():
    watch = WaitWatch("trainer 0", after=0)
    watch.phase("step", "step 1")
    assert watch.describe() == "computing: step 1"
    seen = []

    def backend(gm, example_inputs):  # runs inside torch.compile, on this thread
        seen.append(watch.describe())
        return gm.forward

    before = compile_seconds()
    fn = torch.compile(lambda x: x * 3 + 1, backend=backend)
    assert torch.equal(fn(torch.ones(3)), torch.full((3,), 4.0))
    assert seen == ["waiting for compilation (torch.compile): step 1"]
    assert compile_seconds() > before

    def probe():  # runs eagerly between two compiled graphs, once they are compiled
        seen.append(watch.describe())
        return 0

    @torch.compile(backend="eager")
    def with_break(x):
        y = x + 1
        torch._dynamo.graph_break()
        probe()
        return y * 2

    seen.clear()
    with_break(torch.ones(2))
    with_break(torch.ones(2))
    assert seen == ["computing: step 1"] * 2  # running compiled code is not compiling
