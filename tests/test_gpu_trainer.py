"""The trainer's step on a GPU never waits for the device, and its metrics are read one step late
without waiting for the next (skipped without one; run on the device machine:
`python -m pytest -q tests/test_gpu_trainer.py`).

Why: the trainer queues a step's packing, forward, loss, backward and optimizer calls while the
device still runs the previous step; a single host read inside that chain (an `.item()`, a
`nonzero`, a copy from pageable memory, DeepSpeed's throughput timer) makes the host wait, so
the next packing no longer overlaps the device's work. On one H100 a step was the sum of its
synchronised phases and the pack phase cost 5 to 59 ms (docs/results/throughput_h200, run 7).
Real DeepSpeed (amp, ZeRO-0, fused Adam) on a one-rank NCCL group, samples in pinned host memory
as the trainer's receiver leaves them."""

import dataclasses
import math
import os
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import random_sample, replace_sample, tiny_config, tiny_head, tiny_target

from splitserve.config import TrainConfig
from splitserve.launch import free_ports

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _pinned_samples():
    out = []
    for i, n in enumerate((300, 180)):
        s = random_sample(n, seed=i, assistant_from=n // 4)
        out.append(
            replace_sample(
                s,
                aux_hidden=s.aux_hidden.bfloat16().pin_memory(),
                final_hidden=s.final_hidden.bfloat16().pin_memory(),
            )
        )
    return out


class _NoSync:
    """CUDA sync debug mode 'error' (host reads, nonzero, pageable copies), plus refusals of
    the explicit synchronisations that mode does not see (torch.cuda.synchronize, an event's or
    a stream's synchronize), while the block runs."""

    def __enter__(self):
        def refuse(*args, **kwargs):
            raise RuntimeError("an explicit CUDA synchronisation")

        self.saved = [
            (torch.cuda, "synchronize", torch.cuda.synchronize),
            (torch.cuda.Event, "synchronize", torch.cuda.Event.synchronize),
            (torch.cuda.Stream, "synchronize", torch.cuda.Stream.synchronize),
        ]
        for owner, name, _ in self.saved:
            setattr(owner, name, refuse)
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode("default")
        for owner, name, value in self.saved:
            setattr(owner, name, value)


def _busy(device, n: int = 20):
    """Queue ~n big matmuls (tens of ms) and return an event recorded after them."""
    busy = torch.randn(4096, 4096, device=device)
    for _ in range(n):
        busy = busy @ busy / 64
    done = torch.cuda.Event()
    done.record()
    return done


def _run(rank: int, port: int, compile_layers: bool, out: str) -> None:
    from splitserve.trainer import DraftTrainer

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1)
    cfg = TrainConfig(
        steps=8, micro_batch=1, grad_accum=2, num_anchors=32, warmup_steps=1, precision="amp",
        zero_stage=0, compile_layers=compile_layers,  # the trainer clips here (clips_in_step)
    )  # fmt: skip
    # head_dim 16: flex attention's compiled kernels need at least 16 on CUDA (tiny_target's 8)
    target = dataclasses.replace(tiny_target(), num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=16)  # fmt: skip
    trainer = DraftTrainer(
        tiny_config("dspark"), target, tiny_head(), cfg, device=device, dp_world=1
    )
    samples, ids = _pinned_samples(), [0, 1]
    reference = [trainer.train_step(samples, ids) for _ in range(3)]  # past DeepSpeed's step 2
    result = {"timer_on": bool(trainer.engine.tput_timer.config.enabled), "error": ""}
    torch.cuda.synchronize()
    _busy(device)  # queued work a synchronising step would wait for
    try:
        with _NoSync():  # a whole step: two micro-batches and the optimizer's
            first = trainer.queue_step(samples, ids)
    except RuntimeError as exc:  # the step is left half done: report where, and stop
        frames = traceback.extract_tb(exc.__traceback__)[-8:]
        where = " <- ".join(
            f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in frames[::-1]
        )
        result["error"] = f"{exc} at {where}"
        torch.save(result, out)
        return
    # one step late: step N's metrics are read while step N+1 and more work are still queued
    second = trainer.queue_step(samples, ids)
    later = _busy(device)
    metrics = first.metrics()
    result["later_pending_at_read"] = not later.query()
    result["loss"] = metrics["loss"]
    result["second_loss"] = second.metrics()["loss"]
    result["reference_loss"] = reference[-1]["loss"]
    torch.save(result, out)
    trainer.engine.destroy()
    dist.destroy_process_group()


@pytest.mark.parametrize("compile_layers", [False, True])
def test_a_step_queues_without_waiting_and_is_read_one_step_late(tmp_path, compile_layers):
    out = str(tmp_path / "sync.pt")
    args = (free_ports(1)[0], compile_layers, out)
    mp.start_processes(_run, args=args, nprocs=1, start_method="spawn")
    result = torch.load(out)
    assert not result["timer_on"]  # DeepSpeed's throughput timer synchronises every step
    assert result["error"] == "", f"a synchronising operation: {result['error']}"
    # the read waited for its own step, not for the work queued after it
    assert result["later_pending_at_read"]
    for key in ("loss", "second_loss", "reference_loss"):
        assert math.isfinite(result[key])
