"""Benchmark of the split: throughput of each side, who waits for whom, and which split is best.

    python scripts/bench_train.py --out docs/results/splits/bench_train.json [Hydra overrides ...]
    python scripts/bench_train.py --out docs/results/splits/splits.json --splits 2+6,4+4,6+2 \
        --global-batch 24 [overrides ...]

One job: runs a real training job (the same code path as `python -m splitserve.train`) into a
temporary run directory and writes JSON with, per side: samples/s and tokens/s (over each
worker's wall time), the trainer's data-wait fraction and the target's credit-wait (idle)
fraction, and steady-state rates that leave out the first batch / first steps (compilation,
CUDA warm-up): samples/s of one target worker while producing, and one trainer's compute time
per optimizer step.

`--splits`: the same work (global batch G = micro_batch x trainers, the same steps) under each
split T+G', one job per split. A split that fits on the machine (T + G' <= --max-procs, default:
the visible GPUs) is run as it is and measured. One that does not fit is projected from a 1 + 1
proxy job whose trainer takes G / G' samples per step (what each trainer of that split takes):
step time = max(trainer compute per step, G / (T x one target's samples/s)). The projection
leaves out the trainers' gradient all-reduce and assumes targets scale linearly (each has its
own GPU and its own samples); runs that fit report both figures, so the model can be checked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitserve.train import run, wait_fraction  # noqa: E402

BASE = ["log.wandb_mode=disabled", "log.progress=false", "train.checkpoint_every=0"]
WARMUP_STEPS = (
    2  # trainer steps left out of the steady-state figures (compilation, allocator warm-up)
)


def side(stats: list[dict], wait_key: str) -> dict:
    samples = sum(s["samples"] for s in stats)
    tokens = sum(s["tokens"] for s in stats)
    per_worker_wall = max(s["wall_s"] for s in stats)
    return {
        "workers": len(stats),
        "samples": samples,
        "tokens": tokens,
        "samples_per_s": samples / max(per_worker_wall, 1e-9),
        "tokens_per_s": tokens / max(per_worker_wall, 1e-9),
        f"{wait_key}_frac": wait_fraction(stats, wait_key),
    }


def steady_target_time(stats: list[dict], first_batch: int) -> tuple[int, float]:
    """(samples, seconds) the target workers spent producing, each one's first batch (warm-up)
    left out unless it produced nothing else."""
    samples, seconds = 0, 0.0
    for s in stats:
        times = s.get("produce_s", [])
        steady = times[first_batch:] if len(times) > first_batch else times
        samples, seconds = samples + len(steady), seconds + sum(steady)
    return samples, seconds


def steady_trainer_step(records: list[dict]) -> dict:
    """Trainer 0 after warm-up: mean step time (throughput), median compute time (step minus data
    wait; the median keeps an occasional recompilation out of the steady cost)."""
    steady = records[WARMUP_STEPS:] if len(records) > WARMUP_STEPS else records
    return {
        "step_s": statistics.mean(r["step_s"] for r in steady),
        "compute_s": statistics.median(r["step_s"] * (1.0 - r["data_wait_frac"]) for r in steady),
        "steps_counted": len(steady),
    }


def first_steps(records: list[dict], n: int = 50) -> dict:
    """The first n steps: the slowest, the slowest after the first, and compilation inside them
    (what a bound on early step times must hold against)."""
    head = records[:n]
    if not head:
        return {}
    later = head[1:] or head
    return {
        "steps": len(head),
        "first_step_s": head[0]["step_s"],
        "max_step_s": max(r["step_s"] for r in head),
        "max_step_s_after_first": max(r["step_s"] for r in later),
        "median_step_s": statistics.median(r["step_s"] for r in head),
        "compile_s": sum(r.get("compile_s", 0.0) for r in head),
        "steps_that_compiled": [r["step"] for r in head if r.get("compile_s", 0.0) > 0.05],
    }


def measure(overrides: list[str], keep_run: Path | None = None) -> dict:
    """One real training job; its throughput and wait figures. `keep_run`: run in that directory
    (kept, with its checkpoints) instead of a temporary one."""
    overrides = [*BASE, *overrides]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        node = compose("config", overrides=overrides)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = keep_run or Path(tmp) / "run"
        summary = run(node, run_dir)
        stats = {p.stem: json.loads(p.read_text()) for p in (run_dir / "stats").glob("*.json")}
        records = [
            json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()
        ]
    records = [r for r in records if "event" not in r]
    targets = [v for k, v in stats.items() if k.startswith("target")]
    trainers = [v for k, v in stats.items() if k.startswith("trainer")]
    first_batch = max(1, int(node.target.generate_batch)) if node.target.regenerate else 1
    target = side(targets, "credit_wait_s") if targets else None
    produced, producing_s = steady_target_time(targets, first_batch)
    return {
        "overrides": overrides,
        "steps": summary["steps"],
        "target": target,
        "trainer": side(trainers, "wait_s"),
        "steady": {
            "target_produced": produced,
            "target_producing_s": producing_s,
            "target_samples_per_s_per_worker": produced / producing_s if producing_s > 0 else None,
            "tokens_per_sample": target["tokens"] / max(target["samples"], 1) if target else None,
            **steady_trainer_step(records),
        },
        "first_steps": first_steps(records),
        "per_step": [
            {
                "step_s": round(r["step_s"], 4),
                "data_wait_frac": round(r["data_wait_frac"], 4),
                "compile_s": round(r.get("compile_s", 0.0), 4),
            }
            for r in records
        ],
        "eval_sim_tau": [r["eval_sim_tau"] for r in records if "eval_sim_tau" in r],
        "target_send_s": sum(s.get("send_s", 0.0) for s in targets),
        "first_loss": summary["first_loss"],
        "last_loss": summary["last_loss"],
    }


def parse_splits(text: str) -> list[tuple[int, int]]:
    splits = []
    for item in text.split(","):
        parts = item.strip().split("+")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(
                f"--splits: {item!r} is not TARGETS+TRAINERS with both at least 1 (e.g. 4+4)"
            )
        splits.append((int(parts[0]), int(parts[1])))
    return splits


def pooled_target_rate(jobs: list[dict]) -> float | None:
    """One target worker's samples/s over every job of the comparison (all targets of all jobs
    run the same model on a GPU of their own), so small proxy jobs borrow the big jobs' samples."""
    produced = sum(j["steady"]["target_produced"] for j in jobs)
    seconds = sum(j["steady"]["target_producing_s"] for j in jobs)
    return produced / seconds if seconds > 0 else None


