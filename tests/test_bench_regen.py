"""scripts/bench_regen.py on the real SmolLM2 (CPU, eager): the static backend's one stream over
every sample (target.produce_window=0, its default) is benchmarked whole. Before, the script cut
the samples into windows of `backend.window` and a window of 0 stopped it at once (seen on an
H200)."""

import subprocess
import sys

import pytest
from conftest import ROOT, script_report

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2


def test_the_static_backend_regenerates_every_sample_in_one_stream(tmp_path):
    args = ["--backends", "static", "--samples", "3", "--slots", "2"]
    args += ["--max-new-tokens", "4", "--max-length", "256", "--sharegpt", "0", "--device", "cpu"]
    args += ["--profile"]
    report = script_report(tmp_path, "bench_regen.py", *args)  # its exact command checked
    (row,) = report["rows"]
    assert row["backend"] == "static" and row["window"] == 3  # one stream over the 3 samples
    assert 3 <= row["new_tokens"] <= 12  # up to 4 new tokens each
    assert row["decode_steps"] >= 2 and row["samples_per_s"] > 0
    # --profile: the step alone, its operators, and a floor that counts the cache it reads
    assert row["replay_ms"] > 0 and row["kernels"]["per_replay"] >= 0
    assert 0 < row["profiled_context"] < 256  # every row live there while profiled
    per_position = 30 * 2 * 2 * 3 * 64 * 4  # layers, k and v, slots, kv heads, dim, fp32 bytes
    positions, rest = divmod(row["kv_bytes_per_step"], per_position)
    assert rest == 0 and 256 <= positions <= 260  # the cache's length: max_length and a margin
    assert row["step_floor_with_kv_ms"] > report["step_floor_ms"]


def test_the_two_regeneration_loops_alternate_in_one_process_with_equal_answers(tmp_path):
    """--backends hf,static --loops late,sync --rounds 2: the static backend's loops alternate
    (the order reversed in the second round) beside hf, a median per backend and loop, hf's
    greedy answers compared with the static backend's, and both loops' answers identical,
    greedy and sampled (the same schedule and counter-based draws)."""
    args = ["--backends", "hf,static", "--samples", "3", "--slots", "2", "--loops", "late,sync"]
    args += ["--rounds", "2", "--max-new-tokens", "4", "--max-length", "256", "--sharegpt", "0"]
    report = script_report(tmp_path, "bench_regen.py", *args, "--device", "cpu")
    assert [(r["backend"], r.get("loop"), r["round"]) for r in report["rows"]] == [
        ("hf", None, 0), ("static", "late", 0), ("static", "sync", 0),
        ("hf", None, 1), ("static", "sync", 1), ("static", "late", 1),
    ]  # fmt: skip
    assert sorted(report["median_new_tokens_per_s"]) == ["hf", "static/late", "static/sync"]
    assert report["greedy_identical"] == "2/2 (hf vs static/late)"  # fp32: equal
    assert report["loops_identical"] == "3/3 (static/late vs static/sync, every sample)"


@pytest.mark.parametrize(
    "bad,said",
    [
        (["--loops", "late,fast"], "--loops: unknown fast; known: late, sync"),
        (["--loops", "late,late"], "--loops: each loop once"),
        (["--loops", "late,sync", "--sync-regen"], "--loops conflicts with --sync-regen"),
        (["--backends", "hf,hf"], "--backends: each backend once (--rounds repeats them)"),
        (["--loops", "late,sync", "--backends", "hf"], "add it to --backends"),
        (["--layer-ids", "1,x"], "--layer-ids '1,x': comma-separated layer numbers"),
        (["--layer-ids", "1,30"], "--layer-ids [1, 30]: smollm2 has layers 0..29"),
        (
            ["--prefill-tokens", "-3"],
            "--prefill-tokens: -3 is out of range: allowed an integer >= 0",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(tmp_path, bad, said):
    script = str(ROOT / "scripts" / "bench_regen.py")
    argv = [sys.executable, script, "--out", str(tmp_path / "r.json"), *bad, "--device", "cpu"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr[-500:]
    assert not (tmp_path / "r.json").exists()


def test_gemma3_270m_regenerates_in_the_benchmark(tmp_path, gemma3_site):
    """--target gemma3_270m: the second real target (262k vocabulary, 18 layers) through the
    static backend, its capture layers chosen by the draft's rule."""
    from splitserve.target.embedded import ensure_gemma3_270m

    ensure_gemma3_270m()  # converted here, where the fixture put its packages on the path
    args = ["--backends", "static", "--samples", "2", "--slots", "2", "--target", "gemma3_270m"]
    args += ["--max-new-tokens", "3", "--max-length", "256", "--sharegpt", "0", "--device", "cpu"]
    report = script_report(tmp_path, "bench_regen.py", *args)
    (row,) = report["rows"]
    assert report["args"]["layer_ids"] == [1, 8, 15] and report["args"]["target"] == "gemma3_270m"
    assert 2 <= row["new_tokens"] <= 6 and row["decode_steps"] >= 2
    assert 1.0e9 < report["weight_bytes"] < 1.15e9  # ~268M fp32 parameters, the tied head once
