"""scripts/bench_regen_shapes.py, shrunk to run on CPU: every answer runs to its budget (random
weights, no end token), and the floors count what a step must read."""

from conftest import script_report


def test_regeneration_at_a_shape_reports_its_rate_beside_its_floors(tmp_path):
    args = ["--tiny", "--shapes", "qwen3_8b", "--slots", "4", "--prompt", "16", "--new", "8"]
    report = script_report(
        tmp_path,
        "bench_regen_shapes.py",
        *args,
        "--samples",
        "6",
        "--before",
        "--prefill-len",
        "12",
    )
    row = report["regeneration"]["qwen3_8b"]
    assert row["samples"] == 6 and row["new_tokens"] == 6 * 8  # no end token: whole budgets
    assert row["prefills"] >= 2 and row["decode_steps"] >= 2 * 8
    # prompts of 8..16 tokens, 8 new: a decode step's mean context lies in 8..24
    assert 8 < row["mean_context"] < 24
    assert row["padded_floor_new_tokens_per_s"] < row["floor_new_tokens_per_s"]
    assert row["new_tokens_per_s"] > 0
    assert row["share_of_floor"] == round(
        row["new_tokens_per_s"] / row["floor_new_tokens_per_s"], 3
    )
    # --before: the same run on the runtime as before 2026-12-05
    assert row["before_new_tokens_per_s"] > 0 and row["before_ms_per_step_incl_prefills"] > 0
    # --prefill-len: teacher forcing's rate, groups of 8 sequences of 12 tokens
    assert row["prefill_len"] == 12 and row["prefill_group"] == 8
    assert row["prefill_samples_per_s"] > 0 and row["prefill_tflops"] > 0
