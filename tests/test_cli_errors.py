"""Errors of the command lines a user meets first: Hydra's own (an unknown `+recipe`, a group
selected without `+`, a malformed override) exit 2 in one `error:` line, as the project's checks
do, not 1 over a screenful; a file that is not JSON is named; --limit says what it left unread."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from draft_models.config_io import hydra_problem, read_json
from splitserve.run_metrics import metrics_records

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

ROOT = Path(__file__).resolve().parents[1]


def run_module(module: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The only stderr line of a refused command (exit 2), without the `error: ` prefix."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["+recipe=ling4"],
            "Could not find 'recipe/ling4'; Available options in 'recipe': ling3, ",
        ),
        (["recipe=ling3"], "To append to your default list use +recipe=ling3"),
        (["train.lr=="], "Error parsing override 'train.lr=='"),
        (["draft=nope"], "Could not find 'draft/nope'; Available options in 'draft': dflash, "),
    ],
)
def test_hydra_errors_of_train_exit_2_in_one_line(argv, expected, tmp_path):
    proc = run_module("splitserve.train", *argv, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert expected in one_error_line(proc)
    assert not (tmp_path / "run").exists()  # refused before Hydra made a run directory


def test_hydra_errors_of_study_and_regenerate_exit_2_in_one_line(tmp_path):
    proc = run_module("splitserve.study", "+experiment=nope", "dry_run=true", cwd=tmp_path)
    assert "Could not find 'experiment/nope'; Available options in 'experiment': " in (
        one_error_line(proc)
    )
    proc = run_module("splitserve.study", "samples==3", cwd=tmp_path)
    assert "Error parsing override 'samples==3'" in one_error_line(proc)
    out = tmp_path / "r.jsonl"
    proc = run_module(
        "splitserve.regenerate", "--out", str(out), "--samples", "1", "+recipe=ling4", cwd=tmp_path
    )
    assert "Could not find 'recipe/ling4'; Available options" in one_error_line(proc)
    assert not out.exists()


def test_overrides_hydra_accepts_pass_the_early_check():
    """The early composition refuses nothing Hydra's own main would run (its flags, such as
    -m for a sweep, are left to it)."""
    from splitserve.train import store_hydra_configs

    store_hydra_configs()  # the options that live in code, as the train CLI registers them first
    conf = ROOT / "conf"
    for argv in (
        ["+recipe=smol", "draft=dflash", "train.steps=3", "hydra.run.dir=/tmp/x"],
        ["+recipe=ling3", "target=ling3_mini"],
        ["-m", "+recipe=smol", "draft.rope=full,partial"],
    ):
        assert hydra_problem(conf, "config", argv) is None, argv
    assert hydra_problem(conf, "study", ["+experiment=smol_drafts", "samples=30"]) is None


def test_read_json_names_the_file_and_the_place(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"a": 1,\n "b" 2}')
    with pytest.raises(ValueError, match=rf"thing {bad}: not valid JSON \(.*line 2 column 6\)"):
        read_json(bad, "thing")
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=rf"thing {bad}: not valid JSON \(not UTF-8 text\)"):
        read_json(bad, "thing")
    with pytest.raises(ValueError, match=rf"thing {tmp_path} is a directory"):
        read_json(tmp_path, "thing")
    with pytest.raises(FileNotFoundError, match=rf"thing {tmp_path / 'nope'} does not exist"):
        read_json(tmp_path / "nope", "thing")


def test_a_cut_metrics_line_is_named_with_its_file_and_line(tmp_path):
    good = json.dumps({"step": 1, "loss": 2.0})
    (tmp_path / "metrics.jsonl").write_text(good + "\n\n" + '{"step": 2, "lo')
    with pytest.raises(ValueError, match=rf"{tmp_path / 'metrics.jsonl'}:3: not valid JSON"):
        metrics_records(tmp_path)
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(f"{good}\n[1]\n".encode()))
    with pytest.raises(ValueError, match=r"metrics.jsonl.gz:2: expected a JSON object"):
        metrics_records(tmp_path)
    (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(f"{good}\n".encode()))
    assert metrics_records(tmp_path) == [{"step": 1, "loss": 2.0}]


def test_calibrate_says_when_limit_leaves_prompts_unread(tmp_path, capsys):
    from serving.calibrate import load_prompt_set

    prompts = tmp_path / "p.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert load_prompt_set(prompts, tmp_path, 2) == [["q0"], ["q1"]]
    assert capsys.readouterr().err == f"read the first 2 prompts of {prompts} (--limit)\n"
    for limit in (3, 5, None):  # every prompt read: nothing to say
        assert len(load_prompt_set(prompts, tmp_path, limit)) == 3
        assert capsys.readouterr().err == ""
    assert len(load_prompt_set("gsm8k", tmp_path, 2)) == 2
    assert capsys.readouterr().err == "read the first 2 prompts of gsm8k (--limit)\n"
