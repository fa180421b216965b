"""scripts/tau_table.py: the issue-13 table assembled from serving.evaluate's report files."""

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from tau_table import _settled, assemble, main  # noqa: E402  (scripts/)

from serving.intervals import bootstrap  # noqa: E402

TAUS = {"dspark": 2.0, "dflash": 1.5, "eagle3": 1.8}


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)


def write_reports(root: Path, d: str, t: str, per_step: float) -> None:
    """`d`'s reports at temperature `t` on the three benches, 20 items each, whose tau is about
    `per_step` (its items alternate between two counts of emitted tokens)."""
    for bench in ("gsm8k", "mtbench", "humaneval"):
        per_item = [[i, round(10 * per_step) + i % 2, 10] for i in range(20)]
        e, n = (sum(r[k] for r in per_item) for k in (1, 2))
        rep = {"tau": e / n, "acceptance_by_position": [], "turns": 20, "per_item": per_item}
        write(root / "eval" / f"{d}-{t}" / f"{bench}.json", rep)


def write_speed(root: Path, name: str, tau: float, speedup: float) -> None:
    """A timed GSM8K run's report, speed/<name>/gsm8k.json."""
    write(root / "speed" / name / "gsm8k.json", {
        "tau": tau, "speedup": speedup, "mean_verify_width": 8.0, "items": 20,
        "speculative": {"tokens_per_s": 3.0, "step_ms": 2.0}, "target_only": {"tokens_per_s": 2.0},
    })  # fmt: skip


def test_table_keeps_the_issue_shape_and_computes_the_goals(tmp_path):
    for d, tau in TAUS.items():
        for t, bump in (("t0", 0.2), ("t1", 0.0)):
            for k, bench in enumerate(("gsm8k", "mtbench", "humaneval")):
                rep = {"tau": tau + bump - 0.1 * k, "acceptance_by_position": [0.5, None]}
                write(tmp_path / "eval" / f"{d}-{t}" / f"{bench}.json", {**rep, "turns": 4})
        steps = [{"step": s, "loss": 3.0 / s} for s in (1, 2)]
        steps[-1] |= {"eval_loss": 1.25, "eval_sim_tau": 1.5}
        lines = [json.dumps(r) for r in [{"event": "resumed", "step": 0}, *steps]]
        write(tmp_path / "runs" / d / "metrics.jsonl", "\n".join(lines) + "\n")
    del_bench = tmp_path / "eval" / "eagle3-t1" / "humaneval.json"
    del_bench.unlink()  # a missing report: its macro is unknown, not averaged over fewer
    write(tmp_path / "eval" / "curve-step-00000250" / "gsm8k.json", {"tau": 1.5})
    write(tmp_path / "eval" / "curve-step-00000010" / "gsm8k.json", {"tau": 1.1})
    speed = {"tau": 2.0, "speedup": 1.25, "mean_verify_width": 8.0, "items": 5}
    speed |= {"speculative": {"tokens_per_s": 500.0, "step_ms": 4.0}}
    speed |= {"target_only": {"tokens_per_s": 400.0}, "identical_to_target_only": "5/5"}
    speed |= {"command": "python -m serving.evaluate --x"}
    write(tmp_path / "speed" / "dspark-fixed" / "gsm8k.json", speed)
    write(tmp_path / "checksums.txt", "ab12  runs/dspark/draft/model.safetensors\n")

    out = assemble(tmp_path, 4000, 16, ["cmd"], ["a note"])
    assert out["dspark"]["gsm8k"] == {"greedy": 2.2, "t1": 2.0}
    assert out["dspark"]["macro"] == {"greedy": 2.1, "t1": 1.9}
    assert out["eagle3"]["humaneval"]["t1"] is None and out["eagle3"]["macro"]["t1"] is None
    assert out["budget_samples"] == 4000 and out["commands"] == ["cmd"]
    assert out["notes"] == ["a note"]
    assert [c["samples"] for c in out["budget_curve_dspark"]] == [160, 4000]
    assert out["acceptance_by_position"]["dflash"]["mtbench"]["greedy"] == [0.5, None]
    assert out["speed_gsm8k"]["dspark-fixed"]["speedup"] == 1.25
    assert out["speed_gsm8k"]["dspark-fixed"]["command"] == "python -m serving.evaluate --x"
    assert out["training"]["dspark"]["evals"] == [{"step": 2, "loss": 1.25, "sim_tau": 1.5}]
    assert out["training"]["dspark"]["first_loss"] == 3.0
    assert out["sha256"] == {"runs/dspark/draft/model.safetensors": "ab12"}
    goals = out["goals"]
    assert goals["dspark greedy tau gsm8k >= 3.5"] == {"value": 2.2, "limit": 3.5, "met": False}
    assert goals["dspark macro tau T=1 >= 1.10 x dflash"]["met"] is True  # 1.9 >= 1.54
    assert goals["dspark macro tau T=1 > eagle3"] is None  # eagle3's T=1 macro is unknown
    assert goals["speculative >= 2x target-only on the runtime (gsm8k)"]["met"] is False


