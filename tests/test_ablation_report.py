"""serving.ablation_report on two real jobs' results (tests/data/ablation_jobs: a 3-layer DSpark
baseline and a 5-layer ablation at 30,000 samples on one H200, copied without weights; their
metrics keep the evaluation lines only), trained on one file each run found under its own work
directory."""

import json
import shutil
from pathlib import Path

import pytest

from serving.ablation_report import main as report_main

JOBS = Path(__file__).resolve().parent / "data" / "ablation_jobs"
BASE = JOBS / "runs" / "dspark"
LAYERS5 = JOBS / "ablate" / "layers5"


def _rows(table: str) -> dict[str, list[str]]:
    """The table's rows by job, each as its cells."""
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def test_ignored_overrides_leave_the_varied_axis_alone_and_are_named(tmp_path):
    out = tmp_path / "layers"
    assert report_main([str(BASE), str(LAYERS5), "--out", str(out)]) == 0
    plain = _rows(out.with_suffix(".md").read_text())
    # the file's path differs between the runs' work directories: without the flag it is varied
    assert "/tmp/a17/regen.jsonl" in plain["ablate/layers5"][1]
    assert "data.sources=" in plain["runs/dspark"][1]

    argv = [str(BASE), str(LAYERS5), "--ignore-override", "data.sources=", "--out", str(out)]
    assert report_main(argv) == 0
    text = out.with_suffix(".md").read_text()
    rows = _rows(text)
    assert rows["runs/dspark"][1] == "(defaults)"
    assert rows["ablate/layers5"][1] == "draft.num_layers=5"
    assert "Overrides left out (--ignore-override): `data.sources=`" in text
    assert "data.sources=" not in text.split("Overrides left out")[0]
    # the rest of the table is the same: taus and the paired difference on the same items
    assert rows["ablate/layers5"][7:9] == plain["ablate/layers5"][7:9] == ["2.31", "1.71"]
    assert rows["ablate/layers5"][9].startswith("+0.07 (")


def test_json_holds_the_table_as_data(tmp_path):
    out, data_file = tmp_path / "layers", tmp_path / "layers.json"
    argv = [str(BASE), str(LAYERS5), "--ignore-override", "data.sources=", "--out", str(out)]
    assert report_main([*argv, "--json", str(data_file)]) == 0
    data = json.loads(data_file.read_text())
    assert data["benches"] == ["gsm8k", "mtbench"] and data["temperature"] == 0.0
    base, abl = data["jobs"]
    assert (base["job"], abl["job"]) == ("dspark", "layers5")
    assert abl["varied"] == ["draft.num_layers=5"] and base["varied"] == []
    assert round(abl["tau"]["gsm8k"], 2) == 2.31 and round(abl["tau"]["mtbench"], 2) == 1.71
    assert base["vs_first"] == {"gsm8k": None, "mtbench": None}
    diff = abl["vs_first"]["gsm8k"]
    assert diff["diff"] == 0.07 and diff["lo95"] <= diff["diff"] <= diff["hi95"]
    assert len(abl["acceptance_by_position"]["gsm8k"]) == 7  # block 7: one rate a position
    assert abl["sim_tau"] is not None and base["checkpoint"] == "step-00001875"
    # the macro tau is the mean of the benches' taus; its ratio to the first job's has an interval
    assert abl["macro_tau"] == pytest.approx((abl["tau"]["gsm8k"] + abl["tau"]["mtbench"]) / 2)
    ratio = abl["macro_ratio_vs_first"]
    assert ratio["ratio"] == pytest.approx(abl["macro_tau"] / base["macro_tau"])
    assert ratio["lo95"] < ratio["ratio"] < ratio["hi95"]
    assert "macro_ratio_vs_first" not in base
    # the draft's step: the mean of its evaluations' medians (gsm8k 0.8968, mtbench 0.8972 ms);
    # the training step: the median of the four steps these metrics kept
    assert abl["draft_step_ms"] == pytest.approx(0.897, abs=1e-3)
    assert abl["train_step_s"] == pytest.approx(0.1061, abs=1e-4)


def test_the_training_step_is_the_median_over_steps_a_resumed_one_counted_once(tmp_path):
    job = tmp_path / "layers5"
    shutil.copytree(LAYERS5, job)
    # steps 1-3 of 0.5, 0.7 and 0.4 s; the run stopped after step 2 and redid it in 0.3 s
    steps = [(1, 0.5), (2, 0.7), (2, 0.3), (3, 0.4)]
    with (job / "metrics.jsonl").open("w") as f:
        f.writelines(json.dumps({"step": n, "loss": 1.0, "step_s": s}) + "\n" for n, s in steps)
    out, data_file = tmp_path / "t", tmp_path / "t.json"
    assert report_main([str(BASE), str(job), "--out", str(out), "--json", str(data_file)]) == 0
    base, abl = json.loads(data_file.read_text())["jobs"]
    assert abl["train_step_s"] == pytest.approx(0.4)  # of 0.5, 0.3, 0.4 (of all four: 0.45)
    rows = _rows(out.with_suffix(".md").read_text())
    assert rows[f"{tmp_path.name}/layers5"][5] == "0.400"


CHECKPOINT = Path(__file__).resolve().parent / "data" / "checkpoint_f97d512" / "step-00000001"


def _unevaluated_copy(tmp_path, job: Path) -> Path:
    """The job trained (a real small checkpoint stands for its weights) and never evaluated."""
    copy = tmp_path / job.name
    shutil.copytree(job, copy)
    shutil.rmtree(copy / "eval")
    shutil.copytree(CHECKPOINT, copy / "checkpoints" / CHECKPOINT.name)
    return copy


def test_a_sweep_never_evaluated_is_refused_with_the_command(tmp_path, capsys):
    jobs = [_unevaluated_copy(tmp_path, j) for j in (BASE, LAYERS5)]
    out = tmp_path / "report" / "layers"
    assert report_main([*map(str, jobs), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no job has been evaluated" in err
    assert f"python -m serving.evaluate --checkpoint {jobs[0]} --temperature 0" in err
    assert not out.with_suffix(".png").exists() and not out.with_suffix(".md").exists()


def test_a_job_without_evaluation_is_listed_and_named(tmp_path, capsys):
    job = _unevaluated_copy(tmp_path, LAYERS5)
    out = tmp_path / "layers"
    assert report_main([str(BASE), str(job), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {job}: no evaluation at T=0" in err
    row = _rows(out.with_suffix(".md").read_text())[f"{tmp_path.name}/layers5"]
    assert row[4] == "" and row[7:9] == ["", ""]  # listed, its draft step and tau cells empty
