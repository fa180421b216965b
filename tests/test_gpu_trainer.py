"""The trainer's micro-step on a GPU never waits for the device (skipped without one; run on the
device machine: `python -m pytest -q tests/test_gpu_trainer.py`).

Why: the trainer queues a micro-batch's packing, forward, loss, backward and (between
accumulation boundaries) optimizer call while the device still runs the previous one; a single
host read inside that chain (an `.item()`, a `nonzero`, a copy from pageable memory) makes the
host wait, so the next micro-batch's packing no longer overlaps the device's work. On one H100
the pack phase cost 5 to 59 ms a step in runs of one code (docs/results/throughput_h200, run 7);
this names any synchronising operation. Real DeepSpeed (amp, ZeRO-0, fused Adam) on a one-rank
NCCL group, samples in pinned host memory as the trainer's receiver leaves them."""

import math
import os

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


def _run(rank: int, port: int, compile_layers: bool, out: str) -> None:
    from splitserve.trainer import DraftTrainer

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1)
    cfg = TrainConfig(
        steps=4, micro_batch=1, grad_accum=2, num_anchors=32, warmup_steps=1, precision="amp",
        zero_stage=0, compile_layers=compile_layers,
    )  # fmt: skip
    trainer = DraftTrainer(
        tiny_config("dspark"), tiny_target(), tiny_head(), cfg, device=device, dp_world=1
    )
    samples, ids = _pinned_samples(), [0, 1]
    for _ in range(2):  # warm-up: compilation, allocator, the optimizer's state
        trainer.train_step(samples, ids)
    torch.cuda.synchronize()
    busy = torch.randn(4096, 4096, device=device)
    for _ in range(20):  # queued work a synchronising micro-step would wait for
        busy = busy @ busy / 64
    error = ""
    torch.cuda.set_sync_debug_mode("error")
    try:  # the first micro-batch of a step: no accumulation boundary
        batch = trainer._pack(samples[:1], ids[:1])
        res = trainer._loss(batch, trainer._global_weight_total(batch))
        trainer.engine.backward(res.loss)
        trainer.engine.step()
    except RuntimeError as exc:
        error = str(exc)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.save({"error": error, "loss": float(res.loss) if not error else None}, out)
    trainer.engine.destroy()
    dist.destroy_process_group()


@pytest.mark.parametrize("compile_layers", [False, True])
def test_a_micro_step_queues_without_waiting_for_the_device(tmp_path, compile_layers):
    out = str(tmp_path / "sync.pt")
    args = (free_ports(1)[0], compile_layers, out)
    mp.start_processes(_run, args=args, nprocs=1, start_method="spawn")
    result = torch.load(out)
    assert result["error"] == "", f"a synchronising operation: {result['error']}"
    assert result["loss"] is not None and math.isfinite(result["loss"])
