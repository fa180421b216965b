"""scripts/bench_trainer.py on CPU at shrunk shapes (--tiny): the real trainer (DeepSpeed, gloo)
on synthetic target states, one report row per configuration, optimizer steps of one and of two
micro-batches."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, run_script


@pytest.mark.slow
def test_the_trainer_benchmark_reports_each_accumulation_beside_the_other(tmp_path):
    out = tmp_path / "trainer.json"
    run_script("bench_trainer.py", "--out", str(out), "--tiny", "--shapes", "smollm2",
               "--seq", "128", "--blocks", "4", "--anchors", "8", "--steps", "1",
               "--grad-accums", "1,2", "--profile-optimizer", "--profile-step",
               "--whole-tiles", "on,off")  # fmt: skip
    report = json.loads(out.read_text())
    partial = report["trainer"]["smollm2_s128_b4_bf16_z1_a2_p"]  # the flex A/B's other row
    assert partial["whole_tiles"] is False and partial["samples_per_s"] > 0
    one, two = (
        report["trainer"]["smollm2_s128_b4_bf16_z1"],
        report["trainer"]["smollm2_s128_b4_bf16_z1_a2"],
    )
    assert (one["grad_accum"], two["grad_accum"]) == (1, 2) and one["whole_tiles"] is True
    assert one["flop_per_sample"] == two["flop_per_sample"] > 0  # per sample, either way
    for row in (one, two):
        assert row["samples_per_s"] > 0 and 0 < row["mfu"] < 1 and row["optimizer_kernels"]
        assert row["pipelined_samples_per_s"] > 0 and 0 < row["pipelined_mfu"] < 1
        assert all(v > 0 for v in row["phases_ms"].values())
        assert row["phases_ms"]["pack_host"] <= row["phases_ms"]["pack"]  # its host part
        shares = row["shares"]  # of one profiled step: each phase's work, attention, the host
        assert all(shares[k] > 0 for k in ("pack", "forward", "loss", "backward", "attention"))
        assert shares["optimizer_step"] > 0 and 0 <= shares["host"] < 1
        assert shares["attention"] < shares["forward"] + shares["backward"]
        assert sum(v for k, v in shares.items() if k != "attention") == pytest.approx(1, abs=2e-3)
    assert report["best"]["smollm2"]["config"] in report["trainer"]
    ops = [op["op"] for op in two["step_ops"]]  # the whole step: its matmuls, no range names
    assert len(ops) == 20 and "aten::mm" in ops
    assert not any(op.startswith(("splitserve.", "Optimizer.")) for op in ops)
    optimizer = [op["op"] for op in one["optimizer_kernels"]]  # torch's own range left out too
    assert optimizer and not any(op.startswith("Optimizer.") for op in optimizer)
    assert "--grad-accums 1,2" in report["command"]


def test_a_bad_accumulation_or_switch_is_named(tmp_path):
    script = str(ROOT / "scripts" / "bench_trainer.py")
    argv = [sys.executable, script, "--out", str(tmp_path / "x"), "--grad-accums", "1,0"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and "--grad-accums: whole numbers >= 1" in proc.stderr
    argv[-2:] = ["--whole-tiles", "maybe"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and "--whole-tiles: off, on or off,on; got 'maybe'" in proc.stderr


@pytest.mark.slow
def test_the_compiled_layers_run_in_the_real_trainer_beside_eager(tmp_path):
    """train.compile_layers through DeepSpeed (amp, ZeRO-0: the GPU setting) on CPU: a row for
    each, the compiled one keyed `_c`; a bad switch is named."""
    out = tmp_path / "trainer.json"
    run_script("bench_trainer.py", "--out", str(out), "--tiny", "--shapes", "smollm2",
               "--seq", "128", "--blocks", "4", "--anchors", "8", "--steps", "1", "--precisions",
               "amp", "--zero-stages", "0", "--compile-layers", "off,on")  # fmt: skip
    rows = json.loads(out.read_text())["trainer"]
    eager, compiled = rows["smollm2_s128_b4_amp_z0"], rows["smollm2_s128_b4_amp_z0_c"]
    assert (eager["compile_layers"], compiled["compile_layers"]) == (False, True)
    assert compiled["flop_per_sample"] == eager["flop_per_sample"] and compiled["samples_per_s"] > 0
    assert compiled["compiled_graphs"] >= 5 and "compiled_graphs" not in eager  # not eager
    script = str(ROOT / "scripts" / "bench_trainer.py")
    argv = [sys.executable, script, "--out", str(tmp_path / "x"), "--compile-layers", "yes"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and "--compile-layers: off, on or off,on; got 'yes'" in proc.stderr


def test_the_flop_count_at_the_qwen3_8b_shape_is_the_arithmetic_written_out(monkeypatch):
    """model_flops on issue 52's shape (a 5-layer DSpark over Qwen3-8B reading 3 target layers,
    2,048 tokens, 512 anchors of block 7), built on the meta device: exactly the sum written out
    here from the config's numbers, about 37 TFLOP a sample as the issue estimated."""
    from types import SimpleNamespace

    import torch

    from draft_models import DraftConfig, FrozenTargetHead, build_draft

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_trainer

    spec = bench_trainer.spec_of("qwen3_8b", tiny=False)
    cfg = DraftConfig(num_layers=5, block_size=7, markov_rank=256, num_target_layer_ids=3)
    H, V, I, h, kv, d = 4096, 151936, 12288, 32, 8, 128  # noqa: E741 (the config's names)
    with torch.device("meta"):
        draft = build_draft(cfg, spec, FrozenTargetHead(torch.empty(V, H), torch.empty(V, H)))
    C, n, s, L, m, r = 2048, 512, 7, 5, 3, 256
    anchors = torch.linspace(512, C - s - 1, n).long()  # in the answer (the last 3/4), blocks
    # inside the sequence
    batch = SimpleNamespace(
        ctx_input_ids=torch.zeros(1, C, dtype=torch.long),
        block_input_ids=torch.zeros(n, s, dtype=torch.long),
        block_anchor=anchors,
        label_mask=torch.ones(n, s, dtype=torch.bool),
    )
    B = R = n * s  # block positions; every one a supervised row here
    keys = int((anchors + s).sum()) * s  # keys the block queries see: context to anchor + block
    fuse = 2 * C * (m * H) * H
    layer = 2 * (C + B) * H * (kv * d) * 2 + 2 * B * H * (h * d) * 2 + 3 * 2 * B * H * I
    attn = 4 * keys * h * d
    head, markov = 2 * R * H * V, 2 * R * r * V
    expected = 3 * (fuse + L * layer + L * attn + head + markov)
    assert bench_trainer.model_flops(draft, batch) == expected
    assert abs(expected / 37e12 - 1) < 0.03  # 37.2 TFLOP
