"""scripts/tau_experiment.sh's control flow on CPU (its GPU work is in docs/ablations): the
script parses, refuses bad settings, `eval-ablate` evaluates each run once it has ended,
skips runs that ended without a summary, and waits for runs still training (lane or not), and
`report-ablate` reports only the axes whose runs exist. `PY` is a stub that
records each evaluation instead of running it."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "tau_experiment.sh"


def _env(w: Path, **extra) -> dict:
    stub = w / "py"
    stub.write_text('#!/usr/bin/env bash\necho "$@" >> "$(dirname "$0")/calls"\n')
    stub.chmod(0o755)
    return {**os.environ, "W": str(w), "PY": str(stub), **extra}


def _chain(w: Path, abl: str, **env) -> subprocess.Popen:
    """`eval-ablate`'s chain over the runs under w, in the foreground of a child process."""
    return subprocess.Popen(
        ["bash", str(SCRIPT), "eval-ablate-fg"], env=_env(w, ABL=abl, **env),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_calls(w: Path, n: int, chain: subprocess.Popen | None = None) -> None:
    """Until the stub PY has recorded n calls (evaluations, or a lane's training run), with
    `chain`, if given, still running all the while."""
    calls, deadline = w / "calls", time.time() + 30
    while not calls.exists() or calls.read_text().count("\n") < n:
        assert time.time() < deadline and (chain is None or chain.poll() is None)
        time.sleep(0.2)


def _evaluated(w: Path) -> list[str]:
    """The checkpoints the chain evaluated, in order."""
    lines = (w / "calls").read_text().splitlines()
    return [line.split("--checkpoint ")[1].split()[0] for line in lines]


def _run(w: Path, *args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=_env(w, **env), capture_output=True, text=True
    )


def test_the_script_parses_and_refuses_bad_settings(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    out = subprocess.run(
        ["bash", str(SCRIPT), "taus"], env=_env(tmp_path, GPUS="0"), capture_output=True, text=True
    )
    assert out.returncode == 1 and "GPUS=0: a positive number of GPUs" in out.stdout
    for phase in ("ablate", "eval-ablate"):  # an unknown ablation is named, nothing started
        out = _run(tmp_path, phase, ABL="mla rope_half")
        assert out.returncode == 1 and "unknown ablation rope_half" in out.stdout
        assert not (tmp_path / "eval-ablate" / "chain.pid").exists()
    # five layers are the recipe's default (pass 26): layers5 would train the baseline again
    out = _run(tmp_path, "ablate", ABL="layers3 layers5")
    assert out.returncode == 1 and "layers5 is the baseline" in out.stdout
    assert not (tmp_path / "ablate").exists()


def test_eval_ablate_takes_each_run_as_it_ends_and_skips_failed_ones(tmp_path):
    w = tmp_path
    for run in ("runs/dspark", "ablate/mla", "ablate/layers1", "ablate/layers2"):
        (w / run).mkdir(parents=True)
    (w / "eval-ablate").mkdir()
    (w / "runs/dspark/summary.json").write_text("{}")
    (w / "ablate/mla/summary.json").write_text("{}")
    failed = subprocess.Popen(["true"])  # layers1's process: ended without a summary
    failed.wait()
    (w / "ablate/layers1.pid").write_text(str(failed.pid))
    lane = subprocess.Popen(["sleep", "60"])  # the lane still training layers2
    (w / "ablate/lane0.pid").write_text(str(lane.pid))
    chain = _chain(w, "layers1 mla layers2")
    try:
        _wait_for_calls(w, 2, chain)  # dspark, mla
        time.sleep(1)
        assert chain.poll() is None  # waiting for layers2 while its lane lives
        (w / "ablate/layers2/summary.json").write_text("{}")
        lane.send_signal(signal.SIGTERM)
        out, _ = chain.communicate(timeout=30)
    finally:
        lane.kill()
        chain.kill()
    assert _evaluated(w) == [str(w / r) for r in ("runs/dspark", "ablate/mla", "ablate/layers2")]
    assert f"{w}/ablate/layers1: no summary, skipped" in out


def test_eval_ablate_waits_for_a_training_run_whose_lane_is_gone(tmp_path):
    # pass 14 stopped the lane so that no later run would start; the run it had started kept
    # training and must still be evaluated once it ends
    w = tmp_path
    for run in ("runs/dspark", "ablate/layers1"):
        (w / run).mkdir(parents=True)
    (w / "eval-ablate").mkdir()
    (w / "runs/dspark/summary.json").write_text("{}")
    training = subprocess.Popen(["sleep", "60"])  # layers1's own process; no lane alive
    (w / "ablate/layers1.pid").write_text(str(training.pid))
    chain = _chain(w, "layers1 layers2")
    try:
        _wait_for_calls(w, 1, chain)  # dspark's
        time.sleep(6)  # past one poll of the chain
        assert chain.poll() is None  # still waiting for layers1
        (w / "ablate/layers1/summary.json").write_text("{}")
        training.kill()
        training.wait()
        out, _ = chain.communicate(timeout=30)
    finally:
        training.kill()
        chain.kill()
    assert _evaluated(w) == [str(w / "runs/dspark"), str(w / "ablate/layers1")]
    assert f"{w}/ablate/layers2: no summary, skipped" in out  # never started, no lane


@pytest.mark.parametrize(
    "first, second, abl",
    [
        ("layers1", "layers2", "layers1 layers2"),
        # pass 16: ABL put mla first, which the lane trains after rope_partial (the ablations'
        # own order); rope_partial's evaluation must not wait for it
        ("rope_partial", "mla", "mla rope_partial"),
    ],
)
def test_without_a_baseline_run_each_ablation_is_evaluated_as_it_ends(tmp_path, first, second, abl):
    # RUNS="" (the baseline is an earlier pass's): no wait for a runs/dspark that never starts
    w = tmp_path
    for run in (f"ablate/{first}", f"ablate/{second}", "eval-ablate"):
        (w / run).mkdir(parents=True)
    (w / f"ablate/{first}/summary.json").write_text("{}")
    lane = subprocess.Popen(["sleep", "60"])  # the lane, now training the second run
    (w / "ablate/lane0.pid").write_text(str(lane.pid))
    chain = _chain(w, abl, RUNS="")
    try:
        _wait_for_calls(w, 1, chain)  # the first's, while the lane still lives
        assert lane.poll() is None
        (w / f"ablate/{second}/summary.json").write_text("{}")
        lane.kill()
        lane.wait()
        chain.communicate(timeout=30)
    finally:
        lane.kill()
        chain.kill()
    assert _evaluated(w) == [str(w / f"ablate/{first}"), str(w / f"ablate/{second}")]


def test_with_two_gpus_a_run_that_ends_first_is_evaluated_first(tmp_path):
    # GPUS=2: layers1 trains on GPU 0, layers2 on GPU 1; layers2 ends first and must not wait
    # behind layers1, which the lanes' order lists first
    w = tmp_path
    for run in ("ablate/layers1", "ablate/layers2", "eval-ablate"):
        (w / run).mkdir(parents=True)
    training = subprocess.Popen(["sleep", "60"])  # layers1's own process, lane 0 alive
    (w / "ablate/layers1.pid").write_text(str(training.pid))
    (w / "ablate/lane0.pid").write_text(str(training.pid))
    (w / "ablate/layers2/summary.json").write_text("{}")  # lane 1 done
    chain = _chain(w, "layers1 layers2", RUNS="", GPUS="2")
    try:
        _wait_for_calls(w, 1, chain)
        assert _evaluated(w) == [str(w / "ablate/layers2")] and chain.poll() is None
        (w / "ablate/layers1/summary.json").write_text("{}")
        training.kill()
        training.wait()
        chain.communicate(timeout=30)
    finally:
        training.kill()
        chain.kill()
    assert _evaluated(w) == [str(w / "ablate/layers2"), str(w / "ablate/layers1")]


def test_report_ablate_reports_the_axes_that_ran(tmp_path):
    w = tmp_path
    for run in ("runs/dspark", "ablate/layers1", "ablate/mla"):
        (w / run).mkdir(parents=True)
    out = _run(w, "report-ablate", str(w / "report"))
    assert out.returncode == 0, out.stdout + out.stderr
    calls = (w / "calls").read_text().splitlines()
    base, a = w / "runs/dspark", w / "ablate"
    assert calls == [
        f"-m serving.ablation_report {base} {a}/mla --out {w}/report/attention_h200",
        f"-m serving.ablation_report {a}/layers1 {base} --out {w}/report/layers_h200",
    ]
    assert "rope_h200: no ablation run, skipped" in out.stdout
    assert "block_h200: no ablation run, skipped" in out.stdout
    (w / "calls").unlink()
    shutil.rmtree(base)
    out = _run(w, "report-ablate", str(w / "report"))
    assert out.returncode == 1 and "the baseline did not run" in out.stdout
    # an earlier pass's baseline, as results copied without weights
    earlier = tmp_path / "pass14/runs/dspark"
    earlier.mkdir(parents=True)
    out = _run(w, "report-ablate", str(w / "report"), BASE=str(earlier))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (w / "calls").read_text().splitlines()[-1] == (
        f"-m serving.ablation_report {a}/layers1 {earlier} --out {w}/report/layers_h200"
    )


def test_no_main_runs_and_pack_without_dspark(tmp_path):
    # RUNS="": ablations only, against an earlier baseline; pack then exports nothing
    w = tmp_path
    (w / "regen.jsonl").write_text("".join(f'{{"g": {g}}}\n' for g in range(100)))
    out = _run(w, "train", RUNS="", SAMPLES="32", GPUS="1")
    assert out.returncode == 0 and "started: 0 runs" in out.stdout, out.stdout + out.stderr
    assert not list((w / "runs").glob("lane*.pid"))
    (w / "ablate/layers1/eval").mkdir(parents=True)
    out = _run(w, "pack", str(w / "pack"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nothing exported" in (w / "export.log").read_text()
    assert (w / "checksums.txt").read_text() == ""
    listed = subprocess.run(
        ["tar", "-tzf", str(w / "pack/results.tar.gz")], capture_output=True, text=True
    ).stdout.split()
    assert "ablate/layers1/eval/" in listed and "export.log" in listed


def test_lanes_train_several_runs_at_once_on_one_gpu(tmp_path):
    """LANES=2 on one GPU: two lanes start at once, run k in lane k mod 2, both on GPU 0, each
    run on a port of its own (two at once on one port would collide); the third run waits for
    lane 0's first to end. LANES=0 is refused."""
    w = tmp_path
    (w / "regen.jsonl").write_text("".join(f'{{"g": {g}}}\n' for g in range(100)))
    # the stub records its start (port, GPU) and, at its end, how many runs had started by
    # then; each record one append, so that the lanes' records never interleave
    stub = w / "py"
    stub.write_text(
        '#!/usr/bin/env bash\nd=$(dirname "$0")\n'
        'for a in "$@"; do case $a in split.master_port=*) port=${a#*=} ;; '
        "hydra.run.dir=*) run=$(basename ${a#*=}) ;; esac; done\n"
        'echo "start $run $port gpu=$CUDA_VISIBLE_DEVICES" >> "$d/calls"\n'
        'touch "$d/started.$run"\n'
        'for i in $(seq 100); do n=$(ls "$d"/started.* | wc -l); [ $n -ge 2 ] && break\n'
        "sleep 0.1; done\n"
        'echo "end $run $n" >> "$d/calls"\n'
    )
    stub.chmod(0o755)
    env = {**os.environ, "W": str(w), "PY": str(stub), "SAMPLES": "32", "GPUS": "1"}
    abl = "layers1 layers2 layers3"
    out = subprocess.run(
        ["bash", str(SCRIPT), "ablate"], env={**env, "ABL": abl, "LANES": "2"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run k in lane k mod 2, on GPU k mod 1" in out.stdout
    _wait_for_calls(w, 6)  # three starts and three ends
    calls = (w / "calls").read_text().splitlines()
    starts = sorted(c for c in calls if c.startswith("start "))
    assert starts == [f"start {n} {29600 + 10 * k} gpu=0" for k, n in enumerate(abl.split())]
    ends = {
        c.split()[1]: (i, int(c.split()[2])) for i, c in enumerate(calls) if c.startswith("end ")
    }
    # layers1 and layers2 ran at once: each saw the other started before it ended (one lane
    # after the other, the first would have waited out its 10 s and seen only itself)
    assert ends["layers1"][1] >= 2 and ends["layers2"][1] >= 2
    assert ends["layers1"][0] < calls.index("start layers3 29620 gpu=0")  # lane 0 waits
    assert sorted(p.name for p in (w / "ablate").glob("lane*.pid")) == ["lane0.pid", "lane1.pid"]
    assert "layers3" not in (w / "ablate/lane1.log").read_text()  # lane 1 trained layers2 only
    bad = subprocess.run(
        ["bash", str(SCRIPT), "ablate"], env={**env, "ABL": abl, "LANES": "0"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 1 and "LANES=0: a positive number of runs per GPU" in bad.stdout


@pytest.mark.parametrize("flags", [None, ""])
def test_speed_times_every_run_with_the_speed_flags(tmp_path, flags):
    """`speed`: every timed run (the fixed schedules, the threshold and prefix ones, both SPS
    tables) gets SPEED_FLAGS, by default --compile (the table's batch-1 figures are compiled
    ones); calibration, which times nothing, never does. SPEED_FLAGS="" leaves it out."""
    w = tmp_path
    env = {} if flags is None else {"SPEED_FLAGS": flags}
    out = _run(w, "speed", RUNS="dspark eagle3", GPUS="1", **env)
    assert out.returncode == 0, out.stdout + out.stderr
    calls = (w / "calls").read_text().splitlines()
    timed = [c for c in calls if "serving.calibrate" not in c]

    def kind(call: str) -> str:
        for scheduler in ("--scheduler threshold", "--scheduler prefix"):
            if scheduler in call:
                return scheduler
        if "profile_sps" in call:
            return "sps-steps" if "--checkpoint" in call else "sps-verify"
        return Path(call.split("--out ")[1].split()[0]).name  # a fixed run: its output folder

    kinds = sorted(kind(c) for c in timed)
    assert kinds == [
        "--scheduler prefix", "--scheduler threshold", "dspark-fixed", "eagle3-fixed",
        "sps-steps", "sps-verify",
    ]  # fmt: skip
    compiled = [c for c in timed if "--compile" in c.split()]
    assert len(compiled) == (len(timed) if flags is None else 0)
    assert not any("--compile" in c for c in calls if "serving.calibrate" in c)


# splitserve.regenerate's file for --out F --samples N --start S --shard K/M, the last line
# without its newline
FAKE_REGEN = (
    "import sys; a = sys.argv[1:]; v = lambda f: a[a.index(f) + 1]; "
    "k, m = map(int, v('--shard').split('/')); "
    "ids = [g for g in range(int(v('--start')), int(v('--samples'))) if g % m == k]; "
    "open(v('--out'), 'w').write(chr(10).join('{\\\"g\\\": %d}' % g for g in ids))"
)


def _fake_regenerate(w: Path) -> Path:
    """PY: a stand-in for splitserve.regenerate that records its call and writes its shard's
    ids (no target on CPU here), and the real python for the merge."""
    fake = w / "fake_py"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$@" >> "$(dirname "$0")/calls"\n'
        f'[ "$1" = -c ] && exec {sys.executable} "$@"\n'
        f'exec {sys.executable} -c "{FAKE_REGEN}" "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def test_a_first_regeneration_starts_at_zero_and_checks_no_file(tmp_path):
    env = _env(tmp_path, SAMPLES="100", GPUS="1", PY=str(_fake_regenerate(tmp_path)))
    out = subprocess.run(["bash", str(SCRIPT), "regen"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "samples 0..182 over 1 GPUs" in out.stdout, out.stdout
    deadline = time.time() + 60
    while not (tmp_path / "regen.jsonl").exists():  # merged by the real python
        assert time.time() < deadline, (tmp_path / "regen/regen.log").read_text()
        time.sleep(0.2)
    call = (tmp_path / "calls").read_text().splitlines()[0]
    assert "--samples 183 --start 0 --shard 0/1" in call and "--extends" not in call


def test_regenerated_data_travel_in_parts_and_regen_keeps_a_file_brought_in(tmp_path):
    """data-out cuts W/regen.jsonl into gzipped parts (what a device call brings back), data-in
    puts them together in another W (never over an existing file), and `regen` then keeps
    the file when it holds what a run needs, and extends it when it does not."""
    a, b, parts = tmp_path / "a", tmp_path / "b", tmp_path / "parts"
    a.mkdir()
    b.mkdir()
    lines = "".join(f'{{"g": {g}, "messages": []}}\n' for g in range(5000))
    (a / "regen.jsonl").write_text(lines)

    def script(*args, w, **env):
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=_env(w, **env), capture_output=True, text=True
        )

    assert script("data-out", str(parts), w=a).returncode == 0
    assert sorted(p.name for p in parts.iterdir()) == ["regen.jsonl.gz.part0"]
    out = script("data-in", str(parts), w=b)
    assert out.returncode == 0 and "5000 samples" in out.stdout
    assert (b / "regen.jsonl").read_text() == lines
    again = script("data-in", str(parts), w=b)
    assert again.returncode == 1 and "exists; not overwritten" in again.stdout
    kept = script("regen", w=b, SAMPLES="4000")  # 4,064 with the held-out prompts
    assert kept.returncode == 0 and "kept:" in kept.stdout
    waited = script("wait", "regen", "5", w=b, SAMPLES="4000")  # nothing ran: no logs to show
    assert waited.returncode == 0 and "5000 samples in regen.jsonl" in waited.stdout
    short = script("regen", w=b, SAMPLES="6000", REGEN_SAMPLES="5000")
    assert short.returncode == 0 and "regen.jsonl has 5000, ids up to 4999" in short.stdout
    assert not (b / "calls").exists()  # nothing regenerated
    for extra in ({"EXTRA": "train.init_from=/x data.shuffle_seed=2"},
                  {"REGEN_EXTRA": "data.shuffle_seed=1"},
                  {"EXTRA": "++data.shuffle_seed=3"}):  # fmt: skip
        reordered = script("regen", w=b, SAMPLES="6000", **extra)  # would repeat its prompts
        assert reordered.returncode == 1 and "sets data.shuffle_seed" in reordered.stdout
    assert not (b / "calls").exists()
    refused = script("train", w=b, SAMPLES="6000")  # a run's stream would wrap around the file
    assert refused.returncode == 1 and "has 5000 samples; a run takes 6064" in refused.stdout
    (b / "regen1.jsonl").write_text("{}\n")  # a failed regeneration's shard: out of the merge
    # too short for the budget: extended from the id after its last, to REGEN_SAMPLES (12 % over
    # SAMPLES + EVAL_HELD, 6,791 here), in the background
    extend = script("regen", w=b, SAMPLES="6000", GPUS="2", PY=str(_fake_regenerate(b)))
    assert extend.returncode == 0 and "samples 5000..6790 over 2 GPUs" in extend.stdout
    assert "moved aside: 1 shard files" in extend.stdout
    assert list((b / "regen").glob("stale-*/regen1.jsonl"))
    deadline = time.time() + 60
    while (b / "regen.jsonl").read_text().count("\n") < 6791:  # merged by the real python
        assert time.time() < deadline, (b / "regen/regen.log").read_text()
        time.sleep(0.2)
    calls = sorted((b / "calls").read_text().splitlines()[:2])
    assert all(f"--samples 6791 --start 5000 --extends {b}/regen.jsonl" in c for c in calls)
    assert "--shard 0/2" in calls[0] and "--shard 1/2" in calls[1]
    ids = [json.loads(x)["g"] for x in (b / "regen.jsonl").read_text().splitlines()]
    assert ids == list(range(6791))  # in id order, one line each (a shard's last line had no \n)
    assert not list(b.glob("regen[0-9]*.jsonl*"))  # the merged shards are gone
    usage = script(w=b)
    assert usage.returncode == 2 and "data-in DIR" in usage.stdout and "follow S" in usage.stdout


def test_steps_sets_a_runs_length_apart_from_its_file(tmp_path):
    """STEPS (default SAMPLES / MICRO) is the runs' train.steps, their warm-up 4 % of it: more
    than SAMPLES / MICRO walks the file again; a file shorter than SAMPLES is still refused."""
    w = tmp_path
    (w / "regen.jsonl").write_text("".join(f'{{"g": {g}}}\n' for g in range(100)))
    out = _run(w, "train", RUNS="dspark", SAMPLES="32", GPUS="1", STEPS="50")
    assert out.returncode == 0, out.stdout + out.stderr
    _wait_for_calls(w, 1)  # the lane starts the run in the background
    call = (w / "calls").read_text()
    assert "train.steps=50 train.warmup_steps=2 " in call and "train.micro_batch=16" in call
    bad = _run(w, "train", RUNS="dspark", SAMPLES="32", GPUS="1", STEPS="0")
    assert bad.returncode == 1 and "STEPS=0: a positive number of steps" in bad.stdout
    short = _run(w, "train", RUNS="dspark", SAMPLES="64", GPUS="1", STEPS="500")
    assert short.returncode == 1 and "has 100 samples; a run takes 128" in short.stdout


def test_the_pipeline_runs_from_a_copy_of_the_code(tmp_path):
    """`pipeline` copies the code into W/src and runs every phase from there (a device call
    replaces the checkout's files while a phase may be starting a process), with the shared
    data read where they are: each process the pipeline starts runs in W/src, told the data's
    place by SPLITSERVE_SHARED_DATA."""
    w = tmp_path
    (w / "regen.jsonl").write_text("".join(f'{{"g": {g}}}\n' for g in range(100)))
    stub = w / "py"  # records where it ran and the data it was pointed at
    stub.write_text(
        '#!/usr/bin/env bash\necho "$PWD|$SPLITSERVE_SHARED_DATA|$*" >> "$(dirname "$0")/calls"\n'
    )
    stub.chmod(0o755)
    env = {**os.environ, "W": str(w), "PY": str(stub), "POLL": "1", "GPUS": "1", "SAMPLES": "32"}
    env.pop("SPLITSERVE_SHARED_DATA", None)
    env |= {"RUNS": "dspark", "EVAL_JOBS": "dspark-t0", "SPEED": "0", "ABLATE": "0", "CURVE": "0"}
    out = subprocess.run(["bash", str(SCRIPT), "pipeline"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "started: the whole experiment" in out.stdout, out.stderr
    deadline = time.time() + 30
    while "pipeline done" not in (w / "pipeline.log").read_text():
        assert time.time() < deadline, (w / "pipeline.log").read_text()
        time.sleep(0.2)
    src = w / "src"
    assert (src / "scripts" / "tau_experiment.sh").read_text() == SCRIPT.read_text()
    assert (src / "splitserve" / "train.py").is_file() and (src / "conf").is_dir()
    assert not (src / "docs").exists() and not (src / "tests").exists()
    assert f"bash {src}/scripts/tau_experiment.sh train" in (w / "pipeline.log").read_text()
    calls = [c.split("|") for c in (w / "calls").read_text().splitlines()]
    assert [c[2].split()[1] for c in calls] == ["splitserve.train", "serving.evaluate"]
    data = str(ROOT.parent / "shared" / "data")
    assert all(Path(c[0]) == src and Path(c[1]).resolve() == Path(data).resolve() for c in calls)
    assert not list(w.glob("src.partial"))


def test_the_pipeline_copy_leaves_out_a_w_inside_the_checkout_and_one_runs_at_a_time(tmp_path):
    """W relative to the checkout is made absolute (the phases run from W/src, where the
    relative path would point elsewhere) and left out of the copy when it lies inside the
    checkout; a second `pipeline` in a W whose pipeline runs is refused, and so is W set to
    the checkout itself; with nothing to evaluate it has no eval phase."""
    co = tmp_path / "checkout"  # a stand-in checkout: the script and a module
    (co / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, co / "scripts" / "tau_experiment.sh")
    (co / "splitserve").mkdir()
    (co / "splitserve" / "x.py").write_text("")
    w = co / "w"
    w.mkdir()
    (w / "regen.jsonl").write_text("".join(f'{{"g": {g}}}\n' for g in range(100)))
    stub = tmp_path / "py"  # a training run that takes 3 s
    stub.write_text('#!/usr/bin/env bash\necho "$PWD $*" >> "$(dirname "$0")/calls"; sleep 3\n')
    stub.chmod(0o755)
    env = {**os.environ, "W": "w", "PY": str(stub), "POLL": "1", "GPUS": "1", "SAMPLES": "32"}
    env |= {"RUNS": "dspark", "EVAL_JOBS": "", "SPEED": "0", "ABLATE": "0", "CURVE": "0"}

    def pipeline(**extra):
        return subprocess.run(
            ["bash", str(co / "scripts" / "tau_experiment.sh"), "pipeline"],
            env=env | extra, capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip

    first = pipeline()
    assert first.returncode == 0, first.stdout + first.stderr
    second = pipeline()
    assert second.returncode == 1 and f"a pipeline is running in {w}" in second.stdout
    deadline = time.time() + 30
    while "pipeline done" not in (w / "pipeline.log").read_text():
        assert time.time() < deadline, (w / "pipeline.log").read_text()
        time.sleep(0.2)
    assert (w / "src" / "splitserve" / "x.py").is_file() and not (w / "src" / "w").exists()
    # no evaluation asked for (EVAL_JOBS="", CURVE=0): no eval phase, nor its wait
    assert "tau_experiment.sh eval" not in (w / "pipeline.log").read_text()
    assert "tau_experiment.sh wait eval" not in (w / "pipeline.log").read_text()
    assert (tmp_path / "calls").read_text().startswith(f"{w / 'src'} -m splitserve.train ")
    assert f"path:{w}/regen.jsonl" in (tmp_path / "calls").read_text()
    itself = pipeline(W=".")
    assert itself.returncode == 1 and "is the checkout itself" in itself.stdout
