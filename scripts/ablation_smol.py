"""The smol-recipe draft ablations, end to end: train with equal budgets, evaluate, report.

    python scripts/ablation_smol.py OUT train-rope [overrides...]  # DSpark, three RoPE variants
    python scripts/ablation_smol.py OUT train-arch [overrides...]  # DFlash and EAGLE-3, same budget
    python scripts/ablation_smol.py OUT train-all-parallel [overrides...]  # all five jobs at once
    python scripts/ablation_smol.py OUT evaluate [--parallel N] [--limit N] [--max-new-tokens N]
    python scripts/ablation_smol.py OUT report  # OUT/rope.md|png, OUT/arch_t{0,1}.md|png

train-rope / train-arch are Hydra multiruns (jobs one after another in OUT/rope/N, OUT/arch/N);
train-all-parallel starts the same five jobs as simultaneous single runs with the same overrides
and the same OUT/<sweep>/<N> directories (on a multi-GPU machine, to fit a time budget).
Every training job gets the same overrides (steps, batch, split), so the budgets are equal:
the same number of samples from the same prompt stream. `evaluate` runs serving.evaluate on
every job's final checkpoint, greedy for all and temperature 1.0 for the DSpark/DFlash/EAGLE-3
comparison, on GSM8K (public test) and MT-Bench. With --parallel > 1 the evaluations share the
device, so their step times and tokens/s are not those of an idle machine (tau is unaffected).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout, installed or not

from splitserve.checkpoint import complete_checkpoints  # noqa: E402


def train(out: Path, sweep: str, axis: str, overrides: list[str]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "splitserve.train",
        "-m",
        "+recipe=smol",
        axis,
        *overrides,
        f"hydra.sweep.dir={out / sweep}",
    ]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


JOBS = [
    ("rope", "0", "draft.rope=full"),
    ("rope", "1", "draft.rope=partial"),
    ("rope", "2", "draft.rope=interleaved"),
    ("arch", "0", "draft=dflash"),
    ("arch", "1", "draft=eagle3 draft.num_layers=1"),
]


def single_run(job: Path, axis: str, overrides: list[str]) -> list[str]:
    """The command of one job run on its own, in the directory layout a multirun would give it."""
    return [
        sys.executable,
        "-m",
        "splitserve.train",
        "+recipe=smol",
        *axis.split(),
        *overrides,
        f"train.run_dir={job}",
        f"hydra.run.dir={job}",
    ]


def train_parallel(out: Path, overrides: list[str]) -> None:
    procs = []
    for i, (sweep, n, axis) in enumerate(JOBS):
        job = out / sweep / n
        cmd = single_run(job, axis, overrides) + [f"split.master_port={29400 + 10 * i}"]
        print(" ".join(cmd), flush=True)
        job.mkdir(parents=True, exist_ok=True)
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, stdout=open(job / "train.out", "w"), stderr=subprocess.STDOUT
            )
        )
    failed = [p.args for p in procs if p.wait() != 0]
    if failed:
        raise SystemExit(f"training failed: {failed}")


def common_checkpoint(jobs: list[Path]) -> str:
    """The latest checkpoint step every job has: equal budgets even when a time limit stopped
    some jobs earlier than others."""
    steps = [{p.name for p in complete_checkpoints(j)} for j in jobs]
    common = sorted(set.intersection(*steps)) if steps else []
    if not common:
        raise FileNotFoundError(f"no checkpoint step common to {[str(j) for j in jobs]}")
    return common[-1]


def evaluate(out: Path, args: list[str]) -> None:
    opts = dict(zip(args[::2], args[1::2], strict=True))
    parallel = int(opts.pop("--parallel", 1))
    common = [
        "--bench",
        "gsm8k,mtbench",
        "--limit",
        opts.pop("--limit", "6"),
        "--max-new-tokens",
        opts.pop("--max-new-tokens", "96"),
        "--no-plot",
    ]
    runs = []
    jobs = [out / sweep / n for sweep, n, _ in JOBS]
    step = common_checkpoint(jobs)
    print(f"evaluating checkpoint {step} of every job", flush=True)
    for job in jobs:
        temps = ["0"] if job.parent.name == "rope" and job.name != "0" else ["0", "1"]
        for t in temps:
            runs.append(
                [
                    sys.executable,
                    "-m",
                    "serving.evaluate",
                    "--checkpoint",
                    str(job / "checkpoints" / step),
                    "--temperature",
                    t,
                    *common,
                ]
            )
    import torch

    gpus = torch.cuda.device_count()
    if gpus > 1:  # spread the evaluations over the GPUs
        runs = [cmd + ["--device", f"cuda:{i % gpus}"] for i, cmd in enumerate(runs)]
    pending = list(runs)
    active: list[subprocess.Popen] = []
    while pending or active:
        while pending and len(active) < parallel:
            cmd = pending.pop(0)
            print(" ".join(cmd), flush=True)
            active.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL))
        done = active.pop(0)
        if done.wait() != 0:
            raise SystemExit(f"evaluation failed: {' '.join(done.args)}")


def report(out: Path) -> None:
    base = [sys.executable, "-m", "serving.ablation_report"]
    subprocess.run(base + [str(out / "rope"), "--out", str(out / "rope")], cwd=ROOT, check=True)
    # the comparison: DSpark (rope job 0, the recipe default) vs DFlash vs EAGLE-3
    for t in (
        "0",
        "1",
    ):
        subprocess.run(
            base
            + [
                str(out / "rope" / "0"),
                str(out / "arch"),
                "--temperature",
                t,
                "--out",
                str(out / f"arch_t{t}"),
            ],
            cwd=ROOT,
            check=True,
        )


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out, phase, rest = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3:]
    if phase == "train-rope":
        train(out, "rope", "draft.rope=full,partial,interleaved", rest)
    # EAGLE-3 is a single-layer chain: the recipe's num_layers=2 does not apply
    elif phase == "train-arch":
        for sweep, n, axis in JOBS:
            if sweep == "arch":
                subprocess.run(single_run(out / sweep / n, axis, rest), cwd=ROOT, check=True)
    elif phase == "train-all-parallel":
        train_parallel(out, rest)
    elif phase == "evaluate":
        evaluate(out, rest)
    elif phase == "report":
        report(out)
    else:
        raise SystemExit(f"unknown phase {phase!r}\n{__doc__}")


if __name__ == "__main__":
    main()
