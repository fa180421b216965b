"""scripts/bench_attention.py on CPU: every variant it times computes the runtime's masked GQA
attention (a variant that computed something else would make its timing meaningless)."""

from conftest import script_report


def test_every_timed_attention_variant_equals_the_reference(tmp_path):
    args = ["--extents", "32,64", "--widths", "1,5", "--layers", "2"]
    args += ["--heads", "6", "--kv-heads", "2", "--head-dim", "16"]
    report = script_report(tmp_path, "bench_attention.py", *args)  # its exact command checked
    rows = report["rows"]
    timed = [r for r in rows if "error" not in r]
    # on CPU SDPA has only its math kernel: the forced fused backends refuse, and say so
    assert {r["variant"] for r in rows if "error" in r} == {"sdpa_cudnn", "sdpa_efficient"}
    assert {r["variant"] for r in timed} == {"sdpa", "sdpa_math", "sdpa_bias", "folded"}
    assert len(timed) == 4 * 4  # every variant at every (extent, width)
    for r in timed:
        assert r["max_abs_err"] < 1e-5, r
        assert r["us_per_call"] > 0
