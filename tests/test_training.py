"""End-to-end training runs: real worker processes, gloo, DeepSpeed, the real SmolLM2 target.

Sizes are tiny (a 1-layer draft, teacher-forced GSM8K answers, a handful of steps) so each run
takes seconds of compute; what is checked is the machinery: equality of disaggregated and
single-process training, exactly-once delivery, resume after SIGKILL, the Ling-3 recipe.
"""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from splitserve.train import run

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "draft.num_layers=1",
    "draft.markov_rank=16",
    "draft.block_size=4",
    "target.regenerate=false",
    "data.max_length=96",
    "data.eval_prompts=1",
    "data.sources=[{kind:gsm8k,path:null,limit:40,weight:1}]",
    "train.micro_batch=1",
    "train.num_anchors=8",
    "train.steps=4",
    "train.checkpoint_every=2",
    "train.warmup_steps=1",
    "train.decode_eval_prompts=0",
    "log.wandb_mode=disabled",
    "log.progress=false",
]


# +recipe=smol_gpu shrunk to run on CPU in seconds (its sizes, not its settings), and two steps
SMOL_GPU_SHRUNK = [
    "+recipe=smol_gpu",
    "split.device=cpu",
    "target.max_new_tokens=6",
    "target.generate_batch=2",
    "data.max_length=96",
    "data.max_prompt_tokens=64",
    "data.eval_prompts=1",
    "data.sources=[{kind:gsm8k,path:null,limit:20,weight:1}]",
    "draft.num_layers=1",
    "draft.markov_rank=16",
    "log.wandb_mode=disabled",
    "log.progress=false",
]
SMOL_GPU_STEPS = [
    "train.steps=2",
    "train.micro_batch=1",
    "train.num_anchors=8",
    "train.warmup_steps=1",
    "train.checkpoint_every=2",
    "train.eval_every=0",
]


def compose_cfg(overrides):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


def losses(run_dir: Path) -> dict[int, float]:
    """step -> loss, the last record of each step (a resumed run rewrites the steps it redoes)."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "event" not in rec:
            out[rec["step"]] = rec["loss"]
    return out


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_disaggregated_training_equals_single_process(tmp_path, backend):
    """...and the profiler (log.profile_steps, on the split run) changes nothing it measures. The
    colocated process produces as a target worker does: with the static backend, one stream of
    teacher-forced answers prefilled in groups (the same groups as the split run's target)."""
    # static: groups of 2 answers (hf keeps the default, one sample at a time)
    cfg = TINY + ([f"target.backend={backend}", "target.generate_batch=2"] * (backend == "static"))
    one = run(compose_cfg(cfg + ["split.colocated=true"]), tmp_path / "colocated")
    profiled = ["log.profile_steps=2", "log.profile_start=1"]
    two = run(compose_cfg(cfg + profiled), tmp_path / "split")
    a, b = losses(tmp_path / "colocated"), losses(tmp_path / "split")
    assert sorted(a) == [1, 2, 3, 4]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5)
    assert one["eval_loss"] == pytest.approx(two["eval_loss"], rel=1e-5)
    records = [
        json.loads(line) for line in (tmp_path / "split/metrics.jsonl").read_text().splitlines()
    ]
    assert [r["resumed_from"] for r in records if r.get("event") == "start"] == [None]
    records = [r for r in records if "event" not in r]  # the steps
    # compilation time is logged apart from the step (none on CPU: flex is not compiled here)
    assert all(0.0 <= r["compile_s"] <= r["step_s"] for r in records)
    # one step late: step 1's metrics were read after step 2 was queued; steps 2 and 4 are read
    # at once (a checkpoint follows each; an evaluation the last)
    for run_dir in ("colocated", "split"):
        lines = (tmp_path / run_dir / "metrics.jsonl").read_text().splitlines()
        steps = [json.loads(x) for x in lines]
        ahead = {r["step"]: r["queued_ahead"] for r in steps if "event" not in r}
        assert ahead == {1: True, 2: False, 3: True, 4: False}, run_dir
    prof = json.loads((tmp_path / "split/profile/trainer0.json").read_text())
    assert (prof["steps"], prof["start"]) == (2, 1) and prof["wall_ms_per_step"] > 0
    cpu_ms = {name: p["cpu_ms_per_step"] for name, p in prof["phases"].items()}
    assert set(cpu_ms) == {
        "splitserve.pack", "splitserve.forward", "splitserve.loss", "splitserve.backward",
        "splitserve.optimizer_step",
    }  # fmt: skip
    assert all(v > 0 for v in cpu_ms.values())
    shares = prof["shares"]  # each phase's work, attention's and the host's: the window's wall
    assert {"forward", "loss", "backward", "optimizer_step", "attention", "host"} <= set(shares)
    assert all(shares[k] > 0 for k in ("forward", "loss", "backward", "optimizer_step"))
    assert sum(v for k, v in shares.items() if k != "attention") == pytest.approx(1, abs=2e-3)
    assert sum(cpu_ms.values()) <= prof["wall_ms_per_step"] * 1.05
    assert prof["device_busy_ms_per_step"] == 0 and prof["top_kernels"] == []  # CPU: no device
    assert "splitserve.loss" in (tmp_path / "split/profile/trainer0.txt").read_text()
    assert not (tmp_path / "colocated/profile").exists()


