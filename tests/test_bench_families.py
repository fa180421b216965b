"""scripts/bench_families.py, shrunk to run on CPU: a mode per runtime switch, kept side by side
in one report (the before/after a GPU run records), and the floor beside each."""

import json

import pytest
from conftest import run_script, script_report


def test_modes_of_the_runtime_switches_merge_into_one_report(tmp_path):
    args = ["--tiny", "--shapes", "qwen3_8b,qwen3_30b_a3b", "--widths", "1,2", "--repeats", "2"]
    for switch in ([], ["--sdpa"], ["--before"]):
        report = script_report(tmp_path, "bench_families.py", *args, *switch)
    for family in ("qwen3", "qwen3_moe"):
        row = report["families"][family]
        assert set(row["widths_ms"]) == {"graphed", "graphed_sdpa", "graphed_before"}
        assert all(set(ms) == {"1", "2"} for ms in row["widths_ms"].values())
        assert row["step_mode"] == "graphed" and row["floor_ms"] > 0  # summarised: the default
        step = row["widths_ms"]["graphed"]["1"]
        assert row["step_over_floor"] == round(step / row["floor_ms"], 3)


@pytest.mark.slow
def test_the_cpu_identity_tests_land_in_each_familys_row(tmp_path):
    """--identical runs the fp32 comparisons with transformers and writes each family's outcome
    into its row, beside what a timed run measured there."""
    args = ["--tiny", "--shapes", "qwen3_8b", "--widths", "1", "--repeats", "2"]
    timed = script_report(tmp_path, "bench_families.py", *args)
    run_script("bench_families.py", "--out", str(tmp_path / "report.json"), "--identical")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["command"] == timed["command"]  # the timed run's record stays
    families = report["families"]
    assert set(families) == {"llama", "mistral", "qwen2", "qwen3", "gemma3", "qwen3_moe"}
    assert all(row["cpu_fp32_identical"] is True for row in families.values())
    assert families["qwen3"]["shape"] == "qwen3_8b" and families["qwen3"]["floor_ms"] > 0
    assert "cpu_fp32_identical" not in report and "--identical" in report["identical_command"]