def project(job: dict, targets: int, global_batch: int, rate: float | None) -> dict:
    """Step time of a split: the slower of the targets' supply (at `rate` samples/s per target)
    and the trainer compute per step measured in `job`."""
    supply_s = global_batch / (targets * rate) if rate else float("inf")
    compute_s = job["steady"]["compute_s"]
    step_s = max(supply_s, compute_s)
    return {
        "supply_s_per_step": supply_s,
        "trainer_compute_s_per_step": compute_s,
        "step_s": step_s,
        "samples_per_s": global_batch / step_s,
        "bottleneck": "target" if supply_s > compute_s else "trainer",
    }


def compare_splits(
    splits: list[tuple[int, int]],
    global_batch: int,
    max_procs: int | None,
    overrides: list[str],
    on_result=None,
) -> dict:
    for t, g in splits:
        if global_batch % g:
            raise SystemExit(
                f"--global-batch {global_batch} is not divisible by the {g} trainers of split "
                f"{t}+{g}"
            )
    rows, proxies = [], {}
    for t, g in splits:
        micro = global_batch // g
        fits = max_procs is None or t + g <= max_procs
        if fits:
            job = measure(
                [
                    *overrides,
                    f"split.target_procs={t}",
                    f"split.trainer_procs={g}",
                    f"train.micro_batch={micro}",
                    "train.grad_accum=1",
                ]
            )
        else:
            if micro not in proxies:
                proxies[micro] = measure(
                    [
                        *overrides,
                        "split.target_procs=1",
                        "split.trainer_procs=1",
                        f"train.micro_batch={micro}",
                        "train.grad_accum=1",
                    ]
                )
            job = proxies[micro]
        row = {
            "split": f"{t}+{g}",
            "micro_batch": micro,
            "mode": "measured" if fits else "projected from 1+1",
            "job": job,
        }
        if fits:
            row["measured"] = {
                "step_s": job["steady"]["step_s"],
                "samples_per_s": global_batch / job["steady"]["step_s"],
                "trainer_data_wait_frac": job["trainer"]["wait_s_frac"],
                "target_idle_frac": (job["target"] or {}).get("credit_wait_s_frac"),
            }
        rows.append(row)
        print(f"split {row['split']} ({row['mode']}): job done in {job['steps']} steps", flush=True)
        if on_result is not None:
            on_result(rows)
    # a proxy counts once
    rate = pooled_target_rate(list({id(r["job"]): r["job"] for r in rows}.values()))
    for (t, _), row in zip(splits, rows, strict=True):
        row["projected"] = project(row["job"], t, global_batch, rate)

    def best_rate(row: dict) -> float:
        return (row.get("measured") or row["projected"])["samples_per_s"]

    best = max(rows, key=best_rate)
    for row in rows:
        print(f"split {row['split']} ({row['mode']}): {best_rate(row):.2f} samples/s", flush=True)
    return {
        "global_batch": global_batch,
        "max_procs": max_procs,
        "target_samples_per_s_per_worker": rate,
        "splits": rows,
        "best": {"split": best["split"], "samples_per_s": best_rate(best), "basis": best["mode"]},
    }


def default_max_procs() -> int | None:
    return torch.cuda.device_count() if torch.cuda.is_available() else None


def machine() -> dict:
    return {
        "device": torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else (platform.processor() or "cpu"),
        "gpus": torch.cuda.device_count(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out", required=True, help="JSON file to write (written only when every job finished)"
    )
    ap.add_argument("--splits", help="compare these splits, e.g. 2+6,4+4,6+2 (TARGETS+TRAINERS)")
    ap.add_argument(
        "--global-batch", type=int, default=24, help="samples per optimizer step in every split"
    )
    ap.add_argument(
        "--max-procs",
        type=int,
        default=None,
        help="largest T+G run as it is (default: the visible GPUs; no limit on CPU)",
    )
    ap.add_argument(
        "--keep-run",
        type=Path,
        help="one job (no --splits): run it in this directory and keep it (checkpoints included)",
    )
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for splitserve.train")
    args = ap.parse_args()
    if args.keep_run and args.splits:
        ap.error("--keep-run keeps one job's run directory; --splits runs several")
    out = Path(args.out)
    partial = out.with_name(out.name + ".partial")
    if args.splits:
        max_procs = args.max_procs if args.max_procs is not None else default_max_procs()

        def save_partial(rows):
            partial.write_text(
                json.dumps({**machine(), "complete": False, "splits": rows}, indent=1)
            )

        report = {
            **machine(),
            **compare_splits(
                parse_splits(args.splits),
                args.global_batch,
                max_procs,
                args.overrides,
                save_partial,
            ),
        }
    else:
        report = {**machine(), **measure(args.overrides, args.keep_run)}
    out.write_text(json.dumps(report, indent=1))
    partial.unlink(missing_ok=True)
    print(json.dumps(report if not args.splits else report["best"], indent=1))


if __name__ == "__main__":
    main()