@pytest.mark.parametrize("backend,window", [("hf", 3), ("static", 3), ("static", 0)])
def test_two_targets_two_trainers_consume_every_sample_exactly_once(tmp_path, backend, window):
    """With either regenerating backend (static: two sequences in flight refilled from windows of
    three samples, or from one stream over the worker's samples)."""
    run_dir = tmp_path / "r"
    run(
        compose_cfg(
            TINY
            + [
                "split.target_procs=2",
                "split.trainer_procs=2",
                "train.steps=3",
                "data.eval_prompts=2",
                "split.window=2",
                # batched regeneration (2 per generate call) on the same routes
                "target.regenerate=true",
                "target.max_new_tokens=6",
                "target.generate_batch=2",
                f"target.backend={backend}",
                f"target.produce_window={window}",
            ]
        ),
        run_dir,
    )
    stats = {p.stem: json.loads(p.read_text()) for p in (run_dir / "stats").glob("*.json")}
    produced = Counter(
        g for k, v in stats.items() if k.startswith("target") for g in v["sample_ids"]
    )
    consumed = Counter(
        g for k, v in stats.items() if k.startswith("trainer") for g in v["sample_ids"]
    )
    assert produced == consumed
    assert max(consumed.values()) == 1
    assert set(consumed) == set(range(3 * 2 * 1)) | {
        -1,
        -2,
    }  # 3 steps x 2 trainers x 1 sample + 2 eval
    assert stats["target0"]["samples"] > 0 and stats["target1"]["samples"] > 0