def test_goals_between_drafts_get_a_paired_bootstrap_interval_from_per_item_parts(tmp_path):
    """Per-item parts give the T=1 comparisons a 95 % interval: a clear gap is settled, a gap
    smaller than the spread between items is not, and the macro is the mean of the benchmarks'
    emitted/steps over their items."""
    import random

    rng = random.Random(1)
    noise = {
        b: [rng.choice((10, 20, 40)) for _ in range(30)] for b in ("gsm8k", "mtbench", "humaneval")
    }

    def write_draft(d, per_step):  # item i emits noise_i * per_step tokens over noise_i steps
        for t in ("t0", "t1"):
            for bench, ns in noise.items():
                per_item = [
                    [i, round(n * per_step * (1 + 0.3 * (i % 3))), n] for i, n in enumerate(ns)
                ]
                e, n = (sum(r[k] for r in per_item) for k in (1, 2))
                rep = {
                    "tau": e / n,
                    "acceptance_by_position": [],
                    "turns": 30,
                    "per_item": per_item,
                }
                write(tmp_path / "eval" / f"{d}-{t}" / f"{bench}.json", rep)

    write_draft("dspark", 2.0)
    write_draft("dflash", 1.5)  # DSpark 1.33 x DFlash on every item: settled above 1.10
    write_draft("eagle3", 1.99)  # a 0.5 % gap on identical item spreads: still one-sided
    goals = assemble(tmp_path, 100, 16, [])["goals"]
    vs_dflash = goals["dspark macro tau T=1 >= 1.10 x dflash"]
    assert vs_dflash["met"] and vs_dflash["settled"]
    lo, hi = vs_dflash["ratio_ci95"]
    assert lo <= vs_dflash["ratio"] <= hi and lo > 1.10
    vs_eagle3 = goals["dspark macro tau T=1 > eagle3"]
    assert vs_eagle3["met"] and vs_eagle3["difference_ci95"][0] > 0 and vs_eagle3["settled"]

    # EAGLE-3 better on half the items, worse on the other half: the interval straddles zero
    for bench, ns in noise.items():
        path = tmp_path / "eval" / "eagle3-t1" / f"{bench}.json"
        rep = json.loads(path.read_text())
        rep["per_item"] = [
            [i, round(n * (2.6 if i % 2 else 1.4) * (1 + 0.3 * (i % 3))), n]
            for i, n in enumerate(ns)
        ]
        e, n = (sum(r[k] for r in rep["per_item"]) for k in (1, 2))
        rep["tau"] = e / n
        write(path, rep)
    vs_eagle3 = assemble(tmp_path, 100, 16, [])["goals"]["dspark macro tau T=1 > eagle3"]
    lo, hi = vs_eagle3["difference_ci95"]
    assert lo < 0 < hi and vs_eagle3["settled"] is False


def test_training_speed_and_regeneration_summaries_come_from_the_logs(tmp_path):
    """Median step time, data wait and target use after the first 10 (compiling) steps, the last
    c*, and each regeneration shard's summary line."""
    recs = [
        {"step": s, "loss": 1.0, "step_s": 9.0 if s <= 10 else 0.5 + 0.1 * (s % 3),
         "data_wait_frac": 0.2, "target_util": 0.8, "c_star_rank0": [0.4, 0.3]}
        for s in range(1, 21)
    ]  # fmt: skip
    write(tmp_path / "runs" / "dspark" / "metrics.jsonl", "\n".join(map(json.dumps, recs)) + "\n")
    write(tmp_path / "regen0.log", 'progress\n{"shard": "0/2", "samples_per_s": 92.5}\n')
    write(tmp_path / "regen1.log", "Traceback: no summary\n")  # a failed shard: no line
    out = assemble(tmp_path, 100, 16, [])
    train = out["training"]["dspark"]
    assert train["median_step_s"] == 0.6 and train["mean_data_wait_frac"] == 0.2
    assert train["mean_target_util"] == 0.8 and train["last_c_star"] == [0.4, 0.3]
    assert out["regeneration"] == [{"shard": "0/2", "samples_per_s": 92.5}]


