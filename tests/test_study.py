"""splitserve.study: every experiment composes, the plan follows the files, and a real study runs
end to end on CPU (the embedded SmolLM2 target), resumes where it stopped and writes its table
into results.json."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from draft_models.config_io import load_dataclass
from splitserve import study as study_module
from splitserve.study import Stage, Study, StudyConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def study_config(overrides: list[str]) -> StudyConfig:
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = load_dataclass(StudyConfig, compose("study", overrides=overrides), "study")
    cfg.validate()
    return cfg


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_validates(name):
    cfg = study_config([f"+experiment={name}"])
    assert cfg.results_dir == f"docs/results/{cfg.name}"
    # under studies/<name>/ (a study of one of several targets keeps its own regenerated data),
    # or one a target's studies share (conf/study_smol30k.yaml, conf/study_gemma30k.yaml)
    shared = ("studies/smol/", "studies/gemma3_270m/")
    assert cfg.work_dir.startswith((f"studies/{cfg.name}/", *shared))
    assert cfg.work_dir.endswith(f"/{cfg.samples}")
    plan = Study(cfg).plan()
    trains = [s.name for s in plan if s.name.startswith("train")]
    assert trains == [f"train {j}" for j in cfg.jobs]
    assert all(len(o.split("=", 1)) == 2 for j in cfg.jobs.values() for o in j)


def test_studies_sharing_a_work_dir_share_its_file_and_baseline():
    cfgs = [study_config([f"+experiment={n}"]) for n in EXPERIMENTS]
    groups: dict[str, list[StudyConfig]] = {}
    for c in cfgs:
        groups.setdefault(c.work_dir, []).append(c)
    shared = {w: sorted(c.table for c in g) for w, g in groups.items() if len(g) > 1}
    assert shared == {
        "studies/ablations_h200/110000": ["attention", "block", "layers", "rope"],
        "studies/smol/30000": ["confidence", "smollm2", "vocab"],
        "studies/gemma3_270m/30000": ["gemma3_270m", "vocab_gemma3_270m"],
    }
    for group in (groups[w] for w in shared):
        # one regenerated file: one manifest
        assert (
            len({(c.recipe, c.samples, tuple(c.common), tuple(c.regen_extra)) for c in group}) == 1
        )
        # every study starts from the default draft, the one baseline job all of them share
        assert all(next(iter(c.jobs.items())) == ("dspark", []) for c in group)
        # a job name means one draft in a shared work dir (Study.check_jobs refuses otherwise)
        seen: dict[str, list[str]] = {}
        assert all(seen.setdefault(j, o) == o for c in group for j, o in c.jobs.items())


def test_the_two_target_studies_differ_only_in_their_target():
    """targets_h200 compares Gemma 3 270M with SmolLM2 at one budget: recipe, data budget,
    regeneration, jobs, evaluation and every common override but the target must agree (the
    Gemma study once lacked train.calibrate_at_end)."""
    gemma, smol = (study_config([f"+experiment=targets_{t}"]) for t in ("gemma3_270m", "smollm2"))
    same = ("name", "recipe", "samples", "micro_batch", "regen_extra", "jobs", "evaluate")
    assert [getattr(gemma, k) for k in same] == [getattr(smol, k) for k in same]
    assert [o for o in gemma.common if o != "target=gemma3_270m"] == list(smol.common)
    assert gemma.table != smol.table and gemma.work_dir != smol.work_dir


def _tiny(tmp_path, **extra) -> StudyConfig:
    overrides = [
        "name=t",
        "table=axis",
        f"work_dir={tmp_path / 'work'}",
        f"results_dir={tmp_path / 'results'}",
        "samples=100",
        "micro_batch=10",
        "regen_part=30",
        "eval_prompts=2",
        "jobs={a:[],b:['draft.num_layers=1']}",
        "evaluate.temperatures=[1.0,0.0]",
    ]
    return study_config(overrides + [f"{k}={v}" for k, v in extra.items()])


def test_the_plan_covers_every_sample_and_reads_its_state_from_the_files(tmp_path):
    study = Study(_tiny(tmp_path))
    parts = study.regen_parts()
    assert study.regen_samples() == round(102 * 1.12)
    assert [(s, e) for s, e, _ in parts] == [(0, 30), (30, 60), (60, 90), (90, 114)]
    names = [s.name for s in study.plan()]
    assert names[4:] == [
        "train a", "train b",
        "evaluate a T=1", "evaluate b T=1", "evaluate a T=0", "evaluate b T=0",
        "report T=1", "report T=0",
    ]  # fmt: skip
    assert not any(s.done for s in study.plan())

    for s, _, path in parts[:2]:  # two parts complete; a third was cut short (.partial)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"g": s}) + "\n")
    parts[2][2].with_name(parts[2][2].name + ".partial").write_text("{}\n")
    # the parts there are checked against the study's settings first (they may come from another
    # machine), then the rest regenerated
    check, *regen = study.plan()[:5]
    assert check.name == "check the 2 regenerated part(s) here" and not check.done
    cut = check.argv.index("--check")
    assert check.argv[cut + 1 : cut + 4] == [str(parts[0][2]), str(parts[1][2]), "--"]
    assert check.argv[cut + 4 :] == regen[2].argv[regen[2].argv.index("--start") + 2 :]
    assert [s.done for s in regen] == [True, True, False, False]
    # a part whose record names other samples (renamed, or unpacked in the wrong place) would
    # repeat and lose samples when merged: refused before anything runs
    study.check_regen()
    side = parts[1][2].with_name(parts[1][2].name + ".provenance.json")
    side.write_text(json.dumps({"summary": {"start": 0, "end": 30, "shard": "0/1"}}))
    with pytest.raises(
        ValueError,
        match=r"part-000000030-000000060.jsonl was regenerated for "
        r"samples 0..29 \(its record\), not 30..59: move it",
    ):
        study.check_regen()
    side.write_text(json.dumps({"summary": {"start": 30, "end": 60, "shard": "0/1"}}))
    study.check_regen()

    run = study.run_dir("a")
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"steps": 9}))  # an earlier, shorter budget
    assert not study.train_stage("a").done
    (run / "summary.json").write_text(json.dumps({"steps": 10}))
    assert study.train_stage("a").done and not study.train_stage("b").done

    out = study.eval_dir("a", 0.0)
    assert out == run / "eval" / "step-00000010-t0"
    out.mkdir(parents=True)
    command = shlex.join(["python", *study.eval_argv("a", 0.0)[1:]])  # as evaluate records it
    (out / "gsm8k.json").write_text(json.dumps({"command": command}))
    assert not study.eval_stage("a", 0.0).done  # mtbench missing
    (out / "mtbench.json").write_text(json.dumps({"command": command.replace("40", "20")}))
    assert not study.eval_stage("a", 0.0).done  # made with another --limit: not this study's
    (out / "mtbench.json").write_text(json.dumps({"command": command}))
    assert study.eval_stage("a", 0.0).done and not study.eval_stage("a", 1.0).done

    train = study.train_stage("b").argv
    assert train[train.index("splitserve.train") + 1 :][-2:] == [
        "draft.num_layers=1",
        f"hydra.run.dir={study.run_dir('b')}",
    ]
    assert "train.steps=10" in train and f"path:{study.regen_file}" in " ".join(train)
    assert "split.trainer_procs=1" in train  # a step is micro_batch samples: the budget holds


def test_checkpoints_along_a_job_do_not_make_it_another_draft(tmp_path):
    """More checkpoints lose less of a call cut short; the evaluations stay four, and a job's run
    made with another checkpoint frequency is resumed, not refused (any other override is)."""
    study = Study(_tiny(tmp_path, checkpoints=3))
    train = study.train_overrides("b")
    assert "train.checkpoint_every=4" in train and "train.eval_every=3" in train
    assert "train.checkpoint_every=3" in Study(_tiny(tmp_path)).train_overrides("b")

    saved = study.run_dir("b") / ".hydra" / "overrides.yaml"
    saved.parent.mkdir(parents=True)
    made = [o.replace("every=4", "every=1") for o in train]
    saved.write_text(yaml.safe_dump(made))
    study.check_jobs()
    saved.write_text(yaml.safe_dump([o.replace("num_layers=1", "num_layers=2") for o in made]))
    with pytest.raises(ValueError, match=r"job 'b'.*differing: \['draft.num_layers=1', 'dra"):
        study.check_jobs()
    with pytest.raises(ValueError, match="checkpoints=0 must be >= 1"):
        _tiny(tmp_path, checkpoints=0)


def _regenerated(study: Study) -> None:
    """Every part written (one line per sample id, as regenerate writes them), then merged."""
    for s, e, path in study.regen_parts():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"g": g}) + "\n" for g in range(s, e)))
    study.merge_regen()


def test_regenerated_data_made_otherwise_is_refused(tmp_path):
    study = Study(_tiny(tmp_path))
    _regenerated(study)
    study.check_regen()  # the same settings: fine
    other = Study(_tiny(tmp_path, samples=200))
    with pytest.raises(ValueError, match="holds data regenerated with"):
        other.check_regen()
    assert Study(_tiny(tmp_path)).table_key() == "axis_100" and other.table_key() == "axis_200"


def test_merge_keeps_sample_order(tmp_path):
    study = Study(_tiny(tmp_path))
    _regenerated(study)
    rows = [json.loads(x)["g"] for x in study.regen_file.read_text().splitlines()]
    assert rows == list(range(study.regen_samples()))
    assert not study.regen_file.with_name("regen.jsonl.partial").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("samples", 5, "less than one step's micro_batch"),
        ("jobs", {"a b": []}, "letters, digits"),
        ("jobs", {}, "names at least one job"),
        ("regen_margin", 0.5, "regen_margin=0.5 must be >= 1"),
        ("jobs", {"a": ["train.steps=5"]}, "the study sets it for every job"),
        ("common", ["split.trainer_procs=2"], "set study samples / micro_batch instead"),
    ],
)
def test_bad_settings_are_named(tmp_path, field, value, message):
    cfg = _tiny(tmp_path)
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=message):
        cfg.validate()


def test_an_empty_bench_list_is_named(tmp_path):
    with pytest.raises(ValueError, match="evaluate.benches and evaluate.temperatures"):
        _tiny(tmp_path, **{"evaluate.benches": "[]"})


def test_no_experiment_is_refused_by_name(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "splitserve.study", f"work_dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "study name is empty: choose an experiment (+experiment=NAME)" in proc.stderr


def _study(tmp_path, *extra: str, one: str = "draft.num_layers=1") -> subprocess.CompletedProcess:
    argv = [
        sys.executable, "-m", "splitserve.study",
        "name=t", "table=axis", "recipe=smol",
        f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}",
        "samples=4", "micro_batch=2", "eval_prompts=1", "regen_part=10",
        "common=['log.wandb_mode=disabled','log.progress=false','target.max_new_tokens=6',"
        "'train.num_anchors=8','train.decode_eval_prompts=0','data.max_length=96']",
        f"jobs={{base:[],one:['{one}']}}",
        "evaluate.benches=[gsm8k]", "evaluate.limit=1", "evaluate.max_new_tokens=6",
        "evaluate.batch=1", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1200)


@pytest.mark.slow
def test_a_study_runs_end_to_end_and_resumes(tmp_path):
    proc = _study(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 of 6 stages done" in proc.stdout
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    table = results["tables"]["axis_4"]
    assert table["budget_samples"] == 4 and table["recipe"] == "smol"
    assert len(table["data_sha256"]) == 64
    jobs = table["by_temperature"]["0"]["jobs"]
    assert [j["job"] for j in jobs] == ["base", "one"]
    assert jobs[1]["varied"] == ["draft.num_layers=1"]
    assert all(j["tau"]["gsm8k"] >= 1.0 for j in jobs)  # a real decode: at least the bonus token
    assert (tmp_path / "results" / "axis_4-t0.png").is_file()

    # one evaluation lost: the rerun runs only it and the report, and keeps other tables
    results["tables"]["other"] = {"kept": True}
    (tmp_path / "results" / "results.json").write_text(json.dumps(results))
    shutil.rmtree(tmp_path / "work" / "runs" / "one" / "eval")
    proc = _study(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 of 6 stages done" in proc.stdout
    ran = [line for line in proc.stdout.splitlines() if line.startswith("[") and "done in" in line]
    assert [r.split("] ")[1].split(":")[0] for r in ran] == ["evaluate one T=0", "report T=0"]
    again = json.loads((tmp_path / "results" / "results.json").read_text())
    assert again["tables"]["other"] == {"kept": True}
    assert again["tables"]["axis_4"]["by_temperature"]["0"]["jobs"][1]["job"] == "one"

    # (the reruns passed the check of each trained job's saved overrides) another study in this
    # work dir meaning another draft by the job name `one` is refused, nothing run
    proc = _study(tmp_path, one="draft.num_layers=2")
    assert proc.returncode == 2 and "job 'one'" in proc.stderr
    assert "trained with other overrides" in proc.stderr and "draft.num_layers=2" in proc.stderr

    # a part made with other settings (as one carried from another machine could be), not yet
    # merged: the check stage refuses it by name before anything runs on it
    work = tmp_path / "work"
    (work / "regen.jsonl").unlink()
    (work / "regen.json").unlink()
    [part] = sorted((work / "regen").glob("part-*.jsonl"))
    side = part.with_name(part.name + ".provenance.json")
    record = json.loads(side.read_text())
    record["made_with"]["target.max_new_tokens"] = 7
    side.write_text(json.dumps(record))
    proc = _study(tmp_path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{part} was regenerated with other settings (target.max_new_tokens=7 there" in (
        proc.stderr
    )
    assert "error: check the 1 regenerated part(s) here failed (exit 2)" in proc.stderr


@pytest.mark.slow
def test_a_failed_stage_stops_the_study_and_says_how_to_continue(tmp_path):
    proc = _study(tmp_path, "regen_extra=['target.generate_batch=0']")
    assert proc.returncode == 2  # the stage's own exit code
    assert "target.generate_batch=0 is invalid" in proc.stderr
    assert "error: regenerate 0..5 failed (exit 2)" in proc.stderr
    assert "it continues from this stage" in proc.stderr
    assert not (tmp_path / "results" / "results.json").exists()


def test_results_carry_the_calibration_a_job_fitted_at_the_end(tmp_path):
    """A job whose final checkpoint holds train.calibrate_at_end's sts_report.json: its ECE/AUC
    per position go into the table (`calibration`); a job without one is left out."""
    study = Study(_tiny(tmp_path))
    study.regen_file.parent.mkdir(parents=True)
    study.regen_file.write_text("{}\n")
    for t in (1.0, 0.0):
        Path(f"{study.report_base(t)}.json").parent.mkdir(parents=True, exist_ok=True)
        Path(f"{study.report_base(t)}.json").write_text(json.dumps({"jobs": []}))
    final = study.run_dir("b") / "checkpoints" / study.final_checkpoint()
    final.mkdir(parents=True)
    (final / "sts_report.json").write_text(json.dumps({"test": {"ece_after": [0.01, 0.02]}}))
    table = json.loads(study.write_results("cmd").read_text())["tables"][study.table_key()]
    assert table["calibration"] == {"b": {"test": {"ece_after": [0.01, 0.02]}}}
    gpu = torch.cuda.is_available()  # where it was measured: the GPU's name, or "cpu"
    assert table["device"] == (torch.cuda.get_device_name() if gpu else "cpu")


def test_an_interrupted_stage_is_named_as_interrupted_not_failed(tmp_path, capsys):
    """A stage that a SIGINT stopped (exit 130, as `splitserve.train` exits, or killed by the
    signal) stops the study with exit 130 and says how to continue, not that it failed."""
    study = Study(_tiny(tmp_path))
    for how in ("raise SystemExit(130)", "import os, signal; os.kill(os.getpid(), signal.SIGINT)"):
        stop = Stage("evaluate a T=0", [sys.executable, "-c", how], done=False)
        study.plan = lambda stop=stop: [stop]
        assert study_module._execute(study, "python -m splitserve.study +experiment=x") == 130
        err = capsys.readouterr().err
        assert "interrupted: evaluate a T=0 stopped" in err and "failed" not in err
        assert "rerun `python -m splitserve.study +experiment=x` to continue" in err
