"""scripts/node_projection.py: the split of a node from per-GPU rates, checked by hand."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_split_maximises_the_slower_side_and_keeps_other_keys(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "trainer": {"qwen3_8b": {"samples_per_s": 8.0}},
        "regeneration": {"qwen3_8b": {"samples_per_s": 2.0, "prefill_samples_per_s": 20.0}},
        "other": 1,
    }))  # fmt: skip
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    subprocess.run(cmd, check=True, capture_output=True)
    out = json.loads(results.read_text())
    assert out["other"] == 1
    p = out["node_projection"]["qwen3_8b"]
    # regenerating: min(2k, 8(8-k)) peaks at k=6 (12 against 16): the targets bound it
    assert p["regenerate"]["split"] == {"target_gpus": 6, "trainer_gpus": 2}
    assert p["regenerate"]["samples_per_s"] == 12.0 and p["regenerate"]["bound_by"] == "target"
    # teacher forcing: min(20k, 8(8-k)) is 40 at k=2 and at k=3: the fewer target GPUs
    assert p["teacher_forcing"]["split"] == {"target_gpus": 2, "trainer_gpus": 6}
    assert p["teacher_forcing"]["samples_per_s"] == 40.0
    # the headline: regeneration, what a run does by default
    assert (p["mode"], p["samples_per_s"]) == ("regenerate", 12.0)
    assert p["split"] == p["regenerate"]["split"]
    assert out["node_projection_command"].startswith("python scripts/node_projection.py")


def test_missing_rates_are_named(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"trainer": {"qwen3_8b": {"samples_per_s": 8.0}}}))
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode != 0 and "regeneration.qwen3_8b" in run.stderr


def test_a_bench_trainer_report_is_read_through_its_best_config(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "trainer": {"qwen3_8b_s2048_b7_amp_z0": {"samples_per_s": 8.0}},
        "best": {"qwen3_8b": {"samples_per_s": 8.0, "config": "qwen3_8b_s2048_b7_amp_z0"}},
        "regeneration": {"qwen3_8b": {"samples_per_s": 2.0}},
    }))  # fmt: skip
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    subprocess.run(cmd, check=True, capture_output=True)
    out = json.loads(results.read_text())["node_projection"]["qwen3_8b"]
    assert out["trainer_samples_per_s_per_gpu"] == 8.0 and "teacher_forcing" not in out
    assert out["regenerate"]["samples_per_s"] == 12.0


def test_rates_from_other_records_are_written_under_their_own_key(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "trainer": {"qwen3_8b": {"samples_per_s": 1.0}},
        "run7": {"configs": {"q": {"samples_per_s": 9.0}}},
        "regen_h100": {"samples_per_s": 14.0},
    }))  # fmt: skip
    script = str(ROOT / "scripts/node_projection.py")
    rates = ["--trainer-from", "run7.configs.q", "--supply-from", "regen_h100"]
    cmd = [sys.executable, script, "--results", str(results), *rates, "--key", "np_h100"]
    subprocess.run(cmd, check=True, capture_output=True)
    out = json.loads(results.read_text())
    assert "node_projection" not in out and "--key np_h100" in out["np_h100_command"]
    p = out["np_h100"]["qwen3_8b"]
    # min(14k, 9(8-k)): k=3 gives min(42, 45) = 42, k=4 min(56, 36) = 36
    assert p["trainer_samples_per_s_per_gpu"] == 9.0
    assert p["regenerate"]["split"] == {"target_gpus": 3, "trainer_gpus": 5}
    assert p["regenerate"]["samples_per_s"] == 42.0 and p["regenerate"]["bound_by"] == "target"
    bad = subprocess.run(cmd[:-4] + ["--supply-from", "nowhere.x"], capture_output=True, text=True)
    assert bad.returncode != 0 and "'nowhere.x'" in bad.stderr
    # an assumption of these rates rides in each row and in the command that rewrites it
    subprocess.run(cmd + ["--assume", "two kinds of GPU"], check=True, capture_output=True)
    out = json.loads(results.read_text())
    assert out["np_h100"]["qwen3_8b"]["assumes"].endswith("; two kinds of GPU")
    assert "--assume 'two kinds of GPU'" in out["np_h100_command"]
    empty = subprocess.run(cmd + ["--assume", " "], capture_output=True, text=True)
    assert empty.returncode != 0 and "--assume" in empty.stderr
    assert json.loads(results.read_text()) == out  # nothing written by the refused call


def test_teacher_forcing_is_the_headline_when_only_it_was_measured(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "trainer": {"qwen3_8b": {"samples_per_s": 8.0}},
        "regeneration": {"qwen3_8b": {"prefill_samples_per_s": 20.0}},
    }))  # fmt: skip
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    subprocess.run(cmd, check=True, capture_output=True)
    p = json.loads(results.read_text())["node_projection"]["qwen3_8b"]
    assert "regenerate" not in p and p["mode"] == "teacher_forcing"
    assert p["samples_per_s"] == 40.0 and p["split"] == {"target_gpus": 2, "trainer_gpus": 6}


def test_the_trainer_rate_is_the_pipelined_one_where_measured(tmp_path):
    """The training loop queues a step ahead: bench_trainer's pipelined rate is the loop's."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from node_projection import project

    rates = {"regeneration": {"qwen3_8b": {"prefill_samples_per_s": 17.0}}}
    sync_only = {"trainer": {"qwen3_8b": {"samples_per_s": 9.5}}, **rates}
    both = {"trainer": {"qwen3_8b": {"samples_per_s": 9.5, "pipelined_samples_per_s": 10.5}}}
    p = project({**both, **rates}, 8, ["qwen3_8b"])["qwen3_8b"]
    # min(17k, 10.5(8-k)): k=3 gives min(51, 52.5) = 51
    assert (p["trainer_samples_per_s_per_gpu"], p["trainer_rate"]) == (
        10.5,
        "pipelined_samples_per_s",
    )
    assert p["samples_per_s"] == 51.0 and p["split"] == {"target_gpus": 3, "trainer_gpus": 5}
    p = project(sync_only, 8, ["qwen3_8b"])["qwen3_8b"]
    assert (p["trainer_samples_per_s_per_gpu"], p["trainer_rate"]) == (9.5, "samples_per_s")
    assert p["samples_per_s"] == 47.5  # k=3: min(51, 47.5)