def test_the_curve_ends_with_the_final_draft_on_the_curve_s_own_items(tmp_path):
    # the last checkpoint was evaluated on 4 items; the curve's checkpoints on its first 2
    final = {"tau": 3.0, "acceptance_by_position": [], "turns": 4}
    final["per_item"] = [[0, 10, 5], [1, 30, 10], [2, 9, 3], [3, 9, 3]]
    write(tmp_path / "eval" / "dspark-t0" / "gsm8k.json", final)
    write(
        tmp_path / "eval" / "curve-step-00000100" / "gsm8k.json",
        {"tau": 1.5, "per_item": [[0, 3, 2], [1, 3, 2]]},
    )
    curve = assemble(tmp_path, 3200, 16, [])["budget_curve_dspark"]
    assert [c["samples"] for c in curve] == [1600, 3200]
    assert curve[-1]["step"] == 200 and curve[-1]["tau_gsm8k_greedy"] == round(40 / 15, 3)
    # a final evaluation without some of the curve's items: no final point, nothing invented
    write(
        tmp_path / "eval" / "curve-step-00000050" / "gsm8k.json",
        {"tau": 1.2, "per_item": [[0, 3, 2], [1, 3, 2], [7, 1, 1]]},
    )
    write(
        tmp_path / "eval" / "curve-step-00000100" / "gsm8k.json",
        {"tau": 1.5, "per_item": [[0, 3, 2], [1, 3, 2], [7, 1, 1]]},
    )
    assert len(assemble(tmp_path, 3200, 16, [])["budget_curve_dspark"]) == 2
    (tmp_path / "eval" / "curve-step-00000050" / "gsm8k.json").unlink()
    # curve reports without per-item parts: no final point (items unknown), nothing invented
    write(tmp_path / "eval" / "curve-step-00000100" / "gsm8k.json", {"tau": 1.5})
    assert len(assemble(tmp_path, 3200, 16, [])["budget_curve_dspark"]) == 1


def test_a_run_started_from_earlier_weights_counts_their_samples_on_the_curve(tmp_path):
    """train.init_from: the run's steps count from 0, its draft had seen `samples_before`."""
    final = {"tau": 3.0, "acceptance_by_position": [], "turns": 2}
    final["per_item"] = [[0, 10, 5], [1, 30, 10]]
    write(tmp_path / "eval" / "dspark-t0" / "gsm8k.json", final)
    write(
        tmp_path / "eval" / "curve-step-00000100" / "gsm8k.json",
        {"tau": 1.5, "per_item": [[0, 3, 2], [1, 3, 2]]},
    )
    out = assemble(tmp_path, 3200, 16, [], samples_before=60000)
    assert out["samples_before"] == 60000 and out["budget_samples"] == 3200
    assert [c["samples"] for c in out["budget_curve_dspark"]] == [61600, 63200]
    assert [c["step"] for c in out["budget_curve_dspark"]] == [100, 200]


def test_the_speedup_goal_gets_an_interval_from_its_run_s_items(tmp_path):
    """A speedup scales with its run's tau at fixed step costs: items that spread widely leave
    a speedup 0.1 % above 2x unsettled; the same run with items that agree settles it, also at
    exactly 2x (the goal is >= 2x)."""

    def speed_report(per_item, speedup):
        e, n = (sum(r[k] for r in per_item) for k in (1, 2))
        rep = {"tau": e / n, "speedup": speedup, "mean_verify_width": 8.0, "items": len(per_item)}
        rep |= {"speculative": {"tokens_per_s": 2002.0, "step_ms": 2.0}}
        rep |= {"target_only": {"tokens_per_s": 1000.0}, "per_item": per_item}
        write(tmp_path / "speed" / "dspark-fixed" / "gsm8k.json", rep)
        goals = assemble(tmp_path, 100, 16, [])["goals"]
        return goals["speculative >= 2x target-only on the runtime (gsm8k)"]

    spread = [[i, (10, 70)[i % 2], 10] for i in range(60)]  # 1 or 7 tokens a step, tau 4
    goal = speed_report(spread, 2.002)
    lo, hi = goal["speedup_ci95"]
    assert goal["met"] and lo < 2.0 < hi and goal["settled"] is False
    # the speedup moves with tau (x tau_draw / tau), not against it: tau's own interval, scaled
    tlo, thi = bootstrap({"gsm8k": {i: (e, n) for i, e, n in spread}}, lambda t: t)
    assert abs(lo - 2.002 * tlo / 4) < 0.002 and abs(hi - 2.002 * thi / 4) < 0.002
    assert abs(lo - 2.002 * 4 / thi) > 0.02  # what an inverted scaling would give
    even = [[i, 40, 10] for i in range(60)]  # every item 4 tokens a step: no spread
    goal = speed_report(even, 2.0)
    assert goal["speedup_ci95"] == [2.0, 2.0] and goal["met"] and goal["settled"] is True
    # a report without per-item parts: no interval, nothing invented
    rep_path = tmp_path / "speed" / "dspark-fixed" / "gsm8k.json"
    rep = json.loads(rep_path.read_text())
    del rep["per_item"]
    write(rep_path, rep)
    goal = assemble(tmp_path, 100, 16, [])["goals"]
    assert goal["speculative >= 2x target-only on the runtime (gsm8k)"] == {
        "value": 2.0,
        "limit": 2.0,
        "met": True,
    }


