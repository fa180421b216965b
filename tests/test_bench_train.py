"""scripts/bench_train.py --splits: real jobs (tiny draft, teacher-forced SmolLM2, gloo) for the
splits that fit, a 1+1 proxy for the one that does not, and a JSON report of both."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_training import TINY

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [sys.executable, str(ROOT / "scripts" / "bench_train.py")]


def test_split_comparison_measures_what_fits_and_projects_the_rest(tmp_path):
    out = tmp_path / "splits.json"
    overrides = [o for o in TINY if not o.startswith(("train.steps", "train.micro_batch"))] + [
        "train.steps=4"
    ]
    proc = subprocess.run(
        [
            *SCRIPT,
            "--out",
            str(out),
            "--splits",
            "1+1,1+2",
            "--global-batch",
            "2",
            "--max-procs",
            "2",
            *overrides,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert not (tmp_path / "splits.json.partial").exists()
    measured, projected = report["splits"]
    assert (measured["split"], measured["mode"], measured["micro_batch"]) == ("1+1", "measured", 2)
    assert (projected["split"], projected["mode"], projected["micro_batch"]) == (
        "1+2",
        "projected from 1+1",
        1,
    )
    for row in report["splits"]:
        job, p = row["job"], row["projected"]
        assert job["steps"] == 4 and job["trainer"]["samples"] == 4 * row["micro_batch"]
        first = job["first_steps"]  # the early-step figures a stall bound is checked against
        assert first["steps"] == 4 and first["max_step_s"] >= first["median_step_s"] > 0
        assert first["compile_s"] >= 0 and len(job["per_step"]) == 4
        assert (
            job["steady"]["target_samples_per_s_per_worker"] > 0 and job["steady"]["compute_s"] > 0
        )
        assert p["step_s"] == max(p["supply_s_per_step"], p["trainer_compute_s_per_step"]) > 0
        # G/(T rate)
        assert p["supply_s_per_step"] * report["target_samples_per_s_per_worker"] == pytest.approx(
            2.0
        )
    assert 0.0 <= measured["measured"]["trainer_data_wait_frac"] <= 1.0
    assert 0.0 <= measured["measured"]["target_idle_frac"] <= 1.0
    assert projected.get("measured") is None
    rates = {
        r["split"]: (r.get("measured") or r["projected"])["samples_per_s"] for r in report["splits"]
    }
    assert report["best"]["split"] == max(rates, key=rates.get)


def test_bad_split_arguments_are_refused_before_any_job(tmp_path):
    out = tmp_path / "x.json"
    for args, message in (
        (["--splits", "4x4"], "not TARGETS+TRAINERS"),
        (["--splits", "1+3", "--global-batch", "4"], "not divisible by the 3 trainers"),
        (["--splits", "1+1", "--keep-run", "r"], "--keep-run keeps one job's run directory"),
    ):
        proc = subprocess.run(
            [*SCRIPT, "--out", str(out), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert not out.exists()
