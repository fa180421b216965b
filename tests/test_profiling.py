"""The trainer's step profiler (log.profile_steps) on CPU: full windows, windows the loop
leaves early, windows past the run's end or before a resumed run's first step. (A whole run
profiled through the workers: tests/test_training.py's disaggregated test.)"""

import json
import time
from types import SimpleNamespace

import pytest
import torch
from torch.profiler import record_function

from splitserve.profiling import StepProfiler, step_shares
from splitserve.workers import _profiler


def _loop(prof, steps):
    for step in range(steps):
        prof.begin(step)
        with record_function("splitserve.work"):
            torch.ones(64, 64) @ torch.ones(64, 64)
        prof.end(step)
    prof.close()


def test_a_window_the_loop_leaves_early_is_written_over_the_steps_it_profiled(tmp_path):
    _loop(StepProfiler(1, 2, tmp_path / "full", "t", torch.device("cpu")), 5)
    _loop(StepProfiler(3, 4, tmp_path / "short", "t", torch.device("cpu")), 5)  # steps 3, 4
    full = json.loads((tmp_path / "full/t.json").read_text())
    short = json.loads((tmp_path / "short/t.json").read_text())
    assert (full["steps"], full["asked"], full["start"]) == (2, 2, 1)
    assert (short["steps"], short["asked"], short["start"]) == (2, 4, 3)
    for prof in (full, short):  # per step: one marked range and one matmul each
        assert prof["phases"]["splitserve.work"]["cpu_ms_per_step"] > 0
        assert 0 < prof["wall_ms_per_step"]
        cpu_ops = {op["name"]: op for op in prof["top_cpu_ops"]}  # the host's side, per step
        assert cpu_ops["aten::mm"]["calls_per_step"] == 1
        assert cpu_ops["aten::mm"]["self_cpu_ms_per_step"] > 0
    assert "splitserve.work" in (tmp_path / "short/t.txt").read_text()


def test_the_window_follows_a_resumed_run_and_a_window_past_the_end_warns(tmp_path, capsys):
    def ctx(start_step, profile_start, steps=10):
        return SimpleNamespace(
            cfg=SimpleNamespace(
                log=SimpleNamespace(profile_start=profile_start, profile_steps=3),
                train=SimpleNamespace(steps=steps),
            ),
            start_step=start_step,
            run_dir=str(tmp_path),
        )

    trainer = SimpleNamespace(device=torch.device("cpu"))
    assert _profiler(ctx(0, 5), trainer).start == 5
    assert _profiler(ctx(7, 5), trainer).start == 7  # resumed at step 7: profile from there
    assert _profiler(ctx(0, 10), trainer) is None
    assert "log.profile_start=10 is past this run's steps (0..9): no profile" in (
        capsys.readouterr().err
    )


def test_the_memory_record_is_empty_off_cuda():
    from splitserve.workers import _memory_record

    assert _memory_record(torch.device("cpu")) == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_memory_record_reads_the_allocator():
    from splitserve.workers import _memory_record

    dev = torch.device("cuda")
    before = _memory_record(dev)
    x = torch.empty(256 << 20, dtype=torch.uint8, device=dev)  # 256 MiB
    after = _memory_record(dev)
    assert after["gpu_allocated_gb_rank0"] - before["gpu_allocated_gb_rank0"] >= 0.26
    assert after["gpu_reserved_gb_rank0"] >= after["gpu_allocated_gb_rank0"]
    assert after["alloc_retries_rank0"] >= 0
    del x


def test_a_window_is_shared_out_by_phase_with_attention_and_the_host_apart():
    """Each operator's own time goes to its nearest splitserve.* range (autograd's evaluate
    functions to backward), attention's wherever it ran, the rest of the wall to the host."""
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    w = torch.randn(16, 256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        with record_function("splitserve.forward"):
            y = torch.nn.functional.scaled_dot_product_attention(q, q, q)
            loss = (y @ w).square().sum()
        with record_function("splitserve.backward"):
            loss.backward()
        t_sleep = time.perf_counter()
        time.sleep(0.02)  # the host alone: no operator runs
        slept_us = (time.perf_counter() - t_sleep) * 1e6
        wall_us = (time.perf_counter() - t) * 1e6
    shares = step_shares(prof.events(), wall_us, cuda=False)
    assert set(shares) == {"forward", "backward", "attention", "host"}
    assert shares["forward"] > 0 and shares["backward"] > 0
    assert 0 < shares["attention"] < shares["forward"] + shares["backward"]
    # the sleep is the host's whatever else the window took (a loaded CPU stretches operators'
    # own times, never the sleep's): its share is the least the host gets
    assert shares["host"] >= slept_us / wall_us - 1e-3 > 0
    parts = sum(v for k, v in shares.items() if k != "attention")
    assert parts == pytest.approx(1.0, abs=1e-3)