def test_the_greedy_goals_get_an_interval_of_their_bench_s_tau_over_its_items(tmp_path):
    """GSM8K's 3.5 and MT-Bench's 2.5 are read with the spread of their items: a tau just
    above its goal over items that spread widely is met but not settled; one whose items
    agree is settled, also at exactly the goal (>=), and one clearly below is settled as
    missed."""

    def greedy_goals(gsm8k_items, mtbench_items):
        for bench, per_item in (("gsm8k", gsm8k_items), ("mtbench", mtbench_items)):
            e, n = (sum(r[k] for r in per_item) for k in (1, 2))
            rep = {"tau": e / n, "turns": len(per_item), "per_item": per_item}
            rep["acceptance_by_position"] = [0.5]
            write(tmp_path / "eval" / "dspark-t0" / f"{bench}.json", rep)
        goals = assemble(tmp_path, 100, 16, [])["goals"]
        return goals["dspark greedy tau gsm8k >= 3.5"], goals["dspark greedy tau mtbench >= 2.5"]

    spread = [[i, (10, 61)[i % 2], 10] for i in range(60)]  # 1 or 6.1 tokens a step: 3.55
    below = [[i, 20, 10] for i in range(80)]  # 2.0 a step on every item
    gsm8k, mtbench = greedy_goals(spread, below)
    lo, hi = gsm8k["tau_ci95"]
    assert gsm8k["met"] and lo < 3.5 < hi and gsm8k["settled"] is False
    tlo, thi = bootstrap({"gsm8k": {i: (e, n) for i, e, n in spread}}, lambda t: t)
    assert [lo, hi] == [tlo, thi]  # the bench's own tau over draws of its items
    assert mtbench["tau_ci95"] == [2.0, 2.0] and not mtbench["met"] and mtbench["settled"]
    exact = [[i, 35, 10] for i in range(60)]  # exactly 3.5 a step on every item
    gsm8k, _ = greedy_goals(exact, below)
    assert gsm8k["tau_ci95"] == [3.5, 3.5] and gsm8k["met"] and gsm8k["settled"] is True


def test_a_goal_is_settled_only_when_its_interval_lies_on_one_side_of_its_limit():
    """At the limit itself: a >= goal is settled met by an interval that starts there and
    settled missed by none that ends there; a strict (>) goal the other way round."""
    assert _settled([3.5, 3.6], 3.5) and not _settled([3.5, 3.6], 3.5, strict=True)
    assert not _settled([3.4, 3.5], 3.5) and _settled([3.4, 3.5], 3.5, strict=True)
    assert not _settled([3.4, 3.6], 3.5) and not _settled([3.4, 3.6], 3.5, strict=True)
    assert _settled([3.2, 3.4], 3.5) and _settled([3.6, 3.7], 3.5, strict=True)


