"""train.precision=amp: fp32 weights stepped in place, bf16 compute under DeepSpeed's autocast.
Real DeepSpeed on a one-rank gloo group, on CPU (autocast runs there too), against the fp32 run
of the same draft, samples and seed."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import VARIANTS, random_sample, tiny_config, tiny_head, tiny_target

from splitserve.config import TrainConfig
from splitserve.launch import free_ports

pytestmark = pytest.mark.slow  # spawns a process


def _one_rank(port: int) -> list:
    """A one-rank gloo world in this spawned process; the samples both tests train on."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)
    return [random_sample(n, seed=i, assistant_from=4) for i, n in enumerate((40, 32))]


def _run(rank: int, port: int, out: str) -> None:
    from splitserve.trainer import DraftTrainer

    samples = _one_rank(port)
    result = {}
    for variant in ("dspark", "dspark_mla"):
        for precision in ("bf16", "amp"):  # bf16 runs in fp32 on CPU: the reference
            cfg = TrainConfig(
                steps=3, micro_batch=2, num_anchors=16, warmup_steps=1, precision=precision,
                zero_stage=0,
            )  # fmt: skip
            trainer = DraftTrainer(
                tiny_config(variant), tiny_target(), tiny_head(), cfg,
                device=torch.device("cpu"), dp_world=1,
            )  # fmt: skip
            before = {n: p.detach().clone() for n, p in trainer.draft.named_parameters()}
            grads = {}
            step = trainer.engine.step

            def capture_then_step(trainer=trainer, step=step, grads=grads):
                if not grads:  # the first step's gradients
                    grads.update(
                        {n: p.grad.clone() for n, p in trainer.draft.named_parameters()
                         if p.grad is not None}
                    )  # fmt: skip
                step()

            trainer.engine.step = capture_then_step
            losses = [trainer.train_step(samples, [0, 1])["loss"] for _ in range(3)]
            result[variant, precision] = {
                "losses": losses,
                "grads": grads,
                "param_dtypes": {p.dtype for p in trainer.draft.parameters()},
                "head_dtype": trainer.draft.target_head.lm_head_weight.dtype,
                "optimizer": type(trainer.engine.optimizer).__name__,
                "moved": {
                    n: bool((p.detach() != before[n]).any())
                    for n, p in trainer.draft.named_parameters() if p.requires_grad
                },
            }  # fmt: skip
            trainer.engine.destroy()
    torch.save(result, out)
    dist.destroy_process_group()


def test_amp_trains_fp32_weights_with_bf16_compute(tmp_path):
    assert "dspark_mla" in VARIANTS
    out = str(tmp_path / "precision.pt")
    mp.start_processes(_run, args=(free_ports(1)[0], out), nprocs=1, start_method="spawn")
    result = torch.load(out, weights_only=False)
    for variant in ("dspark", "dspark_mla"):
        ref, amp = result[variant, "bf16"], result[variant, "amp"]
        # the weights and their Adam state stay fp32; what the draft reads is bf16
        assert amp["param_dtypes"] == {torch.float32}
        assert amp["head_dtype"] == torch.bfloat16
        assert ref["head_dtype"] == torch.float32
        # at ZeRO-0, Adam (DeepSpeed's fused one on a GPU, torch's on CPU) steps the weights
        # themselves: no wrapper holding master copies
        assert amp["optimizer"] == ref["optimizer"] == "AdamW"
        assert all(amp["moved"].values()), [n for n, m in amp["moved"].items() if not m]
        # the same training to bf16 rounding, yet really computed in bf16
        for a, r in zip(amp["losses"], ref["losses"], strict=True):
            assert abs(a - r) <= 0.03 * abs(r), (variant, amp["losses"], ref["losses"])
        assert amp["losses"] != ref["losses"]
        assert amp["losses"][-1] < amp["losses"][0]
        for name, g in ref["grads"].items():
            a = amp["grads"][name].float()
            cos = torch.nn.functional.cosine_similarity(a.flatten(), g.flatten(), dim=0)
            assert cos > 0.97, (variant, name, float(cos))


def _run_clip(rank: int, port: int, out: str) -> None:
    from splitserve.trainer import DraftTrainer

    samples = _one_rank(port)
    result = {}
    for precision in ("bf16", "amp"):  # DeepSpeed clips at bf16; the trainer itself at amp
        cfg = TrainConfig(
            steps=2, micro_batch=1, grad_accum=2, num_anchors=16, warmup_steps=1,
            precision=precision, zero_stage=0, grad_clip=1e-3,
        )  # fmt: skip
        trainer = DraftTrainer(
            tiny_config("dspark"), tiny_target(), tiny_head(), cfg,
            device=torch.device("cpu"), dp_world=1,
        )  # fmt: skip
        seen, step = {}, trainer.engine.optimizer.step

        def capture(*args, trainer=trainer, step=step, seen=seen, **kwargs):
            seen.update({n: p.grad.detach().clone() for n, p in trainer.draft.named_parameters()
                         if p.grad is not None})  # fmt: skip
            return step(*args, **kwargs)

        trainer.engine.optimizer.step = capture
        trainer.train_step(samples, [0, 1])
        result[precision] = {"grads": seen, "ds_clip": trainer.engine.gradient_clipping()}
        trainer.engine.destroy()
    torch.save(result, out)
    dist.destroy_process_group()


def test_amp_at_zero_0_clips_in_the_step_as_deepspeed_would(tmp_path):
    """amp at ZeRO-0 clips with torch's clip_grad_norm_ before DeepSpeed's step (DeepSpeed's
    own clipping waits for the device): the optimizer sees gradients of the clipped norm,
    pointing where DeepSpeed's clipped ones (bf16, fp32 on CPU) point."""
    out = str(tmp_path / "clip.pt")
    mp.start_processes(_run_clip, args=(free_ports(1)[0], out), nprocs=1, start_method="spawn")
    result = torch.load(out, weights_only=False)
    ref, amp = result["bf16"], result["amp"]
    assert ref["ds_clip"] == 1e-3 and amp["ds_clip"] == 0.0  # who clips
    for r in (ref, amp):
        norm = torch.linalg.vector_norm(
            torch.stack([g.float().norm() for g in r["grads"].values()])
        )
        assert float(norm) == pytest.approx(1e-3, rel=1e-3)  # clipped from far above
    a = torch.cat([amp["grads"][n].float().flatten() for n in sorted(ref["grads"])])
    g = torch.cat([ref["grads"][n].flatten() for n in sorted(ref["grads"])])
    assert torch.nn.functional.cosine_similarity(a, g, dim=0) > 0.97
