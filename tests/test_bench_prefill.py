"""scripts/bench_prefill.py on the real SmolLM2 (CPU, fp32, tiny groups): it runs, records its
command, times both prefill paths and the worker's loop three ways, and finds the two paths'
states equal (fp32: the same arithmetic up to rounding); too few samples for a timed group are
refused by name."""

import pytest
from conftest import run_script, script_report


def test_the_prefill_benchmark_reports_both_paths(tmp_path):
    args = ["--samples", "6", "--group", "3", "--max-length", "24"]
    report = script_report(tmp_path, "bench_prefill.py", *args)
    assert report["samples"] == 6 and report["groups_timed"] == 1
    assert report["padded_tokens_per_group"] == 3 * 24  # every answer is longer than 24 tokens
    assert report["prefill_fresh_ms"] > 0 and report["prefill_masked_ms"] > 0
    assert report["prefill_floor_ms"] > 0
    assert report["states_max_rel_difference"] < 1e-5
    for key in ("fresh_ahead", "fresh_inline", "masked_ahead"):
        assert report[f"produce_{key}_samples_per_s"] > 0


def test_too_few_samples_for_a_timed_group_are_refused(tmp_path):
    with pytest.raises(AssertionError, match="--samples 5 needs to be at least 2 x --group"):
        run_script("bench_prefill.py", "--out", str(tmp_path / "x.json"), "--samples", "5",
                   "--group", "3")  # fmt: skip