def _cli(overrides, run_dir):
    cmd = [
        sys.executable,
        "-m",
        "splitserve.train",
        *overrides,
        f"train.run_dir={run_dir}",
        f"hydra.run.dir={run_dir}/hydra",
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    overrides = TINY + ["train.steps=5"]
    straight = tmp_path / "straight"
    run(compose_cfg(overrides), straight)

    killed = tmp_path / "killed"
    proc = _cli(overrides, killed)
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until step 3 is logged (the checkpoint at step 2 exists)
        m = killed / "metrics.jsonl"
        if m.exists() and any(
            json.loads(x).get("step") == 3 for x in m.read_text().splitlines() if x.strip()
        ):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the run never reached step 3")
    trainer_pid = json.loads((killed / "workers.json").read_text())["trainer0"]
    os.kill(trainer_pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "trainer0 exited with code -9" in out
    # the newest complete checkpoint: step 2, or step 4 where the trainer got there between the
    # poll that saw step 3 and the kill (seen on a loaded 2-core machine)
    done = [int(c.parent.name[5:]) for c in (killed / "checkpoints").glob("step-*/COMPLETE")]
    last = max(done)
    assert 2 in done and last in (2, 4), done

    resumed = _cli(overrides, killed)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    records = [json.loads(x) for x in (killed / "metrics.jsonl").read_text().splitlines()]
    marks = [r for r in records if r.get("event") == "start"]
    # one marker a start; the steps after it are the second copy of what those steps logged
    assert [m["resumed_from"] for m in marks] == [None, last] and all(m["time"] for m in marks)
    after = [r["step"] for r in records[records.index(marks[1]) + 1 :]]
    assert after == list(range(last + 1, 6))
    # one line on the console names the checkpoint and the step; no DeepSpeed accelerator notice,
    # no empty Hydra log file
    assert f"resuming from {killed / 'checkpoints' / f'step-{last:08d}'} (step {last} of 5)" in out
    assert "Setting accelerator to CPU" not in out
    assert not list(killed.rglob("*.log"))
    a, b = losses(straight), losses(killed)
    assert sorted(b) == [1, 2, 3, 4, 5]
    for step in range(last + 1, 6):
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5)
    # it ends with a short table and the next commands, not a JSON dump; summary.json keeps
    # every key whole
    summary = json.loads((killed / "summary.json").read_text())
    assert list(summary) == [
        "run_dir", "steps", "first_loss", "last_loss", "sim_tau", "eval_sim_tau", "eval_loss",
        "eval_real_tau", "trainer_data_wait_frac", "target_credit_wait_frac", "checkpoint",
        "draft_params",
    ]  # fmt: skip
    table = out[out.index("training finished") :].splitlines()
    assert "  steps          5" in table
    assert f"  loss           {summary['first_loss']:.3f} -> {summary['last_loss']:.3f}" in table
    assert f"  checkpoint     {killed / 'checkpoints' / 'step-00000005'}" in table
    assert any(line.startswith("  waits          trainers on data ") for line in table)
    assert table[-3:] == [
        "next:",
        f"  python -m serving.evaluate --checkpoint {killed}",
        f"  python -m serving.export --checkpoint {killed} --out DIR",
    ]
    assert '"first_loss"' not in out and "random weights" not in out


def test_smol_gpu_recipe_holds_its_budget_and_runs_shrunk_on_cpu(tmp_path):
    """+recipe=smol_gpu: a 60,000-sample budget with the paper's settings (warm-up 4 %, 512
    anchors, CE 0.1 / TV 0.9 / BCE 1.0, decay 4, lengths up to 1,024, three sampling settings);
    shrunk, the same recipe trains on CPU through the static backend."""
    from splitserve.config import load_run_config

    cfg = load_run_config(compose_cfg(["+recipe=smol_gpu"]))
    t, loss = cfg.train, cfg.draft.loss
    assert t.steps * t.micro_batch * t.grad_accum == 60_000
    assert t.warmup_steps == 0.04 * t.steps and t.lr == 6e-4 and t.num_anchors == 512
    assert (loss.ce_weight, loss.distill_weight, loss.divergence) == (0.1, 0.9, "tv")
    assert (loss.confidence_weight, loss.position_decay) == (1.0, 4.0)
    assert cfg.data.max_length == 1024 and len(cfg.target.sampling) == 3
    assert (cfg.target.backend, cfg.split.device) == ("static", "cuda")
    summary = run(compose_cfg(SMOL_GPU_SHRUNK + SMOL_GPU_STEPS), tmp_path / "smol_gpu")
    assert summary["steps"] == 2


def test_ling3_recipe_runs_on_the_mini_target(tmp_path):
    from splitserve.target.config import RANDOM_WEIGHT_KINDS
    from splitserve.train import closing_table

    node = compose_cfg(
        [
            "+recipe=ling3",
            "target=ling3_mini",
            "split.trainer_procs=1",
            "train.steps=2",
            "train.grad_accum=2",
            "train.num_anchors=8",
            "train.checkpoint_every=2",
            "train.threads_per_proc=1",
            "data.max_length=80",
            "data.max_prompt_tokens=48",
            "data.eval_prompts=1",
            "data.sources=[{kind:gsm8k,path:null,limit:20,weight:1}]",
            "log.wandb_mode=disabled",
            "log.progress=false",
        ]
    )
    summary = run(node, tmp_path / "ling")
    assert summary["steps"] == 2
    draft_cfg = json.loads(Path(summary["checkpoint"], "draft", "draft_config.json").read_text())
    assert draft_cfg["target_layer_ids"] == [1, 2, 4] and draft_cfg["num_layers"] == 3
    # its tokenizer is SmolLM2's: the same reserved mask token (its pad token is eos)
    assert draft_cfg["mask_token_id"] == 16
    # what the command line prints (main: the composed target.kind): simulated tau against a
    # random target is flagged
    table = closing_table(summary, random_target=node.target.kind in RANDOM_WEIGHT_KINDS)
    assert "(the target has random weights: simulated tau means nothing here)" in table


def test_hydra_multirun_ablation_and_its_report(tmp_path, capsys):
    """One job per RoPE variant; each final checkpoint evaluated; the report tabulates them."""
    from serving.ablation_report import main as report_main
    from serving.evaluate import main as evaluate_main

    sweep = tmp_path / "sweep"
    overrides = [o for o in TINY if not o.startswith(("train.steps", "train.checkpoint_every"))]
    overrides += ["train.steps=2", "train.checkpoint_every=2"]
    cmd = [
        sys.executable,
        "-m",
        "splitserve.train",
        "-m",
        "+recipe=smol",
        "draft.rope=full,partial,interleaved",
        *overrides,
        f"hydra.sweep.dir={sweep}",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "summary.json").exists())
    assert [j.name for j in jobs] == ["0", "1", "2"]
    ropes = []
    for j in jobs:
        assert json.loads((j / "summary.json").read_text())["steps"] == 2
        ropes += [
            line.split(":")[1].strip()
            for line in (j / "config.yaml").read_text().splitlines()
            if line.startswith("  rope:")
        ]
    assert ropes == ["full", "partial", "interleaved"]
    for j in jobs[:2]:  # the third job stays unevaluated: the report must still list it
        ckpt = json.loads((j / "summary.json").read_text())["checkpoint"]
        assert (
            evaluate_main(
                [
                    "--checkpoint",
                    ckpt,
                    "--bench",
                    "gsm8k",
                    "--limit",
                    "1",
                    "--max-new-tokens",
                    "6",
                    "--no-plot",
                ]
            )
            == 0
        )
    capsys.readouterr()
    assert report_main([str(sweep), "--out", str(tmp_path / "report" / "rope")]) == 0
    table = (tmp_path / "report" / "rope.md").read_text()

    def cells(table):
        lines = [line for line in table.splitlines() if line.startswith("| ")]
        head = [c.strip() for c in lines[0].split("|")[1:-1]]
        return [
            dict(zip(head, (c.strip() for c in r.split("|")[1:-1]), strict=True)) for r in lines[1:]
        ]

    rows = cells(table)
    # job 2: no tau
    assert len(rows) == 3 and rows[1]["varied overrides"] == "draft.rope=partial"
    assert all(float(r["tau gsm8k"]) >= 1.0 for r in rows[:2]) and rows[2]["tau gsm8k"] == ""
    # every job trained: its median step time; the evaluated ones: their draft's step
    assert all(float(r["train step s"]) > 0 for r in rows)
    assert all(float(r["draft step ms"]) > 0 for r in rows[:2]) and rows[2]["draft step ms"] == ""
    # against the first job: the difference and its paired interval over the one item
    diff = float(rows[1]["tau gsm8k"]) - float(rows[0]["tau gsm8k"])
    first = rows[1]["gsm8k vs first job (95 %)"]
    assert first.startswith(f"{diff:+.2f} (") and rows[0]["gsm8k vs first job (95 %)"] == ""
    assert (tmp_path / "report" / "rope.png").read_bytes()[:4] == b"\x89PNG"
    # results copied without their weights: the same evaluations, the count from summary.json
    copied = tmp_path / "copied"
    shutil.copytree(sweep, copied, ignore=shutil.ignore_patterns("checkpoints"))
    assert report_main([str(copied / "0"), str(copied / "1"), "--out", str(tmp_path / "c")]) == 0
    bare = cells((tmp_path / "c.md").read_text())
    assert [r["tau gsm8k"] for r in bare] == [r["tau gsm8k"] for r in rows[:2]]
    # the parameter count from each run's summary.json, as the weights gave it
    assert [r["draft params"] for r in bare] == [r["draft params"] for r in rows[:2]]
    assert rows[0]["draft params"] != ""
    summary = copied / "1" / "summary.json"
    older = {k: v for k, v in json.loads(summary.read_text()).items() if k != "draft_params"}
    summary.write_text(json.dumps(older))
    assert report_main([str(copied / "1"), "--out", str(tmp_path / "n")]) == 0  # an older run's
    assert cells((tmp_path / "n.md").read_text())[0]["draft params"] == ""
    assert [r["sim tau (train eval)"] for r in bare] == [
        r["sim tau (train eval)"] for r in rows[:2]
    ]
    # results kept without weights may hold the metrics gzipped
    metrics = copied / "0" / "metrics.jsonl"
    with gzip.open(metrics.with_suffix(".jsonl.gz"), "wt") as f:
        f.write(metrics.read_text())
    metrics.unlink()
    assert report_main([str(copied / "0"), "--out", str(tmp_path / "g")]) == 0
    gz = cells((tmp_path / "g.md").read_text())
    assert gz[0]["sim tau (train eval)"] == rows[0]["sim tau (train eval)"] != ""
    assert report_main([str(copied / "2"), "--out", str(tmp_path / "d")]) == 2  # nothing to read
    assert report_main([str(tmp_path / "report"), "--out", str(tmp_path / "x")]) == 2
    assert "holds no Hydra multirun jobs" in capsys.readouterr().err


def test_launchable_under_torchrun(tmp_path):
    run_dir = tmp_path / "torchrun"
    overrides = [o for o in TINY if not o.startswith("train.steps")] + [
        "train.steps=2",
        f"train.run_dir={run_dir}",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "splitserve.train",
        *overrides,
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(losses(run_dir)) == [1, 2]
    stats = {p.stem for p in (run_dir / "stats").glob("*.json")}
    assert stats == {"target0", "trainer0"}


def test_real_tau_is_logged_next_to_the_simulated_one(tmp_path):
    summary = run(
        compose_cfg(
            TINY
            + [
                "train.steps=2",
                "train.eval_every=1",
                "train.decode_eval_prompts=1",
                "train.decode_eval_tokens=12",
            ]
        ),
        tmp_path / "r",
    )
    records = [
        json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    ]
    evals = [r for r in records if "eval_real_tau" in r]
    assert [r["step"] for r in evals] == [1, 2]
    assert all(
        r["eval_real_tau"] >= 1.0 and r["eval_real_steps"] >= 1 and "eval_sim_tau" in r
        for r in evals
    )
    assert summary["eval_real_tau"] == evals[-1]["eval_real_tau"]
