"""serving.intervals: the paired comparison of two drafts' report folders, and the one-run
interval, on real report files."""

import json
from pathlib import Path

import pytest

from serving.intervals import (
    bootstrap,
    compare_folders,
    compare_parts,
    comparison_lines,
    folder_parts,
    paired_bootstrap,
    paired_bootstrap_runs,
    ratio_of_ratios,
    speedup_interval,
    timed_comparison,
    timed_lines,
)

# four batch-1 timed runs on one H200 (serving.evaluate on GSM8K with target-only decoding, at
# 110,000 samples) and the comparison computed from them when they were made
TIMED = Path(__file__).resolve().parent / "data" / "timed_runs"


def report(folder, bench, per_item):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{bench}.json").write_text(json.dumps({"tau": 0.0, "per_item": per_item}))


def test_compare_parts_gives_each_bench_its_tau_and_the_paired_intervals(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    # a emits 3 tokens a step on every item, b 2 on even items and 3 on odd ones
    report(a, "gsm8k", [[i, 30, 10] for i in range(40)])
    report(b, "gsm8k", [[i, 20 if i % 2 == 0 else 30, 10] for i in range(40)])
    report(a, "mtbench", [[i, 40, 10] for i in range(20)])
    report(b, "mtbench", [[i, 40, 10] for i in range(20)])
    out = compare_parts(
        folder_parts(a, ["gsm8k", "mtbench"]), folder_parts(b, ["gsm8k", "mtbench"])
    )
    assert out["this"] == {"gsm8k": 3.0, "mtbench": 4.0}
    assert out["other"] == {"gsm8k": 2.5, "mtbench": 4.0}
    assert out["macro_ratio"] == pytest.approx(3.5 / 3.25)
    lo, hi = out["macro_ratio_ci95"]
    assert 1.0 < lo <= out["macro_ratio"] <= hi  # a never loses an item: settled above 1
    assert out["gsm8k_diff"] == 0.5 and out["mtbench_diff"] == 0.0
    assert out["mtbench_diff_ci95"] == [0.0, 0.0]
    assert compare_parts(folder_parts(a, ["gsm8k"]), folder_parts(b, ["gsm8k"]), "p19")["p19"]


def test_the_comparison_is_paired_over_items():
    """b emits 5 tokens fewer than a on every item, whose own taus spread from 1 to 7: drawn
    together the difference never moves; drawn apart it would spread over the items' range."""
    a = {"gsm8k": {i: ((10, 70)[i % 2], 10) for i in range(40)}}
    b = {"gsm8k": {i: (e - 5, n) for i, (e, n) in a["gsm8k"].items()}}
    out = compare_parts(a, b)
    assert out["gsm8k_diff"] == pytest.approx(0.5)
    assert out["gsm8k_diff_ci95"] == [0.5, 0.5]


def test_a_report_without_per_item_parts_is_named(tmp_path):
    (tmp_path / "gsm8k.json").write_text(json.dumps({"tau": 2.0}))
    with pytest.raises(ValueError, match="gsm8k.json: no per_item"):
        folder_parts(tmp_path, ["gsm8k"])
    (tmp_path / "gsm8k.json").write_text(json.dumps({"tau": 2.0, "per_item": []}))
    with pytest.raises(ValueError, match="gsm8k.json: no per_item"):
        folder_parts(tmp_path, ["gsm8k"])


def test_bootstrap_of_one_run_scales_with_its_tau_and_needs_items():
    parts = {"gsm8k": {i: (20 if i % 2 else 40, 10) for i in range(50)}}  # tau 3 over the set
    lo, hi = bootstrap(parts, lambda t: 2.0 * t / 3.0)
    assert lo < 2.0 < hi and hi - lo > 0.1
    assert bootstrap({"gsm8k": {}}, lambda t: t) is None and bootstrap({}, lambda t: t) is None
    # a timed run's speedup (2.0 at its tau of 3) drawn with its items: the same interval
    assert speedup_interval(parts, 2.0) == [lo, hi]
    assert speedup_interval({"gsm8k": {}}, 2.0) is None


def test_comparison_lines_print_the_macro_ratio_then_each_bench_with_its_interval(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    report(a, "gsm8k", [[i, 30, 10] for i in range(40)])
    report(b, "gsm8k", [[i, 20, 10] for i in range(40)])
    c = compare_parts(folder_parts(a, ["gsm8k"]), folder_parts(b, ["gsm8k"]), "new")
    assert comparison_lines({"vs_old": c}, "new") == [
        "vs_old: macro x1.500 (1.500-1.500)",
        "  gsm8k: 3.000 vs 2.000, +1.000 (+1.000, +1.000)",
    ]


def test_runs_drawn_together_give_a_ratio_of_ratios_and_must_share_their_items():
    """Four runs on one set: a / b at one budget over c / d at another. Each later run emits a
    fixed share of an earlier one's tokens item by item, so drawn together the ratio of ratios
    never moves, though the items' own taus spread from 1 to 7."""
    a = {"gsm8k": {i: ((10, 70)[i % 2], 10) for i in range(40)}}

    def scaled(k):
        return {"gsm8k": {i: (e * k, n) for i, (e, n) in a["gsm8k"].items()}}

    b, c, d = scaled(0.8), scaled(0.5), scaled(0.4)  # a / b = c / d = 1.25
    ci = paired_bootstrap_runs([a, b, c, d], lambda w, x, y, z: (w / x) / (y / z))
    assert ci == [1.0, 1.0]
    swapped = paired_bootstrap_runs([a, b, d, c], lambda w, x, y, z: (w / x) / (y / z))
    assert swapped == pytest.approx([1.5625, 1.5625], abs=1e-3)  # the order counts
    assert paired_bootstrap(a, b, lambda x, y: x / y) == [1.25, 1.25]
    fewer = {"gsm8k": {i: v for i, v in a["gsm8k"].items() if i < 39}}
    assert paired_bootstrap_runs([a, b, fewer], lambda x, y, z: x) is None


def test_compare_folders_pairs_runs_by_temperature_and_a_ratio_of_ratios_prints_one_line(
    tmp_path,
):
    """What the passes' compare.py run: each pair of runs at each temperature from their report
    folders, and one draft's lead at two budgets as a ratio of ratios, printed one line each."""
    folders = {}
    for run, per_step in (("new", 30), ("old", 20), ("new_small", 24), ("old_small", 20)):
        for t in ("t1", "t0"):
            folders.setdefault(run, {})[t] = tmp_path / run / t
            report(folders[run][t], "gsm8k", [[i, per_step + (t == "t0"), 10] for i in range(40)])
    res = compare_folders(folders, [("new", "old")], ["gsm8k"])
    assert list(res) == ["new_vs_old_t1", "new_vs_old_t0"]
    assert res["new_vs_old_t1"]["macro_ratio"] == pytest.approx(1.5)
    assert res["new_vs_old_t0"]["macro_ratio"] == pytest.approx(3.1 / 2.1)
    runs = [
        folder_parts(folders[r]["t1"], ["gsm8k"]) for r in ("new", "old", "new_small", "old_small")
    ]
    res["lead_t1"] = ratio_of_ratios(runs)  # 1.5 over 1.2
    assert res["lead_t1"]["ratio_of_ratios"] == pytest.approx(1.25)
    assert res["lead_t1"]["ratio_of_ratios_ci95"] == pytest.approx([1.25, 1.25])
    lines = comparison_lines(res)
    assert lines[0] == "new_vs_old_t1: macro x1.500 (1.500-1.500)"
    assert lines[-1] == "lead_t1: x1.250 (1.250-1.250)"


def test_timed_comparison_gives_the_recorded_speed_figures():
    """Four timed runs (tests/data/timed_runs): each run's step costs and speedup, and each
    pair's speedup ratio with its interval over the items, are what expected.json recorded; a
    pair of one run with itself has a ratio of 1."""
    runs = ["eagle3-fixed", "dflash-fixed", "dspark-fixed", "dspark-fixed-repeat"]
    pairs = [("eagle3-fixed", "dspark-fixed"), ("dspark-fixed", "dspark-fixed-repeat")]
    timed = timed_comparison(TIMED, runs, pairs)
    kept = json.loads((TIMED / "expected.json").read_text())
    assert timed["runs"] == kept["runs"]
    assert timed["runs"]["eagle3-fixed"]["speedup"] == pytest.approx(1.867, abs=5e-4)
    for a, b in pairs:
        assert timed["ratios"][f"{a}_vs_{b}"] == kept["ratios"][f"{a}_vs_{b}"]
    lo, hi = timed["ratios"]["eagle3-fixed_vs_dspark-fixed"]["speedup_ratio_ci95"]
    assert lo < 1.088 < hi and hi - lo > 0.01
    same = timed_comparison(TIMED, ["dflash-fixed"], [("dflash-fixed",) * 2])
    assert same["ratios"]["dflash-fixed_vs_dflash-fixed"]["speedup_ratio_ci95"] == [1.0, 1.0]
    lines = timed_lines(timed)
    assert lines[0].startswith("eagle3-fixed: tau 3.518, 1.867x target-only; step 2.227 ms")
    assert lines[-1].startswith("dspark-fixed_vs_dspark-fixed-repeat: speedup x0.990")