def test_a_draft_trained_in_another_pass_is_read_from_that_pass_s_folder(tmp_path):
    """--draft-results dspark=DIR: DSpark's reports, training log (gzipped) and speed run come
    from DIR (the pass that trained it on the same files), DFlash's from --results, and the goal
    between them is computed over both, with its paired interval; the table records where
    DSpark came from. A folder without a draft's files gives no figure for it, and a bad
    DRAFT=DIR is refused by name."""
    here, there = tmp_path / "here", tmp_path / "there"

    def reports(root, d, per_step):
        write_reports(root, d, "t1", per_step)
        line = json.dumps({"step": 1, "loss": per_step}) + "\n"  # gzipped, as the passes keep it
        (root / "runs" / d).mkdir(parents=True)
        (root / "runs" / d / "metrics.jsonl.gz").write_bytes(gzip.compress(line.encode()))

    reports(there, "dspark", 2.2)
    reports(here, "dflash", 1.8)
    reports(here, "dspark", 9.0)  # not read: DSpark comes from `there`
    write_speed(there, "dspark-fixed", 2.2, 1.5)
    write(there / "eval" / "curve-step-00000003" / "gsm8k.json", {"tau": 1.7})  # DSpark's curve
    write(there / "speed" / "sts.json", {"temperatures": [1.0]})
    out = assemble(here, 100, 16, [], draft_results={"dspark": there})
    assert out["draft_results"] == {"dspark": str(there)}
    assert out["budget_curve_dspark"] == [{"step": 3, "samples": 48, "tau_gsm8k_greedy": 1.7}]
    assert out["sts"] == {"temperatures": [1.0]}
    assert out["dspark"]["macro"]["t1"] == 2.25 and out["dflash"]["macro"]["t1"] == 1.85
    assert out["training"]["dspark"]["first_loss"] == 2.2 and out["eagle3"]["macro"]["t1"] is None
    assert out["speed_gsm8k"]["dspark-fixed"]["speedup"] == 1.5
    vs = out["goals"]["dspark macro tau T=1 >= 1.10 x dflash"]
    assert vs["ratio"] == round(2.25 / 1.85, 3) and vs["met"] and vs["settled"]
    assert "draft_results" not in assemble(there, 100, 16, [])  # none given: no key
    assert assemble(there, 100, 16, [])["dflash"]["macro"]["t1"] is None
    try:
        assemble(here, 100, 16, [], draft_results={"medusa": there})
        raise AssertionError("an unknown draft was accepted")
    except ValueError as e:
        assert "unknown drafts ['medusa']" in str(e)
    for bad in ("dspark", f"medusa={there}", f"dspark={tmp_path / 'none'}"):
        args = ["--results", str(here), "--out", str(tmp_path / "t.json"), "--budget", "100"]
        try:
            main([*args, "--draft-results", bad])
            raise AssertionError(f"--draft-results {bad} was accepted")
        except SystemExit as e:
            assert e.code == 2
    main([*args, "--draft-results", f"dspark={there}"])
    assert json.loads((tmp_path / "t.json").read_text())["dspark"]["macro"]["t1"] == 2.25


def test_the_t1_ratio_is_that_of_the_unrounded_taus(tmp_path):
    """The ratio DSpark / DFlash at T=1 comes from the taus themselves (as
    serving.intervals.compare_parts gives it), not from the table's rounded macros: here
    1.0004 / 1.0006 is 1.000, where the rounded 1.000 / 1.001 would be 0.999."""
    for d, emitted in (("dspark", 5002), ("dflash", 5003)):
        for bench in ("gsm8k", "mtbench", "humaneval"):
            per_item = [[0, emitted, 5000], [1, emitted, 5000]]
            rep = {"tau": emitted / 5000, "acceptance_by_position": [], "per_item": per_item}
            write(tmp_path / "eval" / f"{d}-t1" / f"{bench}.json", rep | {"turns": 2})
    vs = assemble(tmp_path, 100, 16, [])["goals"]["dspark macro tau T=1 >= 1.10 x dflash"]
    assert vs["ratio"] == 1.0 and round(1.0 / 1.001, 3) == 0.999


