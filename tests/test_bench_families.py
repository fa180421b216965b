"""scripts/bench_families.py, shrunk to run on CPU: a mode per runtime switch, kept side by side
in one report (the before/after a GPU run records), and the floor beside each."""

from conftest import script_report


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
