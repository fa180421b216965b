"""scripts/bench_render.py on the real SmolLM2 tokenizer: it runs, records its command and reports
every figure (the rendering costs per sample and the loop inline and ahead)."""

import json

from conftest import run_script


def test_the_render_benchmark_reports_its_figures(tmp_path):
    out = tmp_path / "render.json"
    args = ["--out", str(out), "--samples", "6", "--wait-ms", "1", "--depth", "2"]
    run_script("bench_render.py", *args)
    report = json.loads(out.read_text())
    assert report["command"] == "python scripts/bench_render.py " + " ".join(args)
    assert report["samples"] == 6 and report["tokens_per_sample"] > 50
    assert report["render_with_loss_mask_ms"] > 0 and report["one_render_ms"] > 0
    assert report["prompt_ids_ms"] > 0
    assert report["loop_inline_ms"] >= 1.0 and report["loop_ahead_ms"] >= 1.0  # the waits
