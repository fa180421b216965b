"""Benchmark of the split: throughput of each side and who waits for whom.

    python scripts/bench_train.py --out bench_train.json [Hydra overrides ...]
    python scripts/bench_train.py --out bench_train.json train.steps=12 split.target_procs=1

Runs a real training job (the same code path as `python -m splitserve.train`) into a temporary
run directory and writes JSON with, per side: samples/s and tokens/s (over each worker's wall
time), the fraction of time trainer workers waited for data, and the fraction of time target
workers waited for credit. Goal on GPU: the trainer never starved, the target never idle.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitserve.train import run, wait_fraction  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for splitserve.train")
    args = ap.parse_args()
    overrides = ["log.wandb_mode=disabled", "log.progress=false", "train.checkpoint_every=0", *args.overrides]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        node = compose("config", overrides=overrides)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        summary = run(node, run_dir)
        stats = {p.stem: json.loads(p.read_text()) for p in (run_dir / "stats").glob("*.json")}
    targets = [v for k, v in stats.items() if k.startswith("target")]
    trainers = [v for k, v in stats.items() if k.startswith("trainer")]
    report = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else (platform.processor() or "cpu"),
        "cpu_count": __import__("os").cpu_count(),
        "overrides": overrides,
        "steps": summary["steps"],
        "target": side(targets, "credit_wait_s") if targets else None,
        "trainer": side(trainers, "wait_s"),
        "first_loss": summary["first_loss"],
        "last_loss": summary["last_loss"],
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
