"""scripts/bench_sampler.py on the real SmolLM2 (CPU: its logits, the PyTorch sampler timed
eagerly; the Triton sampler and its paths need a CUDA device)."""

import subprocess
import sys

import pytest
from conftest import ROOT, script_report

pytestmark = pytest.mark.slow  # decodes with the real SmolLM2


def test_the_sampler_benchmark_times_real_answer_logits(tmp_path):
    args = ["--rows", "6", "--prompts", "3", "--steps", "2", "--repeats", "2", "--device", "cpu"]
    report = script_report(tmp_path, "bench_sampler.py", *args)
    assert report["rows"] == 6 and report["vocab"] == 49152 and report["dtype"] == "float32"
    assert report["read_logits_once_ms"] > 0 and report["copy_bandwidth_GBps"] > 0
    cand = report["candidates"]  # rows 1, 3, 5: temperature 1 and top_p 0.95
    assert cand["rows"] == 3 and 1 <= cand["median"] <= cand["max"] <= 49152
    assert cand["capacity"] == 16384 and 0 <= cand["over_capacity"] <= 1
    got = [(r["sampler"], r["nucleus"]) for r in report["results"]]
    assert got == [("torch", False), ("torch", True)] and all(
        r["ms"] > 0 for r in report["results"]
    )


def test_a_top_p_outside_0_1_is_refused(tmp_path):
    script = str(ROOT / "scripts" / "bench_sampler.py")
    argv = [sys.executable, script, "--out", str(tmp_path / "r.json"), "--top-p", "1.5"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and "--top-p 1.5: a number in (0, 1]" in proc.stderr
    assert not (tmp_path / "r.json").exists()