def test_a_draft_s_files_are_read_from_the_first_of_its_folders_that_holds_each(tmp_path):
    """--draft-results given twice for DSpark (pass 22: pass 19's draft, its T=1 reports
    evaluated later in their own folder): the T=1 reports come from the first folder, the greedy
    ones, the run and the speed run from the second, which the first lacks; a file both hold is
    read from the first. The table records both folders in order; the goal's interval is
    computed over the T=1 reports of the first."""
    late, early, here = tmp_path / "late", tmp_path / "early", tmp_path / "here"

    write_reports(late, "dspark", "t1", 2.2)
    write_reports(early, "dspark", "t1", 9.0)  # not read: `late` holds DSpark's T=1 reports
    write_reports(early, "dspark", "t0", 3.0)
    write_reports(here, "dflash", "t1", 1.8)
    write(early / "runs" / "dspark" / "metrics.jsonl", json.dumps({"step": 1, "loss": 1.25}))
    write_speed(early, "dspark-fixed", 3.0, 2.1)
    out = assemble(here, 100, 16, [], draft_results={"dspark": [late, early]})
    assert out["draft_results"] == {"dspark": [str(late), str(early)]}
    assert out["dspark"]["macro"] == {"greedy": 3.05, "t1": 2.25}
    assert out["training"]["dspark"]["first_loss"] == 1.25
    assert out["speed_gsm8k"]["dspark-fixed"]["speedup"] == 2.1
    vs = out["goals"]["dspark macro tau T=1 >= 1.10 x dflash"]
    assert vs["ratio"] == round(2.25 / 1.85, 3) and vs["settled"]
    assert out["goals"]["dspark greedy tau gsm8k >= 3.5"]["tau_ci95"][1] < 3.5
    args = ["--results", str(here), "--out", str(tmp_path / "t.json"), "--budget", "100"]
    main([*args, "--draft-results", f"dspark={late}", "--draft-results", f"dspark={early}"])
    assert json.loads((tmp_path / "t.json").read_text())["dspark"]["macro"]["t1"] == 2.25


def test_each_draft_s_timed_runs_come_from_its_own_folders(tmp_path):
    """speed/<draft>-*/ of DFlash and EAGLE-3 are read from their own folders (--draft-results)
    beside DSpark's; a run named for another draft in DSpark's folder is not taken as DSpark's
    or that draft's, and the table lists the runs in the order of their names."""
    here, there = tmp_path / "here", tmp_path / "there"

    write_speed(here, "dspark-fixed", 2.0, 1.8)
    write_speed(here, "compiled-mtbench", 2.0, 1.7)  # DSpark's, by an older name (pass 13)
    write_speed(here, "eagle3-fixed", 2.0, 9.9)  # not read: EAGLE-3's files come from `there`
    write_speed(there, "eagle3-fixed", 2.0, 1.6)
    write_speed(there, "dspark-fixed", 2.0, 9.9)  # not read: DSpark's come from `here`
    out = assemble(here, 100, 16, [], draft_results={"eagle3": there})
    assert {k: v["speedup"] for k, v in out["speed_gsm8k"].items()} == {
        "compiled-mtbench": 1.7,
        "dspark-fixed": 1.8,
        "eagle3-fixed": 1.6,
    }
    assert list(out["speed_gsm8k"]) == ["compiled-mtbench", "dspark-fixed", "eagle3-fixed"]
    assert out["goals"]["speculative >= 2x target-only on the runtime (gsm8k)"]["value"] == 1.8


def test_one_folder_of_timed_runs_searched_first_by_the_three_drafts(tmp_path):
    """Pass 23's table: the three drafts' timed runs of one session in one folder, given first
    to each draft, their evaluations in older folders after it. Each run is listed once, an
    older folder's timed runs are not read (a glob comes from the first folder with a match),
    the reports still come from the older folders, and the speed goal is the shared folder's."""
    timed, old = tmp_path / "timed", {d: tmp_path / d for d in ("dspark", "dflash", "eagle3")}
    for d, per_step in (("dspark", 2.0), ("dflash", 1.8), ("eagle3", 2.2)):
        for t in ("t0", "t1"):
            write_reports(old[d], d, t, per_step)
        write_speed(timed, f"{d}-fixed", per_step, per_step - 0.3)
    write_speed(timed, "dspark-fixed-repeat", 2.0, 1.72)
    write_speed(old["dspark"], "dspark-fixed", 2.0, 9.9)  # another machine's run: not read
    out = assemble(old["eagle3"], 100, 16, [], draft_results={d: [timed, old[d]] for d in old})
    assert {k: v["speedup"] for k, v in out["speed_gsm8k"].items()} == {
        "dflash-fixed": 1.5,
        "dspark-fixed": 1.7,
        "dspark-fixed-repeat": 1.72,
        "eagle3-fixed": 1.9,
    }
    # write_reports alternates its items between 10 * per_step and one token more
    assert out["dflash"]["gsm8k"]["t1"] == 1.85 and out["eagle3"]["gsm8k"]["greedy"] == 2.25
    assert out["goals"]["speculative >= 2x target-only on the runtime (gsm8k)"]["value"] == 1.7
