"""scripts/bench_render.py on the real SmolLM2 tokenizer: it runs, records its command and reports
every figure (the rendering costs per sample, whole and cut, and the loop inline and ahead), on
GSM8K and on ShareGPT's multi-turn conversations."""

import pytest
from conftest import script_report

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2


def test_the_render_benchmark_reports_its_figures(tmp_path):
    args = ["--samples", "6", "--wait-ms", "1", "--depth", "2"]
    report = script_report(tmp_path, "bench_render.py", *args)
    assert report["samples"] == 6 and report["tokens_per_sample"] > 50
    assert report["cut_equals_whole_cut"] == 6
    assert report["render_with_loss_mask_ms"] > 0 and report["one_render_ms"] > 0
    assert report["prompt_ids_ms"] > 0
    assert report["loop_inline_ms"] >= 1.0 and report["loop_ahead_ms"] >= 1.0  # the waits


def test_the_render_benchmark_cuts_sharegpt_conversations(tmp_path):
    args = ["--samples", "4", "--wait-ms", "0", "--depth", "2", "--source", "sharegpt"]
    report = script_report(tmp_path, "bench_render.py", *args, "--max-length", "64")
    assert report["source"] == "sharegpt" and report["max_length"] == 64
    assert report["tokens_per_sample_cut"] <= 64 < report["tokens_per_sample"]
    assert report["cut_equals_whole_cut"] == 4  # conversations whose cut render is the whole's
    assert report["render_with_loss_mask_cut_ms"] > 0 and report["render_with_loss_mask_ms"] > 0
