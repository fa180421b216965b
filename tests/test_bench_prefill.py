"""scripts/bench_prefill.py on the real SmolLM2 (CPU, fp32, tiny groups): it runs, records its
command, times both prefill paths, lists what each ran (the profiler's top operators), runs the
worker's loop three ways in rotated rounds, and finds the two paths' states equal (fp32: the
same arithmetic up to rounding); too few samples for a timed group are refused by name."""

import pytest
from conftest import run_script, script_report


@pytest.mark.slow
def test_the_prefill_benchmark_reports_both_paths(tmp_path):
    args = ["--samples", "6", "--group", "3", "--max-length", "24", "--repeats", "2"]
    report = script_report(tmp_path, "bench_prefill.py", *args)
    assert report["samples"] == 6 and report["groups_timed"] == 1
    assert report["padded_tokens_per_group"] == 3 * 24  # every answer is longer than 24 tokens
    assert report["prefill_fresh_ms"] > 0 and report["prefill_masked_ms"] > 0
    assert report["prefill_floor_ms"] > 0
    assert report["states_max_rel_difference"] < 1e-5
    for key in ("fresh_ahead", "fresh_inline", "masked_ahead"):
        assert report[f"produce_{key}_samples_per_s"] > 0
    # every loop once a round, the order rotated from round to round
    order = [(run["round"], run["loop"]) for run in report["produce_runs"]]
    assert order == [
        (0, "masked"), (0, "fresh"), (0, "inline"), (1, "fresh"), (1, "inline"), (1, "masked"),
    ]  # fmt: skip
    # what each path ran, from the profiler (on CPU: operators), the attention among them
    for path in ("fresh", "masked"):
        kernels = report["top_kernels"][path]
        assert 0 < len(kernels) <= 8 and all(k["self_us"] >= 0 and k["calls"] > 0 for k in kernels)
    names = " ".join(k["name"] for k in report["top_kernels"]["masked"])
    assert "aten::" in names


def test_too_few_samples_for_a_timed_group_are_refused(tmp_path):
    with pytest.raises(AssertionError, match="--samples 5 needs to be at least 2 x --group"):
        run_script("bench_prefill.py", "--out", str(tmp_path / "x.json"), "--samples", "5",
                   "--group", "3")  # fmt: skip