def test_a_results_file_that_is_not_json_is_named(tmp_path):
    results = tmp_path / "results.json"
    results.write_text("{not json")
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode != 0 and f"--results {results}: not a readable JSON" in run.stderr
    assert results.read_text() == "{not json"  # left as it was


def test_the_goal_gives_the_rate_each_side_would_need(tmp_path):
    """--goal 50.1 on hand-checked rates: teacher forcing at 17.08 a target GPU supplies 50.1 with
    3 of 8 (2 give 34.16), so 5 trainers need 50.1 / 5 = 10.02 each; a trainer at 9.5 trains it
    with 6 (5 give 47.5), so 2 targets need 25.05 each. Regenerating at 5.0 needs 11 target GPUs
    (more than the node has): that side is left out."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps({
        "trainer": {"qwen3_8b": {"samples_per_s": 9.5}},
        "regeneration": {"qwen3_8b": {"samples_per_s": 5.0, "prefill_samples_per_s": 17.08}},
    }))  # fmt: skip
    cmd = [sys.executable, str(ROOT / "scripts/node_projection.py"), "--results", str(results)]
    subprocess.run([*cmd, "--goal", "50.1"], check=True, capture_output=True)
    p = json.loads(results.read_text())["node_projection"]["qwen3_8b"]
    tf = p["teacher_forcing"]["to_reach"]
    assert tf["samples_per_s"] == 50.1 and tf["met"] is False  # 3 + 5 give 47.5
    assert tf["with_these_targets"] == {
        "split": {"target_gpus": 3, "trainer_gpus": 5},
        "trainer_samples_per_s_per_gpu": 10.02,
    }
    assert tf["with_this_trainer"] == {
        "split": {"target_gpus": 2, "trainer_gpus": 6},
        "target_samples_per_s_per_gpu": 25.05,
    }
    regen = p["regenerate"]["to_reach"]
    assert "with_these_targets" not in regen and regen["met"] is False
    assert regen["with_this_trainer"]["target_samples_per_s_per_gpu"] == 25.05
    # a goal the rates already reach, and one that is not a rate
    subprocess.run([*cmd, "--goal", "40"], check=True, capture_output=True)
    p = json.loads(results.read_text())["node_projection"]["qwen3_8b"]
    assert p["teacher_forcing"]["to_reach"]["met"] is True  # 47.5 >= 40
    run = subprocess.run([*cmd, "--goal", "0"], capture_output=True, text=True)
    assert run.returncode == 2 and "--goal 0.0: a node rate to reach must be > 0" in run.stderr
