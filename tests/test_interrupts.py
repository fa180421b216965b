"""Ctrl-C: training and evaluation end with one line on stderr and exit code 130, no traceback
from any process, and the line's command resumes the run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_training import TINY, losses

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("Traceback", "KeyboardInterrupt", "leaked semaphore", "terminate called", "wandb:")


def start(args: list[str]) -> subprocess.Popen:
    """A command of this checkout in its own session: the test signals it alone, or its group
    as a terminal's Ctrl-C does. SIGINT is reset to its default first: a suite started as a
    shell's background job (`pytest &`, nohup) inherits it ignored, and Python then never
    raises KeyboardInterrupt (both Ctrl-C tests failed so, 2026-12-05)."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_step(proc: subprocess.Popen, metrics: Path, step: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and any(
            json.loads(x).get("step", 0) >= step for x in metrics.read_text().splitlines()
        ):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before step {step}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the run never reached step {step}")


def starts(run_dir: Path) -> list[int | None]:
    """resumed_from of each start marker in metrics.jsonl."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["resumed_from"] for r in records if r.get("event") == "start"]


@pytest.mark.parametrize("target", ["leader", "group"])
def test_ctrl_c_ends_training_with_one_line_and_its_command_resumes(tmp_path, target):
    """`leader`: SIGINT to the launcher alone (it stops its workers); `group`: to every process,
    as a terminal's Ctrl-C. wandb logs offline without a word on the console."""
    run_dir = tmp_path / "run"
    overrides = [o for o in TINY if not o.startswith(("train.steps", "log.wandb_mode"))]
    overrides += ["train.steps=12", "log.wandb_mode=offline"]
    proc = start(["-m", "splitserve.train", *overrides, f"train.run_dir={run_dir}"])
    wait_for_step(proc, run_dir / "metrics.jsonl", 3)  # the checkpoint of step 2 is complete
    (os.killpg if target == "group" else os.kill)(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert not [n for n in NOISE if n in err + out], err[-3000:]
    notices = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(notices) == 1, err
    found = re.fullmatch(
        r"interrupted at step (\d+) of 12; the newest complete checkpoint is (\S+); "
        r"resume with: (.*)",
        notices[0],
    )
    assert found is not None, notices[0]
    step, checkpoint, command = int(found[1]), Path(found[2]), shlex.split(found[3])
    saved = int(checkpoint.name.removeprefix("step-"))
    assert checkpoint.parent == run_dir / "checkpoints" and step >= 3 and step - 2 <= saved <= step
    assert command[:3] == ["python", "-m", "splitserve.train"]
    assert command[-1] == f"train.run_dir={run_dir}" and command[3:-1] == overrides
    # every worker is gone (the launcher waited for them)
    pids = json.loads((run_dir / "workers.json").read_text()).values()
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    if target == "group":
        return
    resumed = subprocess.run(
        [sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {checkpoint} (step {saved} of 12)" in resumed.stderr
    assert starts(run_dir) == [None, saved]
    assert sorted(losses(run_dir)) == list(range(1, 13))
    # the closing table instead of wandb's block and a JSON dump; wandb's files are all there
    assert "wandb:" not in resumed.stdout + resumed.stderr
    assert "training finished" in resumed.stdout and '"first_loss"' not in resumed.stdout
    wandb_runs = sorted(run_dir.glob("wandb/offline-run-*"))
    assert wandb_runs and list(wandb_runs[-1].glob("run-*.wandb"))
    assert f"wandb (offline)  {wandb_runs[-1]}" in resumed.stdout


def test_ctrl_c_ends_an_evaluation_with_one_line(tmp_path):
    from test_checkpoint import LEGACY, legacy_target

    run_dir = tmp_path / "run"
    shutil.copytree(LEGACY, run_dir / "checkpoints", ignore=shutil.ignore_patterns("README.md"))
    target = legacy_target(tmp_path / "target")
    args = ["--checkpoint", str(run_dir), "--target", str(target), "--bench", "gsm8k"]
    proc = start(["-m", "serving.evaluate", *args, "--limit", "20", "--no-plot"])
    seen = []
    for line in proc.stderr:  # the checkpoint is resolved: main is inside its try
        seen.append(line)
        if line.startswith("using "):
            break
    else:
        pytest.fail(f"evaluate never resolved its checkpoint: {''.join(seen)[-3000:]}")
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert not [n for n in NOISE if n in out + err], err[-3000:]
    assert err.strip().splitlines()[-1] == "interrupted: no benchmark finished"
